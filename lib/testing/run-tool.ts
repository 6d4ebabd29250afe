/** Runs a built tool (or any built script) as a subprocess, as a user would, and collects what it printed. */
import { spawn, type ChildProcess } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** dist/ of the build these tests run from. */
export const DIST_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export interface ToolResult {
  stdout: string;
  stderr: string;
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface RunOptions {
  input?: string | Buffer;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  timeoutMs?: number;
  /** The signal that ends a run past `timeoutMs` (spawn's default: SIGTERM). */
  killSignal?: NodeJS.Signals;
  /** A signal sent to the tool once `when` holds (looked at every 20 ms): a stop in the middle of its work. */
  stop?: { signal: NodeJS.Signals; when: () => boolean };
  /** Called with the tool's process once it is spawned, for a test that signals it (SIGCONT to one held by the kill-point shim). */
  onSpawn?: (child: ChildProcess) => void;
  /** Run as this user and group (the test runs as root): permissions bind other users only. */
  uid?: number;
  gid?: number;
}

/** The executable of a built tool (`trajstore`, `actorctl`, `sandboxd`), as a user runs it. */
export function toolScript(tool: string): string {
  return join(DIST_ROOT, 'bin', `${tool}.js`);
}

/** `tool` is `trajstore`, `actorctl`, `sandboxd`, or a path to a script relative to dist/. */
export function runTool(tool: string, args: string[], options: RunOptions = {}): Promise<ToolResult> {
  const script = tool.includes('/') ? join(DIST_ROOT, tool) : toolScript(tool);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, ...args], {
      cwd: options.cwd,
      uid: options.uid,
      gid: options.gid,
      env: { ...process.env, ...options.env },
      stdio: ['pipe', 'pipe', 'pipe'],
      timeout: options.timeoutMs ?? 60_000,
      ...(options.killSignal ? { killSignal: options.killSignal } : {}),
    });
    options.onSpawn?.(child);
    const stop = options.stop;
    const watch = stop
      ? setInterval(() => {
          if (!stop.when()) return;
          clearInterval(watch);
          child.kill(stop.signal);
        }, 20)
      : undefined;
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    child.stdout.on('data', (chunk: Buffer) => stdout.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearInterval(watch);
      resolve({ stdout: Buffer.concat(stdout).toString('utf8'), stderr: Buffer.concat(stderr).toString('utf8'), code, signal });
    });
    child.stdin.on('error', () => {}); // the tool may exit before reading its input
    child.stdin.end(options.input ?? '');
  });
}
