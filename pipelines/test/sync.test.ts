/**
 * `trajstore sync` through the real command: a writer process appending Claude Code lines while the
 * resident worker runs, killed with SIGKILL in the middle of its batches and restarted (every
 * complete line imported exactly once, one run per session); partial lines, rotated and deleted
 * files; bad arguments; compaction and reclamation with an old reader's snapshot kept for the grace
 * period; compact-jsonl; and the clean stop on SIGTERM.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { appendFileSync, chmodSync, cpSync, existsSync, mkdirSync, readFileSync, readdirSync, realpathSync, renameSync, rmSync, symlinkSync, truncateSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { DIST_ROOT, runTool, toolScript } from '../../lib/testing/run-tool.js';
import { openPart } from '../dataset/parquet.js';
import { LocalObjectStore } from '../dataset/store.js';
import type { Snapshot } from '../dataset/layout.js';
import { retryDelayMs } from '../sync/worker.js';
import { claudeLine, sessionFile, sessionIdOf } from './helpers/claude-log-writer.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { sandbox } from './helpers/sandbox.js';

const s = sandbox('sync');
const CLAUDE = join(SHARED_FIXTURES, 'synthetic', 'claude-code', 'projects');
const WRITER = join(DIST_ROOT, 'pipelines', 'test', 'helpers', 'claude-log-writer.js');

const csv = async (dataset: string, sql: string): Promise<string[][]> => {
  const r = await s.run(['query', dataset, '--sql', sql, '--format', 'csv']);
  assert.is(r.code, 0, r.stderr);
  return r.stdout.trim().split('\n').slice(1).map((line) => line.split(','));
};

interface User {
  uid?: number;
  gid?: number;
}

/**
 * A user that file permissions bind, for the tests of unreadable sources: root reads chmod-000
 * files, so under root the sync runs as nobody, and the sandbox (what the test wrote in it) is made
 * nobody's first (permission bits then bind nobody as the owner).
 */
function unprivileged(): User {
  if (process.getuid?.() !== 0) return {};
  spawnSync('chown', ['-R', '65534:65534', s.home]);
  return { uid: 65534, gid: 65534 };
}

const once = (src: string, to: string, convert: string, env: NodeJS.ProcessEnv = {}, user: User = {}) =>
  runTool('trajstore', ['sync', '--from', src, '--to', to, '--convert', convert, '--once'], { env: { ...s.env, ...env }, cwd: s.home, ...user });

/** Resident processes still running when a test ends (it failed): killed, so that the file's run ends. */
const residents = new Set<ChildProcess>();
test.after.each(() => {
  for (const child of residents) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  residents.clear();
});

/** A resident sync process, its stderr collected. */
function resident(args: string[], env: NodeJS.ProcessEnv = {}, user: User = {}): { child: ChildProcess; stderr: () => string; exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }> } {
  const child = spawn(process.execPath, [toolScript('trajstore'), 'sync', ...args], { cwd: s.home, env: { ...process.env, ...s.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'], ...user });
  residents.add(child);
  let err = '';
  child.stderr?.on('data', (chunk: Buffer) => (err += chunk.toString('utf8')));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('close', (code, signal) => resolve({ code, signal })));
  return { child, stderr: () => err, exited };
}

async function until(what: string, check: () => boolean, timeoutMs = 30_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

const batchesIn = (stderr: string): number => (stderr.match(/^sync: batch \d+.*, ok$/gm) ?? []).length;

test('a writer appends to several sessions while sync runs; kill -9 mid-batch and a restart: every complete line once, one run per session', async () => {
  const src = s.path('live-src');
  const [to, convert] = [s.path('live-mirror'), s.path('live-ds')];
  const SESSIONS = 4;
  const LINES = 60;
  const writer = spawn(process.execPath, [WRITER, src, String(SESSIONS), String(LINES), '20'], { stdio: ['ignore', 'pipe', 'inherit'] });
  let written = '';
  writer.stdout?.on('data', (chunk: Buffer) => (written += chunk.toString('utf8')));
  const writerDone = new Promise<void>((resolve) => writer.on('close', () => resolve()));
  await until('the writer to start', () => existsSync(join(src, 'project')));

  const args = ['--from', src, '--to', to, '--convert', convert, '--interval', '100ms'];
  const first = resident(args);
  await until('two batches', () => batchesIn(first.stderr()) >= 2);
  // In the middle of a batch: while it holds the dataset's writer lock.
  await until('a batch under way', () => existsSync(join(s.home, '.live-ds.lock')), 10_000);
  first.child.kill('SIGKILL');
  const killed = await first.exited;
  assert.is(killed.signal, 'SIGKILL');

  const second = resident(args);
  await writerDone;
  assert.is(written.trim(), String(SESSIONS * LINES));
  // The last line is complete: a batch after the writer's end takes it.
  const batchesBefore = batchesIn(second.stderr());
  await until('a batch after the writer ended', () => batchesIn(second.stderr()) >= batchesBefore + 1);
  await sleep(300);
  second.child.kill('SIGTERM');
  const stopped = await second.exited;
  assert.is(stopped.code, 143, second.stderr());
  // Whatever the last batch was doing when stopped, one more --once brings the dataset up to date.
  const last = await once(src, to, convert);
  assert.is(last.code, 0, last.stderr);

  const [[runs, sessions]] = (await csv(convert, 'SELECT count(*), count(DISTINCT session_id) FROM runs')) as [[string, string]];
  assert.is(Number(runs), SESSIONS, 'one run per session');
  assert.is(Number(sessions), SESSIONS);
  const [[steps, distinct]] = (await csv(convert, "SELECT count(*), count(DISTINCT message_text) FROM steps WHERE message_text LIKE 'marker-%'")) as [[string, string]];
  assert.is(Number(steps), SESSIONS * LINES, 'every complete line imported');
  assert.is(Number(distinct), SESSIONS * LINES, 'each exactly once');
  for (let i = 0; i < SESSIONS; i++) assert.ok(readFileSync(sessionFile(src, i)).equals(readFileSync(sessionFile(to, i))), 'mirrored byte for byte');
  assert.not.match(readdirSync(s.home).join(' '), /\.live-ds\.(tmp|lock)/, 'no leftovers beside the dataset');
});

test('partial lines wait; a grown session replaces its run; rotated and deleted files leave the next snapshot', async () => {
  const src = s.path('p-src');
  const [to, convert] = [s.path('p-mirror'), s.path('p-ds')];
  mkdirSync(join(src, 'project'), { recursive: true });
  const file = sessionFile(src, 1);
  writeFileSync(file, claudeLine(1, 0) + claudeLine(1, 1));
  cpSync(CLAUDE, join(src, 'fixtures'), { recursive: true });
  assert.is((await once(src, to, convert)).code, 0);
  const runsOf = async (): Promise<number> => Number((await csv(convert, 'SELECT count(*) FROM runs'))[0]?.[0]);
  const markers = async (): Promise<number> => Number((await csv(convert, "SELECT count(*) FROM steps WHERE message_text LIKE 'marker-%'"))[0]?.[0]);
  const fixtureRuns = (await runsOf()) - 1;
  assert.is(await markers(), 2);

  // Half a line: mirrored as it is, not converted.
  const next = claudeLine(1, 2);
  appendFileSync(file, next.slice(0, 30));
  const partial = await once(src, to, convert);
  assert.is(partial.code, 0, partial.stderr);
  assert.match(partial.stderr, /sync: batch 1: 1 file\(s\), 1 record\(s\), [\d.]+s, ok/);
  assert.is(await markers(), 2);
  assert.ok(readFileSync(file).equals(readFileSync(sessionFile(to, 1))));

  appendFileSync(file, next.slice(30));
  assert.is((await once(src, to, convert)).code, 0);
  assert.is(await markers(), 3);
  assert.is(await runsOf(), fixtureRuns + 1, 'the grown session replaced its run');
  const ids = (await csv(convert, `SELECT document_id FROM runs WHERE session_id = '${sessionIdOf(1)}'`)).map((r) => r[0]);
  assert.equal(ids, [sessionIdOf(1)], 'no #2 copy');

  // Rotated: the same log under another name; the run follows it, still once.
  const rotated = join(src, 'project', 'rotated.jsonl');
  renameSync(file, rotated);
  assert.is((await once(src, to, convert)).code, 0);
  assert.is(await markers(), 3);
  assert.equal((await csv(convert, `SELECT source_path FROM runs WHERE session_id = '${sessionIdOf(1)}'`)).map((r) => r[0]), ['project/rotated.jsonl']);
  assert.not.ok(existsSync(sessionFile(to, 1)), 'the old name left the mirror');

  // Deleted: its runs leave.
  rmSync(rotated);
  const gone = await once(src, to, convert);
  assert.is(gone.code, 0, gone.stderr);
  assert.is(await markers(), 0);
  assert.is(await runsOf(), fixtureRuns);
  const [[sources]] = (await csv(convert, "SELECT count(*) FROM sources WHERE source_path LIKE 'project/%'")) as [[string]];
  assert.is(Number(sources), 0);

  // Nothing changed: no batch work, nothing re-read.
  const idle = await once(src, to, convert);
  assert.match(idle.stderr, /0 file\(s\), 0 record\(s\)/);

  // Export rebuilds each run from the parts, leaving the retired rows out.
  const exported = await s.run(['export', '-f', convert, '-t', s.path('p-export'), '-o', 'storyline']);
  assert.is(exported.code, 0, exported.stderr);
  assert.match(exported.stdout, new RegExp(`exported ${fixtureRuns} document`));
  // The sync state is part of the dataset: drop takes it too.
  const dropped = await s.run(['drop', convert, '--yes']);
  assert.is(dropped.code, 0, dropped.stderr);
});

test('temporaries a killed sync left in the mirror are swept once stale; a fresh one (a batch under way) stays', async () => {
  const src = s.path('t-src');
  const [to, convert] = [s.path('t-mirror'), s.path('t-ds')];
  mkdirSync(join(src, 'project'), { recursive: true });
  writeFileSync(sessionFile(src, 1), claudeLine(1, 0));
  // Left in the sync's own mirror (a directory that is no mirror of it is not swept: sync-mirror-owner.test.ts).
  assert.is((await once(src, to, convert)).code, 0);
  const stale = join(to, 'project', 's.jsonl.tmp-0123456789ab');
  const fresh = join(to, 'project', 's.jsonl.tmp-ba9876543210');
  const mine = join(to, 'project', 'notes.tmp-draft');
  for (const file of [stale, fresh, mine]) writeFileSync(file, 'x');
  const hourAgo = new Date(Date.now() - 3_600_000);
  for (const file of [stale, mine]) utimesSync(file, hourAgo, hourAgo);
  assert.is((await once(src, to, convert)).code, 0);
  assert.not.ok(existsSync(stale), 'the stale temporary is gone');
  assert.ok(existsSync(fresh), 'a fresh one stays');
  assert.ok(existsSync(mine), 'a name that is no temporary of ours stays');
});

test('a synced directory replaced by a looping link, a link out of the source or a file is a deletion (nothing is read through the link); the other files go on', async () => {
  const src = s.path('gone-src');
  const [to, convert] = [s.path('gone-mirror'), s.path('gone-ds')];
  mkdirSync(join(src, 'loop'), { recursive: true });
  mkdirSync(join(src, 'flat'), { recursive: true });
  writeFileSync(join(src, 'loop', 'a.jsonl'), claudeLine(81, 0));
  writeFileSync(join(src, 'flat', 'b.jsonl'), claudeLine(82, 0));
  writeFileSync(join(src, 'c.jsonl'), claudeLine(83, 0));
  // A directory that becomes a link to one outside the source, holding a file of the same path.
  mkdirSync(join(src, 'ext'));
  writeFileSync(join(src, 'ext', 'x.jsonl'), claudeLine(84, 0));
  const outside = s.path('gone-outside');
  mkdirSync(outside, { recursive: true });
  writeFileSync(join(outside, 'x.jsonl'), claudeLine(85, 0));
  assert.is((await once(src, to, convert)).code, 0);
  rmSync(join(src, 'ext'), { recursive: true });
  symlinkSync(outside, join(src, 'ext'));
  rmSync(join(src, 'loop'), { recursive: true });
  symlinkSync('loop', join(src, 'loop'));
  rmSync(join(src, 'flat'), { recursive: true });
  writeFileSync(join(src, 'flat'), 'not a directory now');
  appendFileSync(join(src, 'c.jsonl'), claudeLine(83, 1));
  const r = await once(src, to, convert);
  assert.is(r.code, 0, r.stderr);
  const markers = (await csv(convert, "SELECT message_text FROM steps WHERE message_text LIKE 'marker-%' ORDER BY 1")).map((row) => row[0]);
  assert.equal(markers, ['marker-83-0', 'marker-83-1']);
  assert.not.ok(existsSync(join(to, 'loop', 'a.jsonl')) || existsSync(join(to, 'flat', 'b.jsonl')) || existsSync(join(to, 'ext', 'x.jsonl')), 'their mirror copies are gone');
});

test('bad arguments exit 2 (a missing source 3), before anything is written', async () => {
  const src = s.path('bad-src');
  mkdirSync(src, { recursive: true });
  const cases: Array<[string[], number, RegExp]> = [
    [['--to', join(src, 'mirror'), '--convert', s.path('bad-ds')], 2, /inside the source directory/],
    [['--to', s.path('bad-mirror'), '--convert', join(src, 'x', 'ds')], 2, /inside the source directory/],
    // A mirror holding its source would write over the source's files, and delete them.
    [['--to', s.path(''), '--convert', s.path('bad-ds')], 2, /holds the source directory/],
    [['--to', s.path('bad-mirror'), '--convert', src], 2, /inside the source directory/],
    [['--to', 's3://bucket/mirror', '--convert', s.path('bad-ds')], 2, /local directories only/],
    [['--to', s.path('same'), '--convert', s.path('same')], 2, /separate directories/],
    [['--to', s.path('bad-mirror'), '--convert', s.path('bad-ds'), '--column', 'a=$.a'], 2, /compact-jsonl only/],
    [['--to', s.path('bad-mirror'), '--convert', s.path('bad-ds'), '--interval', 'soon'], 2, /--interval/],
    [['--to', s.path('bad-mirror')], 2, /--convert/],
    [['--to', s.path('bad-mirror'), '--convert', s.path('bad-ds'), '--input-format', 'nope'], 2, /--input-format/],
  ];
  for (const [args, code, message] of cases) {
    const r = await s.run(['sync', '--from', src, ...args, '--once']);
    assert.is(r.code, code, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message);
  }
  const missing = await s.run(['sync', '--from', s.path('nowhere'), '--to', s.path('bad-mirror'), '--convert', s.path('bad-ds'), '--once']);
  assert.is(missing.code, 3, missing.stderr);
  const notDataset = s.path('not-a-dataset');
  mkdirSync(notDataset);
  writeFileSync(join(notDataset, 'notes.txt'), 'mine');
  const refused = await s.run(['sync', '--from', src, '--to', s.path('bad-mirror'), '--convert', notDataset, '--once']);
  assert.is(refused.code, 2, refused.stderr);
  assert.not.ok(existsSync(s.path('bad-mirror')) || existsSync(s.path('bad-ds')), 'nothing written');
});

test('frequent small batches are compacted; a superseded snapshot stays readable for the grace period, then is reclaimed', async () => {
  const src = s.path('c-src');
  const [to, convert] = [s.path('c-mirror'), s.path('c-ds')];
  mkdirSync(join(src, 'project'), { recursive: true });
  const store = new LocalObjectStore(convert);
  const current = (): Snapshot => {
    const id = (JSON.parse(readFileSync(join(convert, 'trajstore.json'), 'utf8')) as { snapshot_id: string }).snapshot_id;
    return JSON.parse(readFileSync(join(convert, 'snapshots', `${id}.json`), 'utf8')) as Snapshot;
  };
  let old: Snapshot | undefined;
  const BATCHES = 12;
  for (let n = 0; n < BATCHES; n++) {
    appendFileSync(sessionFile(src, 7), claudeLine(7, n));
    appendFileSync(sessionFile(src, 8), claudeLine(8, n));
    const r = await once(src, to, convert);
    assert.is(r.code, 0, r.stderr);
    if (n === 1) old = current();
  }
  const snapshot = current();
  assert.ok((snapshot.relations.steps ?? []).length < BATCHES, `steps parts compacted: ${(snapshot.relations.steps ?? []).length}`);
  const [[runs, steps]] = (await csv(convert, 'SELECT count(*), (SELECT count(*) FROM steps) FROM runs')) as [[string, string]];
  assert.is(Number(runs), 2);
  assert.is(Number(steps), 2 * BATCHES);

  // The reader of an old snapshot still reads every part it lists (grace period: the default hour).
  assert.ok(old);
  let rows = 0;
  for (const part of old.relations.steps ?? []) for await (const group of (await openPart(store, part.key)).rowGroups(['document_id'])) rows += group.length;
  assert.is(rows, (old.relations.steps ?? []).reduce((n, p) => n + p.rows, 0));

  // With no grace left, the next batch removes every superseded snapshot and the parts only they listed.
  appendFileSync(sessionFile(src, 7), claudeLine(7, BATCHES));
  const reclaim = await once(src, to, convert, { TRAJSTORE_RECLAIM_GRACE: '0' });
  assert.is(reclaim.code, 0, reclaim.stderr);
  const now = current();
  assert.equal(readdirSync(join(convert, 'snapshots')), [`${now.id}.json`]);
  const listed = new Set(Object.values(now.relations).flatMap((parts) => (parts ?? []).map((p) => p.key)));
  assert.equal((await store.list('parts/')).filter((key) => !listed.has(key)), [], 'no unlisted part left');
  const [[after]] = (await csv(convert, 'SELECT count(*) FROM steps')) as [[string]];
  assert.is(Number(after), 2 * BATCHES + 1);
});

test('compact-jsonl: every batch replaces the compact store with the tree\'s complete lines; --to is not written', async () => {
  const src = s.path('j-src');
  mkdirSync(src, { recursive: true });
  writeFileSync(join(src, 'events.jsonl'), '{"id":"a","n":1}\n{"id":"b",');
  const [to, convert] = [s.path('j-mirror'), s.path('j-ds')];
  const args = ['sync', '--from', src, '--to', to, '--convert', convert, '--input-format', 'compact-jsonl', '--column', 'n=$.n', '--once'];
  assert.is((await s.run(args)).code, 0);
  assert.equal(await csv(convert, 'SELECT id, n FROM records ORDER BY id'), [['a', '1']]);
  appendFileSync(join(src, 'events.jsonl'), '"n":2}\n');
  const r = await s.run(args);
  assert.is(r.code, 0, r.stderr);
  assert.equal(await csv(convert, 'SELECT id, n FROM records ORDER BY id'), [['a', '1'], ['b', '2']]);
  assert.not.ok(existsSync(to));
});

test('a failed batch keeps its files pending and runs again after a backoff, with what changed meanwhile', async () => {
  const src = s.path('r-src');
  const [to, convert] = [s.path('r-mirror'), s.path('r-ds')];
  mkdirSync(join(src, 'project'), { recursive: true });
  writeFileSync(sessionFile(src, 1), claudeLine(1, 0));
  const worker = resident(['--from', src, '--to', to, '--convert', convert, '--interval', '100ms']);
  await until('the first batch', () => batchesIn(worker.stderr()) >= 1);
  // A directory where the mirror must write the next file: the batch fails until it is gone.
  mkdirSync(sessionFile(to, 2), { recursive: true });
  writeFileSync(sessionFile(src, 2), claudeLine(2, 0));
  await until('a failed batch', () => /sync: batch 2: 1 file\(s\), 0 record\(s\), [\d.]+s, failed: .*; next retry in 1s/.test(worker.stderr()));
  appendFileSync(sessionFile(src, 1), claudeLine(1, 1));
  await sleep(300);
  rmSync(sessionFile(to, 2), { recursive: true });
  await until('the retry', () => /sync: batch 2 \(attempt \d\): 2 file\(s\), 2 record\(s\), [\d.]+s, ok/.test(worker.stderr()));
  worker.child.kill('SIGINT');
  assert.is((await worker.exited).code, 130);
  const [[markers]] = (await csv(convert, "SELECT count(*) FROM steps WHERE message_text LIKE 'marker-%'")) as [[string]];
  assert.is(Number(markers), 3);
});

const markersIn = async (convert: string): Promise<string[]> =>
  (await csv(convert, "SELECT message_text FROM steps WHERE message_text LIKE 'marker-%' ORDER BY 1")).map((row) => row[0]!);
const count = (text: string, pattern: RegExp): number => (text.match(new RegExp(pattern.source, `${pattern.flags}g`)) ?? []).length;

test('an unreadable file is warned of once and retried with backoff while every other change lands; once readable it follows', async () => {
  const src = s.path('u-src');
  const [to, convert] = [s.path('u-mirror'), s.path('u-ds')];
  mkdirSync(join(src, 'project'), { recursive: true });
  writeFileSync(sessionFile(src, 1), claudeLine(1, 0));
  writeFileSync(sessionFile(src, 2), claudeLine(2, 0));
  chmodSync(sessionFile(src, 2), 0);
  const worker = resident(['--from', src, '--to', to, '--convert', convert, '--interval', '100ms'], {}, unprivileged());
  const warning = new RegExp(`warn: sync: project/${sessionIdOf(2)}\\.jsonl: permission denied`);
  await until('the first batch and the warning', () => batchesIn(worker.stderr()) >= 1 && warning.test(worker.stderr()));
  appendFileSync(sessionFile(src, 1), claudeLine(1, 1));
  // Three retries of the held file (after 1 s, 2 s, 4 s): still one warning.
  await until('the retries', () => count(worker.stderr(), /0 file\(s\), 1 held back, 0 record\(s\)/) >= 3, 20_000);
  assert.is(count(worker.stderr(), warning), 1, worker.stderr());
  assert.equal(await markersIn(convert), ['marker-1-0', 'marker-1-1'], 'the other file landed');
  assert.ok(readFileSync(sessionFile(src, 1)).equals(readFileSync(sessionFile(to, 1))));
  assert.not.ok(existsSync(sessionFile(to, 2)));

  const landed = /sync: batch \d+: 1 file\(s\), 1 record\(s\), [\d.]+s, ok$/m;
  const before = count(worker.stderr(), landed);
  chmodSync(sessionFile(src, 2), 0o644);
  await until('the held file to land', () => count(worker.stderr(), landed) > before, 20_000);
  worker.child.kill('SIGTERM');
  assert.is((await worker.exited).code, 143, worker.stderr());
  assert.equal(await markersIn(convert), ['marker-1-0', 'marker-1-1', 'marker-2-0']);
  assert.ok(readFileSync(sessionFile(src, 2)).equals(readFileSync(sessionFile(to, 2))));
});

test('--once with an unreadable file: the other files land, the unreadable one keeps its runs and mirror copy, and the exit says which', async () => {
  const src = s.path('uo-src');
  const [to, convert] = [s.path('uo-mirror'), s.path('uo-ds')];
  mkdirSync(join(src, 'project'), { recursive: true });
  writeFileSync(sessionFile(src, 1), claudeLine(1, 0));
  writeFileSync(sessionFile(src, 2), claudeLine(2, 0));
  assert.is((await once(src, to, convert)).code, 0);
  appendFileSync(sessionFile(src, 1), claudeLine(1, 1));
  appendFileSync(sessionFile(src, 2), claudeLine(2, 1));
  chmodSync(sessionFile(src, 2), 0);
  const r = await once(src, to, convert, {}, unprivileged());
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, new RegExp(`trajstore: error: sync: project/${sessionIdOf(2)}\\.jsonl: permission denied`));
  assert.equal(await markersIn(convert), ['marker-1-0', 'marker-1-1', 'marker-2-0'], 'the held file keeps its runs');
  assert.is(readFileSync(sessionFile(to, 2), 'utf8'), claudeLine(2, 0), 'and its mirror copy');

  chmodSync(sessionFile(src, 2), 0o644);
  const after = await once(src, to, convert, {}, unprivileged());
  assert.is(after.code, 0, after.stderr);
  assert.equal(await markersIn(convert), ['marker-1-0', 'marker-1-1', 'marker-2-0', 'marker-2-1']);
});

test('an unreadable directory is warned of once and left as it is (its files are not deleted); the worker goes on', async () => {
  const src = s.path('ud-src');
  const [to, convert] = [s.path('ud-mirror'), s.path('ud-ds')];
  mkdirSync(join(src, 'project'), { recursive: true });
  mkdirSync(join(src, 'closed'), { recursive: true });
  writeFileSync(sessionFile(src, 1), claudeLine(1, 0));
  writeFileSync(join(src, 'closed', 'c.jsonl'), claudeLine(3, 0));
  const worker = resident(['--from', src, '--to', to, '--convert', convert, '--interval', '100ms'], {}, unprivileged());
  await until('the first batch', () => batchesIn(worker.stderr()) >= 1);
  chmodSync(join(src, 'closed'), 0);
  appendFileSync(sessionFile(src, 1), claudeLine(1, 1));
  await until('the next batch', () => batchesIn(worker.stderr()) >= 2);
  await sleep(500);
  assert.is(worker.child.exitCode, null, worker.stderr());
  assert.is(count(worker.stderr(), /warn: sync: closed: permission denied/), 1, worker.stderr());
  assert.equal(await markersIn(convert), ['marker-1-0', 'marker-1-1', 'marker-3-0'], 'the closed directory\'s runs stay');
  assert.ok(existsSync(join(to, 'closed', 'c.jsonl')), 'and its mirror copies');
  // Beside the resident worker, which holds its mirror for its life: a mirror of its own, the same dataset.
  const held = await once(src, s.path('ud-mirror-once'), convert, {}, unprivileged());
  assert.is(held.code, 2, held.stderr);
  assert.match(held.stderr, /trajstore: error: sync: closed: permission denied/);

  chmodSync(join(src, 'closed'), 0o755);
  appendFileSync(join(src, 'closed', 'c.jsonl'), claudeLine(3, 1));
  await until('the directory\'s change', () => batchesIn(worker.stderr()) >= 3);
  worker.child.kill('SIGTERM');
  assert.is((await worker.exited).code, 143, worker.stderr());
  assert.equal(await markersIn(convert), ['marker-1-0', 'marker-1-1', 'marker-3-0', 'marker-3-1']);
});

test('a synced directory replaced by a file of its name (and back): the directory\'s files leave, the file is synced', async () => {
  const src = s.path('df-src');
  const [to, convert] = [s.path('df-mirror'), s.path('df-ds')];
  mkdirSync(join(src, 'x.jsonl'), { recursive: true });
  writeFileSync(join(src, 'x.jsonl', 'a.jsonl'), claudeLine(1, 0));
  assert.is((await once(src, to, convert)).code, 0);
  rmSync(join(src, 'x.jsonl'), { recursive: true });
  writeFileSync(join(src, 'x.jsonl'), claudeLine(2, 0));
  const toFile = await once(src, to, convert);
  assert.is(toFile.code, 0, toFile.stderr);
  assert.equal(await markersIn(convert), ['marker-2-0']);
  assert.is(readFileSync(join(to, 'x.jsonl'), 'utf8'), claudeLine(2, 0));
  rmSync(join(src, 'x.jsonl'));
  mkdirSync(join(src, 'x.jsonl'));
  writeFileSync(join(src, 'x.jsonl', 'b.jsonl'), claudeLine(3, 0));
  const toDirectory = await once(src, to, convert);
  assert.is(toDirectory.code, 0, toDirectory.stderr);
  assert.equal(await markersIn(convert), ['marker-3-0']);
  assert.equal(readdirSync(join(to, 'x.jsonl')), ['b.jsonl']);
});

test('a file over 2 GiB is a resource limit naming it; the other files land', async () => {
  const src = s.path('big-src');
  const [to, convert] = [s.path('big-mirror'), s.path('big-ds')];
  mkdirSync(join(src, 'project'), { recursive: true });
  writeFileSync(sessionFile(src, 1), claudeLine(1, 0));
  // Sparse: it takes no disk.
  writeFileSync(join(src, 'project', 'big.jsonl'), '');
  truncateSync(join(src, 'project', 'big.jsonl'), 2 ** 31);
  const r = await once(src, to, convert);
  assert.is(r.code, 5, r.stderr);
  assert.match(r.stderr, /trajstore: error: sync: project\/big\.jsonl: 2147483648 bytes; sync reads files smaller than 2 GiB/);
  assert.equal(await markersIn(convert), ['marker-1-0']);
  assert.not.ok(existsSync(join(to, 'project', 'big.jsonl')));
});

test('a file name with a line break or terminal controls shows escaped in warnings and batch lines: it forges no line', async () => {
  const src = s.path('n-src');
  const [to, convert] = [s.path('n-mirror'), s.path('n-ds')];
  mkdirSync(src, { recursive: true });
  const hostile = 'x\nsync: batch 7: 1 file(s), 1 record(s), 0.01s, ok\n\x1b[2J';
  const shown = 'x\\nsync: batch 7: 1 file(s), 1 record(s), 0.01s, ok\\n\\x1b[2J';
  // JSON of no trajectory format: the conversion skips it, with a warning naming it.
  writeFileSync(join(src, `${hostile}.json`), '{"unknown": 1}');
  writeFileSync(join(src, `${hostile}.jsonl`), claudeLine(1, 0));
  // The mirror cannot take the JSON Lines file (a directory is in its place): the batch fails, naming it.
  mkdirSync(join(to, `${hostile}.jsonl`), { recursive: true });
  const worker = resident(['--from', src, '--to', to, '--convert', convert, '--interval', '100ms']);
  await until('a failed batch', () => /failed: [\s\S]*next retry/.test(worker.stderr()));
  rmSync(join(to, `${hostile}.jsonl`), { recursive: true });
  await until('a batch', () => batchesIn(worker.stderr()) >= 1);
  worker.child.kill('SIGTERM');
  assert.is((await worker.exited).code, 143, worker.stderr());
  const lines = worker.stderr().split('\n');
  assert.ok(lines.some((line) => line.startsWith('sync: batch 1: ') && line.includes(shown) && line.includes('failed: ')), worker.stderr());
  assert.ok(lines.some((line) => line.startsWith('warn: skipped ') && line.includes(`${shown}.json`)), worker.stderr());
  assert.not.ok(lines.some((line) => line.startsWith('sync: batch 7')), 'no forged line');
  assert.not.match(worker.stderr(), /\x1b/);
});

test('a file whose name is not UTF-8 is warned of by its bytes and left out; the other files land', async () => {
  const src = s.path('b-src');
  const [to, convert] = [s.path('b-mirror'), s.path('b-ds')];
  mkdirSync(join(src, 'project'), { recursive: true });
  writeFileSync(sessionFile(src, 1), claudeLine(1, 0));
  writeFileSync(Buffer.concat([Buffer.from(join(src, 'project', 'bad-')), Buffer.from([0xff, 0x1b]), Buffer.from('.jsonl')]), claudeLine(2, 0));
  const r = await once(src, to, convert);
  assert.is(r.code, 2, r.stderr);
  assert.is(count(r.stderr, /warn: sync: project\/bad-\\xff\\x1b\.jsonl: the name is not UTF-8/), 1, r.stderr);
  assert.match(r.stderr, /trajstore: error: sync: project\/bad-\\xff\\x1b\.jsonl: the name is not UTF-8/);
  assert.equal(await markersIn(convert), ['marker-1-0']);
  assert.equal(readdirSync(join(to, 'project')), [`${sessionIdOf(1)}.jsonl`]);
});

test('a .json file caught half-rewritten keeps its run and mirror copy and is warned of; it is synced once it parses', async () => {
  const src = s.path('h-src');
  const [to, convert] = [s.path('h-mirror'), s.path('h-ds')];
  mkdirSync(src, { recursive: true });
  const whole = readFileSync(join(SHARED_FIXTURES, 'synthetic', 'storyline', 'incident-triage-0007.storyline.json'));
  writeFileSync(join(src, 'run.json'), whole);
  writeFileSync(join(src, 'a.jsonl'), claudeLine(1, 0));
  assert.is((await once(src, to, convert)).code, 0);
  const runs = async (): Promise<string[]> => (await csv(convert, 'SELECT document_id FROM runs ORDER BY 1')).map((row) => row[0]!);
  const before = await runs();
  assert.is(before.length, 2);

  writeFileSync(join(src, 'run.json'), whole.subarray(0, 300));
  appendFileSync(join(src, 'a.jsonl'), claudeLine(1, 1));
  const torn = await once(src, to, convert);
  assert.is(torn.code, 2, torn.stderr);
  assert.match(torn.stderr, /warn: sync: run\.json:\d+:\d+: invalid JSON/);
  assert.equal(await runs(), before, 'its run stays');
  assert.ok(readFileSync(join(to, 'run.json')).equals(whole), 'and its mirror copy');
  assert.equal(await markersIn(convert), ['marker-1-0', 'marker-1-1'], 'the other file went on');

  writeFileSync(join(src, 'run.json'), whole);
  const mended = await once(src, to, convert);
  assert.is(mended.code, 0, mended.stderr);
  assert.equal(await runs(), before);
});

const compactOnce = (src: string, convert: string, user: User = {}) =>
  runTool('trajstore', ['sync', '--from', src, '--to', `${convert}-mirror`, '--convert', convert, '--input-format', 'compact-jsonl', '--once'], { env: s.env, cwd: s.home, ...user });
const compactIds = async (convert: string): Promise<string[]> => (await csv(convert, 'SELECT id FROM records ORDER BY id')).map((row) => row[0]!);

test('compact-jsonl: a file it cannot read fails the batch and leaves the store whole; retried with backoff, it lands once readable', async () => {
  const src = s.path('cu-src');
  const convert = s.path('cu-ds');
  mkdirSync(src, { recursive: true });
  writeFileSync(join(src, 'a.jsonl'), '{"id":"a"}\n');
  writeFileSync(join(src, 'b.jsonl'), '{"id":"b"}\n');
  assert.is((await compactOnce(src, convert)).code, 0);
  chmodSync(join(src, 'b.jsonl'), 0);
  writeFileSync(join(src, 'c.jsonl'), '{"id":"c"}\n');
  const refused = await compactOnce(src, convert, unprivileged());
  assert.is(refused.code, 2, refused.stderr);
  assert.match(refused.stderr, /trajstore: error: b\.jsonl: permission denied/);
  assert.equal(await compactIds(convert), ['a', 'b'], 'the store stays whole');

  const worker = resident(['--from', src, '--to', `${convert}-mirror`, '--convert', convert, '--input-format', 'compact-jsonl', '--interval', '100ms'], {}, unprivileged());
  await until('two failed attempts', () => count(worker.stderr(), /failed: b\.jsonl: permission denied; next retry in/) >= 2, 20_000);
  assert.match(worker.stderr(), /next retry in 1s[\s\S]*next retry in 2s/);
  assert.equal(await compactIds(convert), ['a', 'b']);
  chmodSync(join(src, 'b.jsonl'), 0o644);
  await until('the retry to land', () => batchesIn(worker.stderr()) >= 1, 20_000);
  worker.child.kill('SIGTERM');
  assert.is((await worker.exited).code, 143, worker.stderr());
  assert.equal(await compactIds(convert), ['a', 'b', 'c']);
});

test('compact-jsonl: a .json caught half-written (or an invalid complete line) fails the batch as import does, the store kept; a deleted file leaves it', async () => {
  const src = s.path('ch-src');
  const convert = s.path('ch-ds');
  mkdirSync(src, { recursive: true });
  writeFileSync(join(src, 'x.json'), '{"id":"x"}');
  writeFileSync(join(src, 'y.jsonl'), '{"id":"y"}\n');
  assert.is((await compactOnce(src, convert)).code, 0);
  writeFileSync(join(src, 'x.json'), '{"id":');
  const torn = await compactOnce(src, convert);
  assert.is(torn.code, 2, torn.stderr);
  assert.match(torn.stderr, /trajstore: error: x\.json:\d+(:\d+)?: invalid JSON/);
  assert.equal(await compactIds(convert), ['x', 'y']);
  writeFileSync(join(src, 'x.json'), '{"id":"x"}');
  writeFileSync(join(src, 'y.jsonl'), '{"id":"y"}\n{oops}\n');
  const bad = await compactOnce(src, convert);
  assert.is(bad.code, 2, bad.stderr);
  assert.match(bad.stderr, /trajstore: error: y\.jsonl:2(:\d+)?: invalid JSON/);
  assert.equal(await compactIds(convert), ['x', 'y']);
  rmSync(join(src, 'y.jsonl'));
  const deleted = await compactOnce(src, convert);
  assert.is(deleted.code, 0, deleted.stderr);
  assert.equal(await compactIds(convert), ['x']);
});

test('compact-jsonl: a store synced from one source is refused (exit 4, naming both) to a sync from another, once or resident; a source moved away is taken over with a warning', async () => {
  const [srcA, srcB] = [s.path('co-a'), s.path('co-b')];
  const convert = s.path('co-ds');
  mkdirSync(srcA, { recursive: true });
  mkdirSync(srcB, { recursive: true });
  writeFileSync(join(srcA, 'x.jsonl'), '{"id":"a1"}\n{"id":"a2"}\n');
  writeFileSync(join(srcB, 'x.jsonl'), '{"id":"b1"}\n');
  assert.is((await compactOnce(srcA, convert)).code, 0);
  const refused = await compactOnce(srcB, convert);
  assert.is(refused.code, 4, refused.stderr);
  assert.match(refused.stderr, `--convert ${realpathSync(convert)}: synced from ${realpathSync(srcA)}, not from --from ${realpathSync(srcB)}`);
  const worker = resident(['--from', srcB, '--to', `${convert}-mirror`, '--convert', convert, '--input-format', 'compact-jsonl', '--interval', '100ms']);
  assert.is((await worker.exited).code, 4, worker.stderr());
  assert.match(worker.stderr(), `synced from ${realpathSync(srcA)}`);
  assert.equal(await compactIds(convert), ['a1', 'a2'], 'the first source\'s store, untouched');
  // The first source goes on as before.
  appendFileSync(join(srcA, 'x.jsonl'), '{"id":"a3"}\n');
  assert.is((await compactOnce(srcA, convert)).code, 0);
  assert.equal(await compactIds(convert), ['a1', 'a2', 'a3']);
  // Moved away, it has nothing left to sync: another source takes the store over (replacing it whole, as every compact batch does).
  renameSync(srcA, s.path('co-a-moved'));
  const taken = await compactOnce(srcB, convert);
  assert.is(taken.code, 0, taken.stderr);
  assert.match(taken.stderr, `${realpathSync(convert)} was synced from ${realpathSync(s.home)}/co-a, which is gone; it is synced from ${realpathSync(srcB)} now`);
  assert.equal(await compactIds(convert), ['b1']);
  // The new owner is the new source: the moved one is another now.
  const back = await compactOnce(s.path('co-a-moved'), convert);
  assert.is(back.code, 4, back.stderr);
});

/**
 * A resident sync whose source root goes out of reach (`lose`) and comes back (`mend`): it is warned
 * of once (`warning`), the worker polls on with both outputs kept, and once back, a change lands.
 * `whileLost` runs while it is out of reach.
 */
async function rootOutOfReach(name: string, lose: (src: string) => void, mend: (src: string) => void, warning: RegExp, user: User = {}, whileLost = async (_src: string, _to: string, _convert: string): Promise<void> => {}): Promise<void> {
  const src = s.path(`${name}-src`);
  const [to, convert] = [s.path(`${name}-mirror`), s.path(`${name}-ds`)];
  mkdirSync(join(src, 'project'), { recursive: true });
  writeFileSync(sessionFile(src, 1), claudeLine(1, 0));
  const worker = resident(['--from', src, '--to', to, '--convert', convert, '--interval', '100ms'], {}, user);
  await until('the first batch', () => batchesIn(worker.stderr()) >= 1);
  lose(src);
  await until('the warning', () => warning.test(worker.stderr()));
  await sleep(500);
  assert.is(worker.child.exitCode, null, worker.stderr());
  assert.is(count(worker.stderr(), warning), 1, worker.stderr());
  assert.equal(await markersIn(convert), ['marker-1-0'], 'the dataset is kept');
  assert.ok(existsSync(sessionFile(to, 1)), 'and the mirror');
  await whileLost(src, to, convert);
  mend(src);
  appendFileSync(sessionFile(src, 1), claudeLine(1, 1));
  await until('the next batch', () => batchesIn(worker.stderr()) >= 2);
  worker.child.kill('SIGTERM');
  assert.is((await worker.exited).code, 143, worker.stderr());
  assert.equal(await markersIn(convert), ['marker-1-0', 'marker-1-1']);
}

test('a source root that becomes unreadable is warned of and polled on, the outputs kept; unreadable at start-up it is refused (exit 2)', async () => {
  await rootOutOfReach('ur', (src) => chmodSync(src, 0), (src) => chmodSync(src, 0o755), /warn: sync: .*ur-src: permission denied/, unprivileged(), async (src, to, convert) => {
    const refused = await once(src, to, convert, {}, unprivileged());
    assert.is(refused.code, 2, refused.stderr);
    assert.match(refused.stderr, /trajstore: error: --from .*ur-src: permission denied/);
  });
});

test('a source moved away while sync runs is warned of and polled on, the outputs kept, not emptied; back, it syncs on', async () => {
  await rootOutOfReach('away', (src) => renameSync(src, `${src}.away`), (src) => renameSync(`${src}.away`, src), /warn: sync: .*away-src: no such file or directory/);
});

test('a directory whose name is not UTF-8 is warned of by its bytes, once, and left out; the other files land', async () => {
  const src = s.path('bd-src');
  const [to, convert] = [s.path('bd-mirror'), s.path('bd-ds')];
  mkdirSync(join(src, 'project'), { recursive: true });
  writeFileSync(sessionFile(src, 1), claudeLine(1, 0));
  const dir = Buffer.concat([Buffer.from(join(src, 'dir-')), Buffer.from([0xff])]);
  mkdirSync(dir);
  writeFileSync(Buffer.concat([dir, Buffer.from('/a.jsonl')]), claudeLine(2, 0));
  const r = await once(src, to, convert);
  assert.is(r.code, 2, r.stderr);
  assert.is(count(r.stderr, /warn: sync: dir-\\xff: the name is not UTF-8/), 1, r.stderr);
  assert.equal(await markersIn(convert), ['marker-1-0']);
});

test('a source named with a line break and terminal controls forges no line in the error', async () => {
  const hostile = s.path('x\ntrajstore: error: forged\x1b[2J');
  const r = await once(hostile, s.path('hx-mirror'), s.path('hx-ds'));
  assert.is(r.code, 3, r.stderr);
  assert.match(r.stderr, 'x\\ntrajstore: error: forged\\x1b[2J: no such directory');
  assert.not.ok(r.stderr.split('\n').some((line) => line.startsWith('trajstore: error: forged')), r.stderr);
  assert.not.match(r.stderr, /\x1b/);
});

test('retries back off exponentially, bounded', () => {
  assert.equal([1, 2, 3, 4, 8, 20].map((n) => retryDelayMs(n, 1000, 60_000)), [1000, 2000, 4000, 8000, 60_000, 60_000]);
});

test.run();
