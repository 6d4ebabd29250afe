/**
 * The index cache ($XDG_CACHE_HOME/trajstore/index/, pipelines/dataset/index-cache.ts), as a user meets
 * it: real `trajstore` processes reading a local dataset whose index they may not rebuild in it (its
 * writer holds the lock; `serve` never writes), across snapshots an owner appends. Each snapshot's
 * index is rebuilt in the cache; past TRAJSTORE_INDEX_CACHE_MAX_BYTES those not used in the last
 * minute go, while the one a running `serve` holds stays however long ago it was opened. Each append is
 * followed by the dataset's index being deleted (a dataset copied without it), so that every reader
 * of the new snapshot needs the cache.
 */
import { existsSync, readdirSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServeProcess } from '../../bench/lib/serve-process.js';
import { runTool } from '../../lib/testing/run-tool.js';
import { acquireWriterLock } from '../dataset/lock.js';
import { PROJECT_TESTDATA } from './helpers/fixtures.js';
import { sandbox } from './helpers/sandbox.js';

const { home, env, path } = sandbox('index-cache');
const cacheDir = path('cache', 'trajstore', 'index');
const SAMPLES = join(PROJECT_TESTDATA, 'samples');
/** A bound every index is past: only what is in use stays. */
const TINY_BOUND = { TRAJSTORE_INDEX_CACHE_MAX_BYTES: '1' };

const trajstore = (args: string[], extra: NodeJS.ProcessEnv = {}) => runTool('trajstore', args, { env: { ...env, ...extra }, cwd: home });

/** The indexes in the cache, by name. */
const cachedIndexes = (): string[] => (existsSync(cacheDir) ? readdirSync(cacheDir).filter((name) => name.endsWith('.sqlite')).sort() : []);
const currentSnapshot = (ds: string): string => (JSON.parse(readFileSync(join(ds, 'trajstore.json'), 'utf8')) as { snapshot_id: string }).snapshot_id;
/** The name of the cached index of `ds`'s current snapshot: `<dataset hash>-<snapshot id>.sqlite`. */
const cachedName = (ds: string): RegExp => new RegExp(`^[0-9a-f]{16}-${currentSnapshot(ds)}\\.sqlite$`);

/** As if `file` had last been used `ms` ago. */
function backdate(file: string, ms: number): void {
  const past = new Date(Date.now() - ms);
  utimesSync(file, past, past);
}

async function imported(ds: string): Promise<void> {
  const r = await trajstore(['import', '-f', join(SAMPLES, 'atif'), '-t', ds]);
  assert.is(r.code, 0, r.stderr);
  rmSync(join(ds, 'index.sqlite'));
}

/** A new snapshot, its index gone from the dataset. */
async function appended(ds: string): Promise<void> {
  const r = await trajstore(['import', '-f', join(SAMPLES, 'chat-messages'), '-t', ds, '--mode', 'append']);
  assert.is(r.code, 0, r.stderr);
  rmSync(join(ds, 'index.sqlite'));
}

/** Runs `args` while a writer (this test) holds the dataset's lock: the reader rebuilds the index in the cache. */
async function whileLocked(ds: string, args: string[], extra: NodeJS.ProcessEnv = {}) {
  const lock = await acquireWriterLock(ds, { purpose: 'the test', timeoutMs: 0 });
  try {
    return await trajstore(args, extra);
  } finally {
    lock.release();
  }
}

test('find over snapshots an owner appends, its writer at work: past the bound, the cache keeps the indexes used in the last minute and no other; a killed rebuild\'s stale temporary goes', async () => {
  const ds = path('found');
  await imported(ds);
  for (let snapshot = 1; snapshot <= 4; snapshot++) {
    if (snapshot > 1) await appended(ds);
    const last = snapshot === 4;
    if (last) {
      // What earlier finds built, as if used minutes ago; a killed rebuild's temporary from hours ago, and one of a rebuild at work.
      for (const name of cachedIndexes()) backdate(join(cacheDir, name), 2 * 60_000);
      writeFileSync(join(cacheDir, 'killed.sqlite.tmp-0123456789ab'), Buffer.alloc(4096));
      backdate(join(cacheDir, 'killed.sqlite.tmp-0123456789ab'), 2 * 60 * 60_000);
      writeFileSync(join(cacheDir, 'building.sqlite.tmp-ba9876543210'), Buffer.alloc(4096));
    }
    const found = await whileLocked(ds, ['find', ds, '--match', 'the', '--format', 'json'], TINY_BOUND);
    assert.is(found.code, 0, found.stderr);
    assert.ok((JSON.parse(found.stdout) as { matches: unknown[] }).matches.length > 0, found.stdout);
    // Until then every index was used within the minute (another command may be about to open it): all stay.
    if (!last) assert.is(cachedIndexes().length, snapshot, cachedIndexes().join(' '));
  }
  assert.is(cachedIndexes().length, 1, cachedIndexes().join(' '));
  assert.match(cachedIndexes()[0]!, cachedName(ds));
  assert.equal(readdirSync(cacheDir).filter((name) => name.includes('.tmp-')), ['building.sqlite.tmp-ba9876543210']);
});

test('serve of a dataset appended to: one index per snapshot, the old ones evicted; the one serve holds is kept marked used, survives another command\'s eviction, and serve answers from it without rebuilding', async () => {
  rmSync(cacheDir, { recursive: true, force: true });
  const ds = path('served');
  await imported(ds);
  const served = await startServeProcess(['serve', ds, '--listen', '127.0.0.1:0'], { env: { ...env, ...TINY_BOUND }, cwd: home });
  try {
    const health = async (): Promise<{ snapshot_id: string; index_path: string }> => {
      const response = await fetch(`${served.url}api/mounts/default`);
      assert.is(response.status, 200);
      return (await response.json()) as { snapshot_id: string; index_path: string };
    };
    // SQL attaches the index by its path: it must be there.
    const runs = async (): Promise<unknown> => {
      const response = await fetch(`${served.url}api/mounts/default/query`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ sql: 'SELECT count(*) FROM dataset.runs' }) });
      const body = (await response.json()) as { rows?: unknown[][] };
      assert.is(response.status, 200, JSON.stringify(body));
      return body.rows?.[0]?.[0];
    };
    let current = await health();
    assert.is(dirname(current.index_path), cacheDir);
    assert.match(basename(current.index_path), cachedName(ds));
    for (let append = 0; append < 3; append++) {
      await appended(ds);
      const before = current.index_path;
      // What serve no longer reads, as if used minutes ago; the index it reads is left as it is.
      for (const name of cachedIndexes()) if (join(cacheDir, name) !== before) backdate(join(cacheDir, name), 2 * 60_000);
      current = await health();
      assert.is(current.snapshot_id, currentSnapshot(ds));
      // The new snapshot's index, and the one serve let go just now (used within the minute).
      assert.equal(cachedIndexes(), [basename(before), basename(current.index_path)].sort());
      assert.ok(Number(await runs()) > 0);
    }

    // The index serve holds, as if it had opened it minutes ago: serve marks it used again within seconds.
    const held = current.index_path;
    const inode = statSync(held).ino;
    const answer = await runs();
    backdate(held, 5 * 60_000);
    const marked = (): boolean => statSync(held).mtimeMs > Date.now() - 60_000;
    for (const end = Date.now() + 15_000; !marked() && Date.now() < end; ) await sleep(100);
    assert.ok(marked(), 'serve marks the index it holds as used');
    // Another command rebuilds another dataset's index in the cache, past the bound.
    const other = path('other');
    await imported(other);
    const stats = await whileLocked(other, ['stats', other, '--format', 'json'], TINY_BOUND);
    assert.is(stats.code, 0, stats.stderr);
    assert.ok(existsSync(held), 'the index serve holds stays');
    assert.is((await health()).index_path, held);
    assert.is(await runs(), answer);
    assert.is(statSync(held).ino, inode, 'serve answered from the index it held, not a rebuilt one');
  } finally {
    await served.stop();
  }
});

test('the cache keeps each dataset\'s indexes apart: another dataset that claims the same snapshot id never reads this one\'s index', async () => {
  const mine = path('mine');
  await imported(mine);
  const theirs = path('theirs');
  const r = await trajstore(['import', '-f', join(SAMPLES, 'chat-messages'), '-t', theirs]);
  assert.is(r.code, 0, r.stderr);
  rmSync(join(theirs, 'index.sqlite'));
  // A snapshot id is what its descriptor says: a dataset made by someone else may name any.
  const claimed = currentSnapshot(mine);
  const own = currentSnapshot(theirs);
  const descriptor = JSON.parse(readFileSync(join(theirs, 'snapshots', `${own}.json`), 'utf8')) as { id: string };
  writeFileSync(join(theirs, 'snapshots', `${claimed}.json`), JSON.stringify({ ...descriptor, id: claimed }));
  rmSync(join(theirs, 'snapshots', `${own}.json`));
  const manifest = JSON.parse(readFileSync(join(theirs, 'trajstore.json'), 'utf8')) as object;
  writeFileSync(join(theirs, 'trajstore.json'), JSON.stringify({ ...manifest, snapshot_id: claimed }));

  const sources = async (ds: string): Promise<string[]> => {
    const listed = await whileLocked(ds, ['list', ds, '--format', 'json']);
    assert.is(listed.code, 0, listed.stderr);
    return (JSON.parse(listed.stdout) as Array<{ source_path: string }>).map((row) => row.source_path).sort();
  };
  const mineSources = await sources(mine);
  assert.ok(mineSources.every((source) => source.includes('atif')), mineSources.join(' '));
  const theirSources = await sources(theirs);
  assert.ok(theirSources.length > 0 && theirSources.every((source) => !source.includes('atif')), theirSources.join(' '));
  assert.equal(await sources(mine), mineSources);
});

test('TRAJSTORE_INDEX_CACHE_MAX_BYTES that is not a whole number of bytes: exit 2 naming it, before any index is built; empty is the default', async () => {
  rmSync(cacheDir, { recursive: true, force: true });
  const ds = path('misbound');
  await imported(ds);
  for (const bad of ['10G', '1.5', '0', '-1']) {
    const refused = await whileLocked(ds, ['stats', ds], { TRAJSTORE_INDEX_CACHE_MAX_BYTES: bad });
    assert.is(refused.code, 2, `${bad}: ${refused.stderr}`);
    assert.match(refused.stderr, `invalid TRAJSTORE_INDEX_CACHE_MAX_BYTES ${JSON.stringify(bad)}: expected a whole number of bytes, at least 1`);
    assert.equal(cachedIndexes(), []);
  }
  const defaulted = await whileLocked(ds, ['stats', ds], { TRAJSTORE_INDEX_CACHE_MAX_BYTES: '' });
  assert.is(defaulted.code, 0, defaulted.stderr);
  assert.is(cachedIndexes().length, 1, cachedIndexes().join(' '));
  assert.match(cachedIndexes()[0]!, cachedName(ds));
});

test.run();
