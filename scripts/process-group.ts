/**
 * The test runner's commands (scripts/run-tests.ts), each in a process group of its own: spawned
 * detached, so that its group id is its pid and what it starts (servers, clusters, tools) is in the
 * group with it, unless it moves them out itself. Stopping a command stops its group: SIGTERM, then
 * SIGKILL after STOP_GRACE_MS. That happens when the command runs past its time limit, when it exits
 * leaving processes of its group behind (they would hold its output open and outlive the run), and
 * for every command at once when the runner itself is stopped (`stopAllGroups`).
 */
import { spawn } from 'node:child_process';

/** What a stopped group gets to end on its own after SIGTERM, before SIGKILL. */
const STOP_GRACE_MS = 3_000;
/**
 * After a stop, how long the output may stay open: a process that left the group (setsid) and holds
 * it would otherwise keep the runner waiting for ever.
 */
const OUTPUT_AFTER_STOP_MS = 2 * STOP_GRACE_MS;

export interface Outcome {
  code: number | null;
  /** stdout and stderr together, as they came. */
  output: string;
  ms: number;
}

/** The groups running, by group id: how each is stopped, saying why in its output. */
const running = new Map<number, (why: string) => void>();

/** Signals a process group (0: none, only asks); false when nothing is left in it. */
function signalGroup(pgid: number, signal: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch {
    return false;
  }
}

/** SIGTERM to the group, then SIGKILL to whatever of it is left after STOP_GRACE_MS. */
function stopGroup(pgid: number): void {
  if (!signalGroup(pgid, 'SIGTERM')) return;
  setTimeout(() => signalGroup(pgid, 'SIGKILL'), STOP_GRACE_MS).unref();
}

/**
 * Runs `command` in a group of its own, collecting its output, until it and everything holding its
 * output have ended: a command past `timeoutMs` is stopped with its group, and so is what is left
 * of the group once the command exits.
 */
export function runGrouped(command: string, args: string[], options: { cwd: string; timeoutMs: number }): Promise<Outcome> {
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd: options.cwd, detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1' } });
    let output = '';
    const collect = (chunk: Buffer): void => void (output += chunk.toString('utf8'));
    child.stdout.on('data', collect);
    child.stderr.on('data', collect);
    const pgid = child.pid;
    let stopped = false;
    const stop = (why: string): void => {
      if (stopped) return;
      stopped = true;
      output += `\n[${why}]\n`;
      if (pgid !== undefined) stopGroup(pgid);
      setTimeout(() => {
        child.stdout.destroy();
        child.stderr.destroy();
      }, OUTPUT_AFTER_STOP_MS).unref();
    };
    if (pgid !== undefined) running.set(pgid, stop);
    const timer = setTimeout(() => stop(`stopped after ${options.timeoutMs / 1000} s, with the processes it started`), options.timeoutMs);
    child.on('error', (error) => (output += `${error.message}\n`));
    child.on('exit', () => {
      if (!stopped && pgid !== undefined && signalGroup(pgid, 0)) stop('processes it started were still running after it exited: stopped');
    });
    // 'close': the command has exited and its output has ended (nothing of its group holds it).
    child.on('close', (code) => {
      clearTimeout(timer);
      if (pgid !== undefined) running.delete(pgid);
      resolve({ code, output, ms: Date.now() - started });
    });
  });
}

/** Stops every group running (the runner got `signal`); their runs then end as stopped commands. */
export function stopAllGroups(signal: NodeJS.Signals): void {
  for (const stop of running.values()) stop(`stopped with the processes it started: the runner got ${signal}`);
}

/** Kills every group running at once (SIGKILL), for a runner that exits without waiting for them. */
export function killAllGroups(): void {
  for (const pgid of running.keys()) signalGroup(pgid, 'SIGKILL');
}
