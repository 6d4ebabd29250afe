/**
 * Starts real `actorctl actor` node processes on loopback for tests, and makes sure every one of
 * them is killed when the test file ends, whatever happened.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http2 from 'node:http2';
import { join } from 'node:path';
import { DIST_ROOT } from '../../../lib/testing/run-tool.js';
import { DEFAULT_CLUSTER, TIMER_SETTING_KEYS, type MembershipTimers } from '../../core/members.js';
import { CLUSTER_HEADER } from '../../core/transport.js';

/** Short membership timers so that failure detection takes about a second in tests (an in-process `ActorSystem`, a test's client). */
export const FAST_CLIENT_TIMERS: Partial<MembershipTimers> = {
  probeIntervalMs: 100,
  probeTimeoutMs: 150,
  indirectTimeoutMs: 300,
  suspectTimeoutMs: 1500,
  syncIntervalMs: 500,
  joinRetryMs: 200,
};

/**
 * The same timers as `-D cluster.<key>` settings (without the `cluster.` prefix) for node
 * processes, derived so the two cannot drift apart; nodes also forget removed members sooner.
 */
const FAST_NODE_TIMERS: Partial<MembershipTimers> = { ...FAST_CLIENT_TIMERS, removeAfterMs: 20_000 };
export const FAST_TIMERS: Record<string, number> = Object.fromEntries(
  [...TIMER_SETTING_KEYS].flatMap(([setting, key]) => (FAST_NODE_TIMERS[key] === undefined ? [] : [[setting.slice('cluster.'.length), FAST_NODE_TIMERS[key]]])),
);

export interface NodeProcess {
  proc: ChildProcess;
  addr: string;
  nodeId: string;
  output(): string;
  /** Resolves with the exit code (or signal name) when the process has ended. */
  exited: Promise<number | string>;
}

const live = new Set<ChildProcess>();
process.on('exit', () => {
  for (const p of live) p.kill('SIGKILL');
});

export interface NodeOptions {
  addr?: string;
  seeds?: string[];
  name?: string;
  classPath?: string;
  params?: string[];
  timers?: Record<string, number>;
  env?: NodeJS.ProcessEnv;
  /** A command the node runs under, e.g. `['ip', 'netns', 'exec', 'ns1']`. */
  wrap?: string[];
  /** More arguments of `actorctl actor` (before `--`): `--insecure`, TLS files, `-c FILE`... */
  extraArgs?: string[];
}

export async function startNode(options: NodeOptions = {}): Promise<NodeProcess> {
  // At info level the node says what it loaded, how membership changes and how it stops (tests read output()).
  const args = [join(DIST_ROOT, 'cli', 'actorctl.js'), '--log-level', 'info', 'actor', options.classPath ?? 'framework.examples.Echo', '--addr', options.addr ?? '127.0.0.1:0', '--name', options.name ?? 'echo'];
  if (options.seeds?.length) args.push('--seeds', options.seeds.join(','));
  for (const [k, v] of Object.entries(options.timers ?? FAST_TIMERS)) args.push('-D', `cluster.${k}=${v}`);
  args.push(...(options.extraArgs ?? []));
  if (options.params) args.push('--', ...options.params);
  const [command, ...prefix] = [...(options.wrap ?? []), process.execPath];
  const proc = spawn(command!, [...prefix, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ACTORCTL_TEST_FAULTS: '1', ...options.env } });
  live.add(proc);
  let text = '';
  proc.stdout!.on('data', (c: Buffer) => (text += c.toString()));
  proc.stderr!.on('data', (c: Buffer) => (text += c.toString()));
  const exited = new Promise<number | string>((resolve) =>
    proc.once('exit', (code, signal) => {
      live.delete(proc);
      resolve(code ?? signal ?? -1);
    }),
  );
  const started = await new Promise<RegExpExecArray>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`node did not start within 15 s:\n${text}`)), 15_000);
    const check = (): void => {
      const m = /Started at (\S+) \(node ([0-9a-f]{32})\)/.exec(text);
      if (m) {
        clearTimeout(timer);
        proc.stdout!.off('data', check);
        resolve(m);
      }
    };
    proc.stdout!.on('data', check);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`node exited (${code}) before starting:\n${text}`));
    });
  });
  return { proc, addr: started[1]!, nodeId: started[2]!, output: () => text, exited };
}

/** Kills every node still running (SIGKILL) and waits for them to be gone. */
export async function killAll(): Promise<void> {
  const waits = [...live].map((p) => new Promise<void>((resolve) => (p.exitCode !== null || p.signalCode !== null ? resolve() : p.once('exit', () => resolve()))));
  for (const p of live) p.kill('SIGKILL');
  await Promise.all(waits);
}

/** The membership list the node at `addr` serves on `/cluster/members`. */
export async function clusterMembers(addr: string): Promise<Array<{ node_id: string; addr: string; status: string }>> {
  return JSON.parse((await h2Request(addr, { ':path': '/cluster/members' })).body) as Array<{ node_id: string; addr: string; status: string }>;
}

/** Member statuses by address, as the node at `addr` sees them. */
export async function memberStatuses(addr: string): Promise<Map<string, string>> {
  return new Map((await clusterMembers(addr)).map((m) => [m.addr, m.status]));
}

/** The arguments of `actorctl inspect cluster` whose output `parseInspectStatuses` reads. */
export const INSPECT_CLUSTER = ['inspect', 'cluster', '--format', 'json'];

/** Member statuses by address from `actorctl inspect cluster --format json` output. */
export function parseInspectStatuses(stdout: string): Map<string, string> {
  const members = JSON.parse(stdout) as Array<{ addr: string; status: string }>;
  return new Map(members.map((m) => [m.addr, m.status]));
}

/** Polls `probe` until it returns a truthy value or `timeoutMs` passes. */
export async function waitFor<T>(what: string, probe: () => Promise<T | undefined | false> | T | undefined | false, timeoutMs = 15_000, everyMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (last error: ${(last as Error).message})` : ''}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** One HTTP/2 request (h2c) to `addr` with `headers` (pseudo-headers included) and `body`; the status and text of the answer. */
export function h2Request(addr: string, headers: http2.OutgoingHttpHeaders, body?: Buffer | string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://${addr}`);
    session.on('error', reject);
    const req = session.request(headers);
    let status = 0;
    let text = '';
    req.on('response', (h) => (status = Number(h[':status'])));
    req.on('data', (c: Buffer) => (text += c.toString()));
    req.on('end', () => {
      session.close();
      resolve({ status, body: text });
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** POSTs `body` (JSON) to `path` on the node at `addr`, as a peer of the default cluster does. */
export const postAsPeer = (addr: string, path: string, body: unknown, headers: http2.OutgoingHttpHeaders = {}) =>
  h2Request(addr, { ':method': 'POST', ':path': path, [CLUSTER_HEADER]: DEFAULT_CLUSTER, ...headers }, JSON.stringify(body));

/** Resident set size of a process, in bytes. */
export function rss(pid: number): number {
  const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(kb![1]) * 1024;
}
