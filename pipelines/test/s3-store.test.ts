/**
 * The object-store backend itself (pipelines/dataset/s3-store.ts) and its local cache (s3-cache.ts),
 * against the real S3 test server: an object past the multipart threshold, a listing of more than
 * one page (1,000 keys), Parquet parts read through ranged GETs as the local store reads them, and
 * the cache's bound and its safety under concurrent commands.
 */
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, statSync, utimesSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool } from '../../lib/testing/run-tool.js';
import { S3TestServer, TEST_ACCESS_KEY, TEST_SECRET_KEY } from '../../bench/lib/s3-server.js';
import { scratchDir } from '../../lib/testing/scratch.js';
import { walkFiles } from '../../lib/walk.js';
import { MANIFEST_KEY, readSnapshot, requireManifest } from '../dataset/layout.js';
import { relationRowGroups } from '../dataset/parquet.js';
import { partKeysOf } from '../dataset/s3-cache.js';
import { MULTIPART_PART_BYTES, S3ObjectStore } from '../dataset/s3-store.js';
import { LocalObjectStore } from '../dataset/store.js';
import type { S3Place } from '../pins/pins.js';
import { PROJECT_TESTDATA } from './helpers/fixtures.js';

const home = scratchDir('s3-store');
let server: S3TestServer;
const place = (prefix: string): S3Place => ({ uri: `s3://store/${prefix}`, bucket: 'store', prefix, endpoint: server.endpoint, region: 'us-west-2', credentials: { accessKeyId: TEST_ACCESS_KEY, secretAccessKey: TEST_SECRET_KEY } });
const env = (): NodeJS.ProcessEnv => ({ HOME: home, XDG_CACHE_HOME: join(home, 'cache'), XDG_CONFIG_HOME: join(home, 'config'), ...server.env });

test.before(async () => {
  server = await S3TestServer.start();
  await server.createBucket('store');
});

test.after(async () => {
  await server?.stop();
});

test('an object past the multipart threshold goes up in parts, streamed, and comes back whole, by range and by download', async () => {
  const store = new S3ObjectStore(place('big'), {});
  try {
    const bytes = randomBytes(2 * MULTIPART_PART_BYTES + 12345);
    const writer = store.writer('parts/steps/big.parquet');
    for (let at = 0; at < bytes.length; at += 1 << 20) writer.write(bytes.subarray(at, at + (1 << 20)));
    assert.is(writer.size, bytes.length);
    await writer.commit();
    assert.is(await store.size('parts/steps/big.parquet'), bytes.length);
    // A multipart upload's ETag ends with its number of parts.
    assert.match((await store.getVersioned('parts/steps/big.parquet'))!.etag, /-3"?$/);
    for (const [start, end] of [[0, 8], [bytes.length - 8, bytes.length], [MULTIPART_PART_BYTES - 100, MULTIPART_PART_BYTES + 100]] as const) {
      assert.ok((await store.getRange('parts/steps/big.parquet', start, end)).equals(bytes.subarray(start, end)), `bytes ${start}-${end}`);
    }
    const path = join(home, 'big.parquet');
    await store.download('parts/steps/big.parquet', path);
    assert.ok(readFileSync(path).equals(bytes));
  } finally {
    store.close();
  }
});

test('a listing of more than 1,000 keys reads every page, in byte order; deleteMany removes them all', async () => {
  const store = new S3ObjectStore(place('many'), {});
  try {
    const keys = Array.from({ length: 1_234 }, (_, i) => `parts/runs/${String(i).padStart(5, '0')}.parquet`);
    for (let i = 0; i < keys.length; i += 16) await Promise.all(keys.slice(i, i + 16).map((key) => store.put(key, key)));
    await store.put('snapshots/x.json', '{}');
    const listed = await store.list('parts/');
    assert.is(listed.length, keys.length);
    assert.equal(listed, keys);
    assert.is((await store.list('')).length, keys.length + 1);
    await store.deleteMany(await store.list(''));
    assert.equal(await store.list(''), []);
  } finally {
    store.close();
  }
});

test('Parquet parts read through the object store (footer and row groups by ranged GETs) give the rows the local store gives', async () => {
  const local = join(home, 'local-ds');
  const r = await runTool('trajstore', ['import', '-f', join(PROJECT_TESTDATA, 'samples', 'agentb-code'), '-t', local], { env: env(), cwd: home });
  assert.is(r.code, 0, r.stderr);
  const localStore = new LocalObjectStore(local);
  const snapshot = await readSnapshot(localStore, (await requireManifest(localStore)).snapshot_id);
  const store = new S3ObjectStore(place('copied'), {});
  try {
    for (const key of [...partKeysOf(snapshot), `snapshots/${snapshot.id}.json`, MANIFEST_KEY]) await store.upload(key, join(local, key));
    for (const relation of ['runs', 'steps', 'tool_calls'] as const) {
      const rows = async (from: LocalObjectStore | S3ObjectStore) => {
        const all: unknown[] = [];
        for await (const group of relationRowGroups(from, snapshot, relation)) all.push(...group);
        return all;
      };
      const remote = await rows(store);
      assert.ok(remote.length > 0, relation);
      assert.equal(remote, await rows(localStore), relation);
    }
  } finally {
    store.close();
  }
});

test('concurrent readers with one empty cache all succeed and share one copy; past the bound, old copies and their unshared parts go', async () => {
  const cacheEnv = { ...env(), XDG_CACHE_HOME: join(home, 'cache-bound') };
  const trajstore = (args: string[], extra: NodeJS.ProcessEnv = {}) => runTool('trajstore', args, { env: { ...cacheEnv, ...extra }, cwd: home });
  const samples = join(PROJECT_TESTDATA, 'samples');
  assert.is((await trajstore(['import', '-f', join(samples, 'atif'), '-t', 's3://store/bound'], { XDG_CACHE_HOME: join(home, 'cache-writer') })).code, 0);
  const readers = await Promise.all([1, 2, 3, 4].map(() => trajstore(['query', 's3://store/bound', '--sql', 'SELECT count(*) AS n FROM dataset.steps', '--format', 'json'])));
  for (const reader of readers) assert.is(reader.code, 0, reader.stderr);
  assert.equal(new Set(readers.map((reader) => reader.stdout)).size, 1);
  const root = join(home, 'cache-bound', 'trajstore', 's3');
  const copies = () => readdirSync(join(root, 'snapshots')).filter((name) => !name.startsWith('.'));
  assert.is(copies().length, 1);
  const first = copies()[0]!;
  // A second snapshot (an append), read with a bound of one byte: the first copy is evicted once it is
  // no longer in use (its time is put back two minutes here), and the current one stays.
  assert.is((await trajstore(['import', '-f', join(samples, 'chat-messages'), '-t', 's3://store/bound', '--mode', 'append'], { XDG_CACHE_HOME: join(home, 'cache-writer') })).code, 0);
  const past = new Date(Date.now() - 120_000);
  utimesSync(join(root, 'snapshots', first), past, past);
  const read = await trajstore(['list', 's3://store/bound'], { TRAJSTORE_S3_CACHE_MAX_BYTES: '1' });
  assert.is(read.code, 0, read.stderr);
  assert.equal(copies().length, 1);
  assert.is.not(copies()[0], first);
  // Every part left in the pool is linked by the remaining copy.
  const parts: string[] = [];
  walkFiles(join(root, 'parts'), (_rel, _entry, path) => parts.push(path));
  assert.ok(parts.length > 0, 'the remaining copy\'s parts are in the pool');
  for (const part of parts) assert.is(statSync(part).nlink, 2, part);

  // A bound that is not a whole number of bytes is refused (exit 2, naming it), not taken for the default.
  for (const bad of ['10G', '1.5', '0', '-1']) {
    const refused = await trajstore(['list', 's3://store/bound'], { TRAJSTORE_S3_CACHE_MAX_BYTES: bad });
    assert.is(refused.code, 2, `${bad}: ${refused.stderr}`);
    assert.match(refused.stderr, `invalid TRAJSTORE_S3_CACHE_MAX_BYTES ${JSON.stringify(bad)}: expected a whole number of bytes, at least 1`);
  }
  assert.is((await trajstore(['list', 's3://store/bound'], { TRAJSTORE_S3_CACHE_MAX_BYTES: '' })).code, 0, 'empty: the default');
});

test.run();
