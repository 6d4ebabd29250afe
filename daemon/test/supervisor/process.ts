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
}

/** Starts it on the fixture's state (options overridable) and resolves with its URL; the key travels in its environment. */
export async function startDaemonProcess(fixture: Fixture, overrides: Record<string, unknown> = {}): Promise<DaemonProcess> {
  const { apiKey: _key, ...options } = fixture.options;
  const child = spawn(process.execPath, [join(DIST_ROOT, 'daemon/test/supervisor/serve-process.js'), JSON.stringify({ ...options, ...overrides })], {
    env: { ...process.env, SVC_API_KEY: fixture.apiKey },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`daemon exited ${code}`)));
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const m = /^listening (\S+)$/.exec(line);
      if (m) resolve(m[1]!);
    });
  });
  child.removeAllListeners('exit');
  return { child, url, apiKey: fixture.apiKey };
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
