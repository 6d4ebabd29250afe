/**
 * The dataset writer lock (dataset/lock.ts) through real processes: concurrent appends all land,
 * a killed holder blocks nobody, a live one is waited for up to --lock-timeout (then exit 4 naming
 * it), a takeover of a dead holder's lock admits one writer, a stopped writer releases the lock and
 * leaves nothing, and readers never wait (they read the old copy of a replace at work).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { DIST_ROOT, toolScript } from '../../lib/testing/run-tool.js';
import { acquireWriterLock, lockPathOf, type WriterLock } from '../dataset/lock.js';
import { asidePathOf } from '../dataset/recover.js';
import { STORYLINES, hiddenSiblings, leftovers, writeStorylines } from './helpers/dataset-state.js';
import { sandbox } from './helpers/sandbox.js';

type Sandbox = ReturnType<typeof sandbox>;

/** A sandbox with a dataset `ds` of the two fixture Storylines. */
async function withDataset(): Promise<Sandbox> {
  const s = sandbox('dataset-lock');
  const r = await s.run(['import', '-f', STORYLINES, '-t', s.path('ds')]);
  assert.is(r.code, 0, r.stderr);
  return s;
}

async function json(s: Sandbox, args: string[]): Promise<any> {
  const r = await s.run([...args, '--format', 'json']);
  assert.is(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

const documentIds = async (s: Sandbox): Promise<string[]> =>
  (await json(s, ['query', s.path('ds'), '--sql', 'SELECT document_id FROM runs ORDER BY document_id'])).map((r: { document_id: string }) => r.document_id);

/** The lock, taken by this test process: a live holder. */
const holdLock = (s: Sandbox): Promise<WriterLock> => acquireWriterLock(s.path('ds'), { purpose: 'the test', timeoutMs: 0 });

/** The pid in the lock's owner file, once there is one. */
function lockOwner(s: Sandbox): number | undefined {
  try {
    const [file] = readdirSync(lockPathOf(s.path('ds')));
    return file === undefined ? undefined : (JSON.parse(readFileSync(join(lockPathOf(s.path('ds')), file), 'utf8')) as { pid: number }).pid;
  } catch {
    return undefined;
  }
}

async function until(what: string, ready: () => boolean, ms = 30_000): Promise<void> {
  const started = Date.now();
  while (!ready()) {
    if (Date.now() - started > ms) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function start(s: Sandbox, args: string[]): { child: ChildProcess; stderr: () => string; exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }> } {
  const child = spawn(process.execPath, [toolScript('trajstore'), ...args], { env: { ...process.env, ...s.env }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  return { child, stderr: () => stderr, exit };
}

/** A source large enough that an append of it is still writing a few seconds after it starts. */
function bigSource(s: Sandbox): string {
  const file = s.path('big.jsonl');
  writeStorylines(file, Array.from({ length: 20_000 }, (_, i) => `big-${i}`));
  return file;
}

test('a sync holding the lock is named as sync to those waiting, not as an import', async () => {
  const s = await withDataset();
  mkdirSync(s.path('sync-src'));
  renameSync(bigSource(s), s.path('sync-src', 'big.jsonl'));
  const sync = start(s, ['sync', '--from', s.path('sync-src'), '--to', s.path('sync-mirror'), '--convert', s.path('ds'), '--once']);
  await until('the sync holds the lock', () => lockOwner(s) === sync.child.pid);
  const [file] = readdirSync(lockPathOf(s.path('ds')));
  assert.is((JSON.parse(readFileSync(join(lockPathOf(s.path('ds')), file!), 'utf8')) as { purpose: string }).purpose, 'sync');
  assert.is((await sync.exit).code, 0, sync.stderr());
});

test('two syncs of different sources that both found no dataset yet (nothing there, or an empty directory): the first to take the lock makes it, the other is refused (exit 4) without failing on or replacing it', async () => {
  for (const before of ['missing', 'empty directory'] as const) {
    const s = sandbox('dataset-lock');
    const sources = [0, 1].map((i) => {
      mkdirSync(s.path(`src${i}`));
      writeStorylines(s.path(`src${i}`, `w${i}.jsonl`), [`sync-${i}-0`, `sync-${i}-1`]);
      return s.path(`src${i}`);
    });
    if (before === 'empty directory') mkdirSync(s.path('conv'));
    // Held while both look at the destination, so that each decides what to do before the other commits.
    const lock = await acquireWriterLock(s.path('conv'), { purpose: 'the test', timeoutMs: 0 });
    const syncs = sources.map((src, i) => start(s, ['sync', '--from', src, '--to', s.path(`mirror${i}`), '--convert', s.path('conv'), '--once']));
    await until('both syncs wait for the lock', () => syncs.every((sync) => sync.stderr().includes('waiting for')));
    lock.release();
    const codes = await Promise.all(syncs.map(async (sync) => (await sync.exit).code));
    assert.equal([...codes].sort(), [0, 4], `${before}: ${syncs.map((sync) => sync.stderr()).join('\n')}`);
    const winner = codes.indexOf(0);
    assert.match(syncs[1 - winner]!.stderr(), `synced from ${realpathSync(sources[winner]!)}`, before);
    const runs = await json(s, ['query', s.path('conv'), '--sql', 'SELECT document_id FROM runs ORDER BY document_id']);
    assert.equal(runs.map((r: { document_id: string }) => r.document_id), [`sync-${winner}-0`, `sync-${winner}-1`], before);
    assert.equal(leftovers(s.path('conv')), [], before);
  }
});

test('eight concurrent appends of different sources end with every run present exactly once', async () => {
  const s = await withDataset();
  const before = await documentIds(s);
  const expected = [...before];
  mkdirSync(s.path('sources'));
  for (let i = 0; i < 8; i++) {
    const ids = [0, 1, 2].map((j) => `writer-${i}-${j}`);
    writeStorylines(s.path('sources', `w${i}.jsonl`), ids);
    expected.push(...ids);
  }
  const results = await Promise.all(Array.from({ length: 8 }, (_, i) => s.run(['import', '-f', s.path('sources', `w${i}.jsonl`), '-t', s.path('ds'), '--mode', 'append'])));
  for (const r of results) assert.is(r.code, 0, r.stderr);
  assert.equal(await documentIds(s), expected.sort());
  // One snapshot on top of another: the chain from the first import is nine long.
  const snapshots = readdirSync(s.path('ds', 'snapshots'));
  assert.is(snapshots.length, 9);
  assert.equal(leftovers(s.path('ds')), []);
});

test('a writer killed with kill -9 while holding the lock does not block the next one', async () => {
  const s = await withDataset();
  const writer = start(s, ['import', '-f', bigSource(s), '-t', s.path('ds'), '--mode', 'append']);
  await until('the append holds the lock', () => lockOwner(s) === writer.child.pid);
  writer.child.kill('SIGKILL');
  assert.is((await writer.exit).signal, 'SIGKILL');
  assert.is(lockOwner(s), writer.child.pid, 'the killed writer still "holds" the lock');
  writeStorylines(s.path('next.jsonl'), ['next-0']);
  const started = Date.now();
  const next = await s.run(['import', '-f', s.path('next.jsonl'), '-t', s.path('ds'), '--mode', 'append', '--lock-timeout', '0']);
  assert.is(next.code, 0, next.stderr);
  assert.ok(Date.now() - started < 10_000);
  assert.ok((await documentIds(s)).includes('next-0'));
  assert.equal(leftovers(s.path('ds')), []);
});

test('a writer waits for a live holder up to --lock-timeout, then exits 4 naming its pid; then it goes ahead', async () => {
  const s = await withDataset();
  writeStorylines(s.path('more.jsonl'), ['more-0']);
  const append = ['import', '-f', s.path('more.jsonl'), '-t', s.path('ds'), '--mode', 'append'];
  let lock = await holdLock(s);
  const timedOut = await s.run([...append, '--lock-timeout', '300ms']);
  assert.is(timedOut.code, 4, timedOut.stderr);
  assert.match(timedOut.stderr, `waiting for pid ${process.pid} (the test) to finish writing the dataset`);
  assert.match(timedOut.stderr, `another writer holds the dataset's lock: pid ${process.pid} (the test)`);
  assert.match(timedOut.stderr, '--lock-timeout');
  for (const args of [['drop', s.path('ds'), '--yes', '--lock-timeout', '0'], ['import', '-f', STORYLINES, '-t', s.path('ds'), '--mode', 'replace', '--yes', '--lock-timeout', '0']]) {
    const r = await s.run(args);
    assert.is(r.code, 4, `${args[0]}: ${r.stderr}`);
    assert.match(r.stderr, `pid ${process.pid}`);
  }
  // Nothing of the refused writers is left: only the test's lock.
  assert.equal(hiddenSiblings(s.path('ds')), ['.ds.lock']);
  const waiting = start(s, [...append, '--lock-timeout', '30s']);
  await until('the append waits', () => waiting.stderr().includes('waiting for'));
  lock.release();
  const done = await waiting.exit;
  assert.is(done.code, 0, waiting.stderr());
  assert.ok((await documentIds(s)).includes('more-0'));
  // A bad value is refused before anything is tried.
  const bad = await s.run([...append, '--lock-timeout', 'soon']);
  assert.is(bad.code, 2);
  assert.match(bad.stderr, 'invalid --lock-timeout "soon"');
  lock = await holdLock(s); // free again: the test can take it at once
  lock.release();
  assert.equal(leftovers(s.path('ds')), []);
});

test('an owner file emptied by a power cut is taken over; something at the lock that is not one is reported, not removed', async () => {
  const s = await withDataset();
  writeStorylines(s.path('more.jsonl'), ['more-0']);
  const append = ['import', '-f', s.path('more.jsonl'), '-t', s.path('ds'), '--mode', 'append', '--lock-timeout', '0'];
  mkdirSync(lockPathOf(s.path('ds')));
  writeFileSync(join(lockPathOf(s.path('ds')), 'owner-000000000000'), '');
  const r = await s.run(append);
  assert.is(r.code, 0, r.stderr);
  assert.equal(hiddenSiblings(s.path('ds')), []);
  writeFileSync(lockPathOf(s.path('ds')), 'my notes');
  const refused = await s.run(append);
  assert.is(refused.code, 4, refused.stderr);
  assert.match(refused.stderr, `something that is not a trajstore lock (${lockPathOf(s.path('ds'))})`);
  assert.match(refused.stderr, `remove ${lockPathOf(s.path('ds'))} if no trajstore command is writing this dataset`);
  assert.is(readFileSync(lockPathOf(s.path('ds')), 'utf8'), 'my notes');
  assert.equal(hiddenSiblings(s.path('ds')), ['.ds.lock']);
});

test('writers racing to take over a dead holder\'s lock hold it one at a time', async () => {
  const s = sandbox('dataset-lock');
  const path = s.path('ds');
  const lockModule = pathToFileURL(join(DIST_ROOT, 'pipelines', 'dataset', 'lock.js')).href;
  // A holder that is killed: its lock is left behind, with its pid.
  writeFileSync(
    s.path('holder.mjs'),
    `const { acquireWriterLock } = await import(${JSON.stringify(lockModule)});
     await acquireWriterLock(${JSON.stringify(path)}, { purpose: 'doomed', timeoutMs: 0 });
     setInterval(() => {}, 1000);`,
  );
  const holder = spawn(process.execPath, [s.path('holder.mjs')], { stdio: 'ignore' });
  await until('the holder holds the lock', () => lockOwner(s) === holder.pid);
  holder.kill('SIGKILL');
  await new Promise((r) => holder.on('exit', r));
  // Each racer adds one to a counter by reading it, pausing, and writing it back: two holders at
  // once lose an addition. They start together at the signal of a file, all finding the dead holder.
  const counter = s.path('counter');
  const go = s.path('go');
  writeFileSync(counter, '0');
  writeFileSync(
    s.path('racer.mjs'),
    `import { existsSync, readFileSync, writeFileSync } from 'node:fs';
     const { withWriterLock } = await import(${JSON.stringify(lockModule)});
     while (!existsSync(${JSON.stringify(go)})) await new Promise((r) => setTimeout(r, 2));
     await withWriterLock(${JSON.stringify(path)}, { purpose: 'racer', timeoutMs: 60_000 }, async () => {
       const n = Number(readFileSync(${JSON.stringify(counter)}, 'utf8'));
       await new Promise((r) => setTimeout(r, 20));
       writeFileSync(${JSON.stringify(counter)}, String(n + 1));
     });`,
  );
  const racers = Array.from({ length: 8 }, () => spawn(process.execPath, [s.path('racer.mjs')], { stdio: 'inherit' }));
  const exits = racers.map((racer) => new Promise<number | null>((resolve) => racer.on('exit', resolve)));
  await new Promise((r) => setTimeout(r, 500)); // every racer is polling for the signal
  writeFileSync(go, '');
  assert.equal(await Promise.all(exits), Array(8).fill(0));
  assert.is(readFileSync(counter, 'utf8'), '8');
  assert.equal(hiddenSiblings(path), []);
});

test('a writer stopped by SIGTERM, holding the lock or waiting for it, releases it and leaves nothing', async () => {
  const s = await withDataset();
  const snapshot = (): string => JSON.parse(readFileSync(s.path('ds', 'trajstore.json'), 'utf8')).snapshot_id;
  const before = snapshot();
  const big = bigSource(s);
  for (const [mode, target] of [['append', 'ds'], ['create', 'new-ds']] as const) {
    const writer = start(s, ['import', '-f', big, '-t', s.path(target), '--mode', mode]);
    await until(`the ${mode} holds the lock`, () => existsSync(lockPathOf(s.path(target))));
    await new Promise((r) => setTimeout(r, 300)); // writing by now
    writer.child.kill('SIGTERM');
    const { code, signal } = await writer.exit;
    assert.is(signal, null, `${mode}: ended by itself`);
    assert.ok(code === 6 || code === 143, `${mode}: exit ${code}: ${writer.stderr()}`);
    assert.equal(hiddenSiblings(s.path(target)), [], mode);
  }
  assert.not.ok(existsSync(s.path('new-ds')));
  assert.is(snapshot(), before);
  assert.equal(leftovers(s.path('ds')), []);
  const lock = await holdLock(s);
  const waiting = start(s, ['drop', s.path('ds'), '--yes']);
  await until('the drop waits', () => waiting.stderr().includes('waiting for'));
  waiting.child.kill('SIGTERM');
  const { code, signal } = await waiting.exit;
  assert.is(signal, null);
  assert.ok(code === 6 || code === 143, `exit ${code}: ${waiting.stderr()}`);
  // Its lock candidate is gone; the dataset and the test's lock are as they were.
  assert.equal(hiddenSiblings(s.path('ds')), ['.ds.lock']);
  lock.release();
  assert.is(snapshot(), before);
});

test('readers never wait for a writer: a stale index is rebuilt in the cache meanwhile, in the dataset once it is free', async () => {
  const s = await withDataset();
  rmSync(s.path('ds', 'index.sqlite'));
  const lock = await holdLock(s);
  try {
    const started = Date.now();
    const health = await json(s, ['stats', s.path('ds')]);
    assert.is(health.index_rebuilt, true);
    assert.ok(health.index_path.startsWith(s.path('cache')), health.index_path);
    assert.not.ok(existsSync(s.path('ds', 'index.sqlite')), 'the dataset is left to its writer');
    assert.is((await json(s, ['query', s.path('ds'), '--sql', 'SELECT count(*) AS n FROM runs']))[0].n, 2);
    assert.is((await s.run(['find', s.path('ds'), '--match', 'disk'])).code, 0);
    assert.is((await s.run(['export', '-f', s.path('ds'), '-t', '-', '-o', 'storyline'])).stdout.trim().split('\n').length, 2);
    assert.ok(Date.now() - started < 15_000);
  } finally {
    lock.release();
  }
  const health = await json(s, ['stats', s.path('ds')]);
  assert.is(health.index_path, s.path('ds', 'index.sqlite'));
  assert.equal(leftovers(s.path('ds')), []);
});

test('a replace interrupted between its renames: readers read the old copy while a writer works, and put it back when none does', async () => {
  const s = await withDataset();
  const old = await json(s, ['stats', s.path('ds')]);
  // The state a replace is in between moving the old dataset aside and renaming the new one in.
  const lock = await holdLock(s);
  renameSync(s.path('ds'), asidePathOf(s.path('ds')));
  mkdirSync(s.path('.ds.tmp-0123456789ab'));
  try {
    const health = await json(s, ['stats', s.path('ds')]);
    assert.is(health.snapshot_id, old.snapshot_id);
    assert.is((await s.run(['export', '-f', s.path('ds'), '-t', '-', '-o', 'storyline'])).stdout.trim().split('\n').length, 2);
    assert.not.ok(existsSync(s.path('ds')), 'nothing is moved under a live writer');
  } finally {
    lock.release();
  }
  // No writer now: the reader puts the old dataset back, and the next writer removes the rest.
  assert.is((await json(s, ['stats', s.path('ds')])).snapshot_id, old.snapshot_id);
  assert.ok(existsSync(s.path('ds', 'trajstore.json')));
  assert.equal(hiddenSiblings(s.path('ds')), ['.ds.tmp-0123456789ab']);
  writeStorylines(s.path('more.jsonl'), ['more-0']);
  assert.is((await s.run(['import', '-f', s.path('more.jsonl'), '-t', s.path('ds'), '--mode', 'append'])).code, 0);
  assert.equal(leftovers(s.path('ds')), []);
});

test.run();
