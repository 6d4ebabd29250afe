/**
 * `trajstore sync` raced by other commands, as real processes: two syncs of one source into one
 * dataset, a dataset dropped under a resident sync, syncs killed at many delays and rerun, and a
 * source rewritten, renamed or replaced between polls. After each: every complete line of every
 * source file converted exactly once, the mirror equal to the source, nothing stale.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, readFileSync, realpathSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { DIST_ROOT, runTool, toolScript } from '../../lib/testing/run-tool.js';
import { claudeLine, sessionFile } from './helpers/claude-log-writer.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { filesUnder, sandbox } from './helpers/sandbox.js';
import { isStopped, stopAfter } from './helpers/stop-points.js';

const s = sandbox('sync-race');
const WRITER = join(DIST_ROOT, 'pipelines', 'test', 'helpers', 'claude-log-writer.js');
const ended = (child: ChildProcess): boolean => child.exitCode !== null || child.signalCode !== null;

/** `lines` lines of Claude Code session `n`, as the source file holds them. */
const writeSession = (src: string, n: number, lines: number): void => {
  mkdirSync(join(src, 'project'), { recursive: true });
  writeFileSync(sessionFile(src, n), Array.from({ length: lines }, (_, i) => claudeLine(n, i)).join(''));
};

const once = (src: string, to: string, convert: string) => runTool('trajstore', ['sync', '--from', src, '--to', to, '--convert', convert, '--once'], { env: s.env, cwd: s.home });

const residents = new Set<ChildProcess>();
test.after.each(() => {
  for (const child of residents) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  residents.clear();
});

/** A process of its own (a resident sync, the log writer), its stdout and stderr collected. */
function started(command: string[], env: NodeJS.ProcessEnv = {}): { child: ChildProcess; out: () => string; err: () => string; exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }> } {
  const child = spawn(process.execPath, command, { cwd: s.home, env: { ...process.env, ...s.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  residents.add(child);
  let out = '';
  let err = '';
  child.stdout?.on('data', (chunk: Buffer) => (out += chunk.toString('utf8')));
  child.stderr?.on('data', (chunk: Buffer) => (err += chunk.toString('utf8')));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('close', (code, signal) => resolve({ code, signal })));
  return { child, out: () => out, err: () => err, exited };
}

export const residentSync = (args: string[]) => started([toolScript('trajstore'), 'sync', ...args]);

async function until(what: string, check: () => boolean, timeoutMs = 30_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

export const batchesIn = (stderr: string): number => (stderr.match(/^sync: batch \d+.*, ok$/gm) ?? []).length;

/** The marker steps in the dataset: [all, distinct]. */
async function markers(convert: string): Promise<[number, number]> {
  const r = await s.run(['query', convert, '--sql', "SELECT count(*), count(DISTINCT message_text) FROM steps WHERE message_text LIKE 'marker-%'", '--format', 'csv']);
  assert.is(r.code, 0, r.stderr);
  const [all, distinct] = r.stdout.trim().split('\n')[1]!.split(',').map(Number);
  return [all!, distinct!];
}

/** Waits for `lines` marker steps in the dataset (a resident sync's batches to come). */
async function converted(convert: string, lines: number, timeoutMs = 20_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!existsSync(join(convert, 'trajstore.json')) || (await markers(convert))[0] !== lines) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${lines} lines in ${convert}`);
    await sleep(100);
  }
}

/** Every complete line of the source converted once, and the mirror equal to the source, file by file. */
async function inStep(src: string, to: string, convert: string, lines: number): Promise<void> {
  assert.equal(await markers(convert), [lines, lines], 'every complete line converted, each once');
  assert.equal(filesUnder(to).filter((f) => !f.includes('.tmp-')), filesUnder(src), 'the mirror holds the source files');
  for (const rel of filesUnder(src)) assert.ok(readFileSync(join(src, rel)).equals(readFileSync(join(to, rel))), `${rel} mirrored as it is`);
}

test('two syncs of one source into one dataset while the logs grow: every line once, the mirror equal to the source, nothing stale', async () => {
  const SESSIONS = 6;
  const LINES = 30;
  const src = s.path('two-src');
  const [to, convert] = [s.path('two-mirror'), s.path('two-ds')];
  const writer = started([WRITER, src, String(SESSIONS), String(LINES), '10']);
  await until('the writer to start', () => existsSync(sessionFile(src, 0)));
  let writing = true;
  void writer.exited.then(() => (writing = false));
  const loop = async (): Promise<number> => {
    let runs = 0;
    while (writing) {
      const r = await once(src, to, convert);
      assert.ok(r.code === 0 || r.code === 4, r.stderr);
      runs += 1;
    }
    return runs;
  };
  await Promise.all([loop(), loop()]);
  assert.is(writer.out().trim(), String(SESSIONS * LINES));
  // Nothing changed since the last batches: a rerun finds the outputs as they should be.
  const last = await once(src, to, convert);
  assert.is(last.code, 0, last.stderr);
  await inStep(src, to, convert, SESSIONS * LINES);
});

test('a dataset synced from one source is refused (exit 4) to a sync from another, before anything is written, and two new syncs racing for one dataset leave it one source\'s', async () => {
  const [srcA, srcB] = [s.path('owner-a'), s.path('owner-b')];
  const convert = s.path('owner-ds');
  writeSession(srcA, 0, 2);
  writeSession(srcA, 1, 2);
  writeSession(srcB, 2, 3);
  assert.is((await once(srcA, s.path('owner-mirror-a'), convert)).code, 0);
  for (const args of [['--once'], ['--interval', '100ms']]) {
    const other = await runTool('trajstore', ['sync', '--from', srcB, '--to', s.path('owner-mirror-b'), '--convert', convert, ...args], { env: s.env, cwd: s.home });
    assert.is(other.code, 4, other.stderr);
    assert.match(other.stderr, `--convert ${realpathSync(convert)}: synced from ${realpathSync(srcA)}`);
    assert.not.ok(existsSync(s.path('owner-mirror-b')), 'nothing mirrored');
  }
  assert.equal(await markers(convert), [4, 4], 'the first source\'s runs, untouched');
  // The first source goes on as before.
  appendFileSync(sessionFile(srcA, 0), claudeLine(0, 2));
  assert.is((await once(srcA, s.path('owner-mirror-a'), convert)).code, 0);
  await inStep(srcA, s.path('owner-mirror-a'), convert, 5);

  // Two syncs of different sources started at once into a new dataset: one makes it, the other is refused under the lock.
  const race = s.path('owner-race-ds');
  const [a, b] = await Promise.all([once(srcA, s.path('race-mirror-a'), race), once(srcB, s.path('race-mirror-b'), race)]);
  assert.equal([a.code, b.code].sort(), [0, 4], `${a.stderr}\n${b.stderr}`);
  const [winner, mirror, lines] = a.code === 0 ? [srcA, s.path('race-mirror-a'), 5] : [srcB, s.path('race-mirror-b'), 3];
  await inStep(winner, mirror, race, lines);
  assert.match((a.code === 4 ? a : b).stderr, `synced from ${realpathSync(winner)}`);
  // Resident, the loser ends with exit 4 too (a refusal under the lock is not retried), and the winner goes on.
  const residents = [srcA, srcB].map((src, i) => residentSync(['--from', src, '--to', s.path(`resident-mirror-${i}`), '--convert', s.path('owner-resident-ds'), '--interval', '100ms']));
  await until('one of them to end', () => residents.some((r) => ended(r.child)), 20_000);
  const loser = residents.find((r) => ended(r.child))!;
  assert.is((await loser.exited).code, 4, loser.err());
  const survivor = residents.find((r) => r !== loser)!;
  await until('the survivor to go on', () => batchesIn(survivor.err()) >= 1);
  await sleep(300);
  assert.not.ok(ended(survivor.child), survivor.err());
  survivor.child.kill('SIGTERM');
  assert.is((await survivor.exited).code, 143, survivor.err());

  // A source moved away is taken over: the new one is synced, with a warning naming the old.
  renameSync(srcA, s.path('owner-a-moved'));
  const taken = await once(srcB, s.path('owner-mirror-b'), convert);
  assert.is(taken.code, 0, taken.stderr);
  assert.match(taken.stderr, `was synced from ${realpathSync(s.home)}/owner-a, which is gone`);
  assert.equal(await markers(convert), [8, 8], 'the moved source\'s runs stay beside the new one\'s');
});

test('two syncs sharing one --to: the mirror is one sync\'s at a time; the second waits (--lock-timeout), then exits 4 naming the holder, and writes nothing; once the first stops the same sync goes on, another is refused', async () => {
  const [srcA, srcB] = [s.path('shared-a'), s.path('shared-b')];
  const to = s.path('shared-mirror');
  // The same relative path in both: sharing the mirror, each would write over the other's copy, and a deletion in one remove the other's.
  writeSession(srcA, 0, 2);
  writeSession(srcA, 1, 2);
  writeSession(srcB, 0, 3);
  const first = residentSync(['--from', srcA, '--to', to, '--convert', s.path('shared-ds-a'), '--interval', '100ms']);
  await until('the first sync\'s batch', () => batchesIn(first.err()) >= 1);
  await inStep(srcA, to, s.path('shared-ds-a'), 4);
  // Another source, and the first source into another dataset: both are refused the mirror.
  for (const [src, convert] of [[srcB, s.path('shared-ds-b')], [srcA, s.path('shared-ds-a2')]] as const) {
    const other = await runTool('trajstore', ['sync', '--from', src, '--to', to, '--convert', convert, '--once', '--lock-timeout', '1s'], { env: s.env, cwd: s.home });
    assert.is(other.code, 4, other.stderr);
    assert.match(other.stderr, `${realpathSync(to)}: another writer holds the mirror's lock: pid ${first.child.pid} (sync --from ${realpathSync(srcA)}`);
    assert.match(other.stderr, 'waiting for');
    assert.not.ok(existsSync(join(convert, 'trajstore.json')), 'nothing converted');
  }
  await inStep(srcA, to, s.path('shared-ds-a'), 4);
  // Waiting, the same sync takes the mirror once the first has stopped.
  appendFileSync(sessionFile(srcA, 0), claudeLine(0, 2));
  const waiting = runTool('trajstore', ['sync', '--from', srcA, '--to', to, '--convert', s.path('shared-ds-a'), '--once', '--lock-timeout', '20s'], { env: s.env, cwd: s.home });
  await sleep(500);
  first.child.kill('SIGTERM');
  assert.is((await first.exited).code, 143, first.err());
  const late = await waiting;
  assert.is(late.code, 0, late.stderr);
  await inStep(srcA, to, s.path('shared-ds-a'), 5);
  // The others, no longer waiting, are refused the mirror as another sync's (sync-mirror-owner.test.ts).
  for (const [src, convert] of [[srcB, s.path('shared-ds-b')], [srcA, s.path('shared-ds-a2')]] as const) {
    const other = await runTool('trajstore', ['sync', '--from', src, '--to', to, '--convert', convert, '--once', '--lock-timeout', '0'], { env: s.env, cwd: s.home });
    assert.is(other.code, 4, other.stderr);
    assert.match(other.stderr, `--to ${realpathSync(to)}: the mirror of sync --from ${realpathSync(srcA)} --convert ${realpathSync(s.path('shared-ds-a'))}`);
  }
  // A holder killed outright blocks nobody.
  const killed = residentSync(['--from', srcA, '--to', to, '--convert', s.path('shared-ds-a'), '--interval', '100ms']);
  // It has nothing to convert: holding the mirror is all it does.
  await until('the killed sync to take the mirror', () => existsSync(s.path('.shared-mirror.lock')));
  killed.child.kill('SIGKILL');
  await killed.exited;
  const after = await runTool('trajstore', ['sync', '--from', srcA, '--to', to, '--convert', s.path('shared-ds-a'), '--once', '--lock-timeout', '0'], { env: s.env, cwd: s.home });
  assert.is(after.code, 0, after.stderr);
  await inStep(srcA, to, s.path('shared-ds-a'), 5);
});

test('a sync that read a log, then committed after another sync had converted a newer version of it: the newer version is what ends up converted', async () => {
  const src = s.path('order-src');
  const [to, convert] = [s.path('order-mirror'), s.path('order-ds')];
  writeSession(src, 0, 2);
  assert.is((await once(src, to, convert)).code, 0);
  const args = ['sync', '--from', src, '--to', to, '--convert', convert, '--once'];
  // A reads the log with a third line and is held right after mirroring it.
  appendFileSync(sessionFile(src, 0), claudeLine(0, 2));
  const a = started([toolScript('trajstore'), ...args], stopAfter({ call: 'rename', path: sessionFile(realpathSync(to), 0) }));
  await until('the first sync to be held after reading', () => ended(a.child) || isStopped(a.child));
  assert.not.ok(ended(a.child), a.err());
  // B reads it with a fourth, and is held right after it gives up the dataset's lock (or while it waits for A).
  appendFileSync(sessionFile(src, 0), claudeLine(0, 3));
  const b = started([toolScript('trajstore'), ...args], stopAfter({ call: 'rmdir', path: join(realpathSync(s.home), '.order-ds.lock') }));
  await until('the second sync to commit, or to wait for the first', () => ended(b.child) || isStopped(b.child) || /waiting for/.test(b.err()));
  a.child.kill('SIGCONT');
  assert.is((await a.exited).code, 0, a.err());
  await until('the second sync to be held or done', () => ended(b.child) || isStopped(b.child));
  b.child.kill('SIGCONT');
  assert.is((await b.exited).code, 0, b.err());
  const last = await once(src, to, convert);
  assert.is(last.code, 0, last.stderr);
  await inStep(src, to, convert, 4);
});

test('the dataset of a resident sync dropped under it: the next batch brings back every source file, not only those changed since', async () => {
  const src = s.path('drop-src');
  const [to, convert] = [s.path('drop-mirror'), s.path('drop-ds')];
  for (const n of [0, 1, 2]) writeSession(src, n, 2);
  const sync = residentSync(['--from', src, '--to', to, '--convert', convert, '--interval', '100ms']);
  await until('a first batch', () => batchesIn(sync.err()) >= 1);
  assert.equal(await markers(convert), [6, 6]);
  const dropped = await s.run(['drop', convert, '--yes']);
  assert.is(dropped.code, 0, dropped.stderr);
  appendFileSync(sessionFile(src, 0), claudeLine(0, 2));
  // The batch that takes the new line, whether or not one ran between the drop and the append.
  await converted(convert, 7);
  await inStep(src, to, convert, 7);
  // And a batch with nothing pending after a drop brings them back too.
  assert.is((await s.run(['drop', convert, '--yes'])).code, 0);
  await converted(convert, 7);
  await inStep(src, to, convert, 7);
  sync.child.kill('SIGTERM');
  assert.is((await sync.exited).code, 143, sync.err());
});

test('syncs, --once and resident, killed with SIGKILL at many delays while the logs grow, then a rerun: every line once, the mirror equal to the source', async () => {
  const SESSIONS = 4;
  const LINES = 50;
  const src = s.path('kill-src');
  const [to, convert] = [s.path('kill-mirror'), s.path('kill-ds')];
  const writer = started([WRITER, src, String(SESSIONS), String(LINES), '30']);
  await until('the writer to start', () => existsSync(sessionFile(src, 0)));
  let writing = true;
  void writer.exited.then(() => (writing = false));
  for (let round = 0; writing; round++) {
    const args = ['--from', src, '--to', to, '--convert', convert, ...(round % 2 === 0 ? ['--once'] : ['--interval', '30ms'])];
    const sync = residentSync(args);
    await sleep(100 + ((round * 137) % 900));
    sync.child.kill('SIGKILL');
    const { code, signal } = await sync.exited;
    assert.ok(signal === 'SIGKILL' || code === 0, sync.err());
  }
  assert.is(writer.out().trim(), String(SESSIONS * LINES));
  const last = await once(src, to, convert);
  assert.is(last.code, 0, last.stderr);
  await inStep(src, to, convert, SESSIONS * LINES);
});

test('a resident sync raced by import --mode append and drop of its dataset: once the logs stop, every line once and the mirror equal to the source', async () => {
  const SESSIONS = 3;
  const LINES = 40;
  const src = s.path('mixed-src');
  const [to, convert] = [s.path('mixed-mirror'), s.path('mixed-ds')];
  const other = s.path('mixed-other.storyline.json');
  writeFileSync(other, readFileSync(join(SHARED_FIXTURES, 'synthetic', 'storyline', 'incident-triage-0007.storyline.json')));
  const writer = started([WRITER, src, String(SESSIONS), String(LINES), '30']);
  await until('the writer to start', () => existsSync(sessionFile(src, 0)));
  let writing = true;
  void writer.exited.then(() => (writing = false));
  const sync = residentSync(['--from', src, '--to', to, '--convert', convert, '--interval', '50ms']);
  for (let round = 0; writing; round++) {
    const r = round % 3 === 2 ? await s.run(['drop', convert, '--yes']) : await s.run(['import', '-f', other, '-t', convert, '--mode', 'append']);
    // An append finds no dataset while the sync has not yet rebuilt a dropped one; a drop, none to drop.
    assert.ok([0, 3].includes(r.code ?? -1), r.stderr);
  }
  assert.is(writer.out().trim(), String(SESSIONS * LINES));
  await converted(convert, SESSIONS * LINES);
  await inStep(src, to, convert, SESSIONS * LINES);
  sync.child.kill('SIGTERM');
  assert.is((await sync.exited).code, 143, sync.err());
});

test('a log truncated and rewritten, renamed, then replaced by a symbolic link between polls: the dataset follows each', async () => {
  const src = s.path('shape-src');
  const [to, convert] = [s.path('shape-mirror'), s.path('shape-ds')];
  const log = join(src, 'project', 'a.jsonl');
  mkdirSync(join(src, 'project'), { recursive: true });
  writeFileSync(log, [0, 1, 2].map((n) => claudeLine(0, n)).join(''));
  const sync = residentSync(['--from', src, '--to', to, '--convert', convert, '--interval', '50ms']);
  await converted(convert, 3);
  // Rewritten in place (the same inode), shorter, with another session's lines.
  writeFileSync(log, [0, 1].map((n) => claudeLine(5, n)).join(''));
  await converted(convert, 2);
  await inStep(src, to, convert, 2);
  const rows = async (): Promise<string> => (await s.run(['query', convert, '--sql', "SELECT message_text FROM steps WHERE message_text LIKE 'marker-%' ORDER BY 1", '--format', 'csv'])).stdout;
  assert.match(await rows(), /marker-5-0\nmarker-5-1\n?$/);
  renameSync(log, join(src, 'project', 'b.jsonl'));
  await until('the rename mirrored', () => existsSync(join(to, 'project', 'b.jsonl')) && !existsSync(join(to, 'project', 'a.jsonl')));
  await converted(convert, 2);
  await inStep(src, to, convert, 2);
  // A link is not followed: the log is gone from the tree sync watches.
  const outside = s.path('shape-outside.jsonl');
  writeFileSync(outside, [0, 1, 2, 3].map((n) => claudeLine(6, n)).join(''));
  rmSync(join(src, 'project', 'b.jsonl'));
  symlinkSync(outside, join(src, 'project', 'b.jsonl'));
  await until('the link seen as a deletion', () => !existsSync(join(to, 'project', 'b.jsonl')));
  await converted(convert, 0);
  sync.child.kill('SIGTERM');
  assert.is((await sync.exited).code, 143, sync.err());
});

test.run();
