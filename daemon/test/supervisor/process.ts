/** The daemon of a fixture as a process of its own (serve-process.ts), for crash tests and benchmarks. */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { DIST_ROOT } from '../../../lib/testing/run-tool.js';
import type { Fixture } from './fixture.js';

export interface DaemonProcess {
  child: ChildProcess;
  url: string;
  /** The fixture's lifecycle key, which `api` sends. */
  apiKey: string;
  /** What it wrote to stderr so far (also passed on to this process's stderr). */
  stderr(): string;
}

export interface LaunchOptions {
  /** A command it runs under (which execs it, so that the child's pid is the daemon's), e.g. one that lowers its limits. */
  wrap?: string[];
}

/** A daemon that exited before it listened: its exit code and what it wrote to stderr. */
export class DaemonExit extends Error {
  constructor(
    readonly code: number | null,
    readonly stderr: string,
  ) {
    super(`daemon exited ${code}: ${stderr.trim()}`);
  }
}

/** Starts it on the fixture's state (options overridable) and resolves with its URL; the key travels in its environment. */
export async function startDaemonProcess(fixture: Fixture, overrides: Record<string, unknown> = {}, launch: LaunchOptions = {}): Promise<DaemonProcess> {
  const { apiKey: _key, ...options } = fixture.options;
  const [command, ...args] = [...(launch.wrap ?? []), process.execPath, join(DIST_ROOT, 'daemon/test/supervisor/serve-process.js'), JSON.stringify({ ...options, ...overrides })];
  const child = spawn(command!, args, {
    env: { ...process.env, SVC_API_KEY: fixture.apiKey },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr += chunk.toString('utf8');
    process.stderr.write(chunk);
  });
  const url = await new Promise<string>((resolve, reject) => {
    child.once('exit', (code) => reject(new DaemonExit(code, stderr)));
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const m = /^listening (\S+)$/.exec(line);
      if (m) resolve(m[1]!);
    });
  });
  child.removeAllListeners('exit');
  return { child, url, apiKey: fixture.apiKey, stderr: () => stderr };
}

/** A normal stop (SIGTERM; sandboxes keep running), resolved once the process has exited. */
export async function stopDaemonProcess(d: DaemonProcess): Promise<void> {
  const gone = new Promise((resolve) => d.child.once('exit', resolve));
  d.child.kill('SIGTERM');
  await gone;
}

/** One lifecycle call with the key: its status and JSON answer (undefined when empty). */
export async function api(d: DaemonProcess, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`${d.url}${path}`, {
    method,
    headers: { 'SVC-API-KEY': d.apiKey, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : undefined };
}
