/**
 * Fake `codex` and `claude` programs (real processes) for `trajstore agent` tests: each records its
 * argv, environment, pid, stdin (when it is not a terminal) and the prompt file its last argument
 * names, so a test sees exactly what a real agent would get. FAKE_AGENT_EXIT sets its exit status,
 * FAKE_AGENT_SIGNAL has it kill itself with a signal, FAKE_AGENT_SLEEP keeps it running until a signal ends it.
 */
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface Recorded {
  name: string;
  argv: string[];
  env: Record<string, string>;
  pid: number;
  stdin: string;
  promptFile?: { path: string; text: string; mode: number };
}

/** Writes the fake agents into `bin`; each run of one overwrites `record`. */
export function installFakeAgents(bin: string, record: string): void {
  mkdirSync(bin, { recursive: true });
  const fake = `#!${process.execPath}
const fs = require('node:fs');
const path = require('node:path');
const argv = process.argv.slice(2);
const stdin = process.stdin.isTTY ? '' : fs.readFileSync(0, 'utf8');
const named = /Read the file (\\S+) and follow/.exec(argv[argv.length - 1] || '');
const promptFile = named ? { path: named[1], text: fs.readFileSync(named[1], 'utf8'), mode: fs.statSync(named[1]).mode & 0o777 } : undefined;
fs.writeFileSync(${JSON.stringify(record)}, JSON.stringify({ name: path.basename(process.argv[1]), argv, env: process.env, pid: process.pid, stdin, promptFile }));
if (process.env.FAKE_AGENT_SIGNAL) process.kill(process.pid, process.env.FAKE_AGENT_SIGNAL);
if (process.env.FAKE_AGENT_SLEEP) setInterval(() => undefined, 1000);
else process.exit(Number(process.env.FAKE_AGENT_EXIT || 0));
`;
  for (const name of ['codex', 'claude']) {
    writeFileSync(join(bin, name), fake);
    chmodSync(join(bin, name), 0o755);
  }
}

/** What the last fake agent recorded. */
export function readRecord(record: string): Recorded {
  return JSON.parse(readFileSync(record, 'utf8')) as Recorded;
}
