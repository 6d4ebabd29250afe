/**
 * The gateway log's `settled.log` (event-log.ts) holds one line per settle of a trace, the latest of
 * a trace standing for it: a trace settled again (a late event, projected again) supersedes its
 * line. A resident gateway settles for days, so the file
 * - is rewritten with only the latest lines once enough are superseded, and stays bounded by its traces;
 * - loses nothing when the rewrite is killed at any of its steps (the old file is kept until the new
 *   one is whole and fsynced);
 * - is read at start-up a slice at a time, not whole.
 * All on real log directories, the crashes by SIGKILL at each rename/fsync/unlink (lib/testing/killpoint.c).
 */
import { spawnSync } from 'node:child_process';
import { cpSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { crc32 } from 'node:zlib';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Logger } from '../../lib/log.js';
import { DIST_ROOT } from '../../lib/testing/run-tool.js';
import { scratchDir } from '../../lib/testing/scratch.js';
import { EventLog, SETTLED_REWRITE_MIN_SUPERSEDED } from '../serve/gateway/event-log.js';

const home = scratchDir('gateway-settled-log-');
const log = new Logger('error', { write: () => {} });
const SHIM = join(DIST_ROOT, 'lib', 'testing', 'killpoint.so');
const EVENT_LOG = pathToFileURL(join(DIST_ROOT, 'pipelines', 'serve', 'gateway', 'event-log.js')).href;
const LOGGER = pathToFileURL(join(DIST_ROOT, 'lib', 'log.js')).href;
/** The dataset's copy of settled events: never read here (no trace's events are asked for). */
const archive = async (): Promise<never[]> => [];

const record = (seq: number) => ({ seq, source: 'sdk', kind: 'note', payload: { text: `event ${seq}` } });
const linesOf = (dir: string): number => readFileSync(join(dir, 'settled.log'), 'utf8').split('\n').length - 1;

/** Appends records `seqs` to each of `sessions` and settles them all (as a projection does once they are in the dataset). */
async function appendAndSettle(events: EventLog, sessions: string[], seqs: number[]): Promise<void> {
  const results = await events.appendAll(sessions.map((sessionId) => ({ agentId: 'a', sessionId, partition: () => '', records: seqs.map(record) })));
  await events.settle(results.map(({ trace }) => [trace, trace.events] as const));
}

/** What the log knows of every trace after a fresh open: its events, and whether seqs 0..n-1 are duplicates and n is new. */
async function assertKnows(dir: string, sessions: string[], n: number): Promise<void> {
  const events = await EventLog.open(dir, log, {}, archive);
  try {
    for (const sessionId of sessions) {
      const trace = events.get({ agentId: 'a', sessionId });
      assert.equal([trace?.events, trace?.archived], [n, n], sessionId);
    }
    const retry = await events.appendAll(sessions.map((sessionId) => ({ agentId: 'a', sessionId, partition: () => '', records: [...Array(n).keys()].map(record) })));
    assert.ok(retry.every((r) => r.stored === 0 && r.duplicates === n), 'a retry of what was settled is a duplicate');
  } finally {
    await events.close();
  }
}

test('a trace settled again and again supersedes its line: settled.log is rewritten and stays within twice its traces', async () => {
  const dir = join(home, 'resettled');
  const sessions = Array.from({ length: 600 }, (_, i) => `s${i}`);
  const events = await EventLog.open(dir, log, {}, archive);
  try {
    // Each round is a late event for every trace, projected and settled again: 600 more lines.
    for (let round = 0; round < 5; round++) {
      await appendAndSettle(events, sessions, [round]);
      assert.ok(linesOf(dir) <= Math.max(2 * sessions.length, sessions.length + SETTLED_REWRITE_MIN_SUPERSEDED), `round ${round}: settled.log has ${linesOf(dir)} lines for ${sessions.length} traces`);
    }
  } finally {
    await events.close();
  }
  assert.equal(readdirSync(dir).filter((name) => name.startsWith('settled')), ['settled.log']);
  // Rewritten (rounds 2 and 4) and appended to since (round 5): every trace's latest line is the one read.
  await assertKnows(dir, sessions, 5);
});

/** A settled.log line, as the log writes them (the JSON, a tab, its CRC-32, a newline): a file an earlier gateway grew. */
function settledLine(sessionId: string, n: number, padding = 0): string {
  const json = JSON.stringify({ a: 'a', s: sessionId, p: '', n, b: n * 100, f: null, l: null, seqs: { sdk: [0, n - 1] }, ...(padding > 0 ? { pad: 'x'.repeat(padding) } : {}) });
  return `${json}\t${crc32(Buffer.from(json)).toString(16).padStart(8, '0')}\n`;
}

/** A log directory whose settled.log has `versions` lines for each of `traces` traces (n = 1..versions), the last the latest. */
function grownLog(dir: string, traces: number, versions: number, padding = 0): string[] {
  const sessions = Array.from({ length: traces }, (_, i) => `g${i}`);
  const lines: string[] = [];
  for (let n = 1; n <= versions; n++) for (const s of sessions) lines.push(settledLine(s, n, padding));
  cpSync(join(home, 'empty'), dir, { recursive: true });
  writeFileSync(join(dir, 'settled.log'), lines.join(''));
  return sessions;
}

/**
 * Opens and closes the log in `dir` in a child process (where the rewrite at start-up runs), under
 * `env`; its exit status, stderr and peak memory (VmHWM: getrusage's maxrss would count the test
 * process's own, as it survives exec).
 */
function openInChild(dir: string, env: NodeJS.ProcessEnv = {}): { status: number | null; signal: NodeJS.Signals | null; stderr: string; peakKb: number } {
  const script = `import { EventLog } from ${JSON.stringify(EVENT_LOG)}; import { Logger } from ${JSON.stringify(LOGGER)};
    const events = await EventLog.open(${JSON.stringify(dir)}, new Logger('error'), {}, async () => []);
    await events.close();
    const { readFileSync } = await import('node:fs');
    process.stdout.write(/^VmHWM:\\s+(\\d+) kB$/m.exec(readFileSync('/proc/self/status', 'utf8'))[1]);`;
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], { env: { ...process.env, ...env }, encoding: 'utf8' });
  return { status: child.status, signal: child.signal, stderr: child.stderr, peakKb: Number(child.stdout) };
}

test.before(async () => {
  // A log directory with its segment made, for grownLog to copy.
  await (await EventLog.open(join(home, 'empty'), log, {}, archive)).close();
});

test('a settled.log grown by an earlier gateway is rewritten at start-up; killed at any step of it, nothing is lost', async () => {
  const template = join(home, 'grown');
  const sessions = grownLog(template, 400, 4);
  // A rewrite killed before it was fsynced left its temporary behind: it is not taken for anything.
  writeFileSync(join(template, 'settled.log.partial'), settledLine('g0', 99).slice(0, 20));
  const callLog = join(home, 'calls.log');
  const clean = join(home, 'clean');
  cpSync(template, clean, { recursive: true });
  const run = openInChild(clean, { LD_PRELOAD: SHIM, KILLPOINT_LOG: callLog });
  assert.is(run.status, 0, run.stderr);
  assert.is(linesOf(clean), 400, 'rewritten with only the latest lines');
  assert.equal(readdirSync(clean).filter((name) => name.startsWith('settled')), ['settled.log']);
  const calls = readFileSync(callLog, 'utf8').trim().split('\n');
  assert.ok(calls.some((line) => / rename .*settled\.log\.partial/.test(line)), calls.join('\n'));
  for (let n = 1; n <= calls.length; n++) {
    const dir = join(home, `killed-${n}`);
    cpSync(template, dir, { recursive: true });
    const killed = openInChild(dir, { LD_PRELOAD: SHIM, KILLPOINT_AT: String(n) });
    assert.is(killed.signal, 'SIGKILL', `call ${n} (${calls[n - 1]}): ${killed.stderr}`);
    // What it left: the old file or the new one, each with every trace's latest summary.
    assert.ok([1600, 400].includes(linesOf(dir)), `killed after ${calls[n - 1]}: ${linesOf(dir)} lines`);
    await assertKnows(dir, sessions, 4);
    assert.equal(readdirSync(dir).filter((name) => name.startsWith('settled')), ['settled.log'], `killed after ${calls[n - 1]}`);
    assert.is(linesOf(dir), 400, `killed after ${calls[n - 1]}, then opened again`);
  }
});

test('settled.log is read a slice at a time at start-up: a file of 200 MB does not take 200 MB of memory', async () => {
  const dir = join(home, 'big');
  // 10 traces superseded 20,000 times each, 1 KB a line.
  const sessions = grownLog(dir, 10, 20_000, 1000);
  const bytes = readFileSync(join(dir, 'settled.log')).length;
  assert.ok(bytes > 200 * 1024 * 1024, `${bytes} bytes`);
  const baseline = openInChild(join(home, 'empty'));
  const opened = openInChild(dir);
  assert.is(opened.status, 0, opened.stderr);
  const grownMb = (opened.peakKb - baseline.peakKb) / 1024;
  // Read whole, the file alone took its 200 MB (211 MB measured). Read in slices, what is left is the
  // garbage of 200,000 parsed lines, which a busy machine collects later: 8 to 65 MB measured.
  assert.ok(grownMb < 128, `reading it took ${grownMb.toFixed(0)} MB more than opening an empty log`);
  assert.is(linesOf(dir), 10);
  await assertKnows(dir, sessions, 20_000);
});

test.run();
