/**
 * A bucket is data written by someone else: its manifest and snapshot descriptors decide which
 * keys a reader downloads and where the local cache puts them. Through the real CLI against a real
 * S3-compatible server process (moto): descriptors that name keys outside `parts/`, ids that are
 * paths, and a prefix that copies another dataset's snapshot id with other bytes.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { S3TestServer, TEST_ACCESS_KEY, TEST_SECRET_KEY } from '../../bench/lib/s3-server.js';
import { runTool } from '../../lib/testing/run-tool.js';
import { scratchDir } from '../../lib/testing/scratch.js';
import type { Manifest, Snapshot } from '../dataset/layout.js';
import { S3ObjectStore } from '../dataset/s3-store.js';
import { walkFiles } from '../../lib/walk.js';
import { PROJECT_TESTDATA } from './helpers/fixtures.js';

const ATIF = join(PROJECT_TESTDATA, 'samples', 'atif');
const CLAUDE = join(PROJECT_TESTDATA, 'samples', 'agentb-code');
const home = scratchDir('s3-hostile-buckets');
let server: S3TestServer;

const env = (cache: string): NodeJS.ProcessEnv => ({
  HOME: home,
  XDG_CONFIG_HOME: join(home, 'config'),
  XDG_DATA_HOME: join(home, 'data'),
  XDG_CACHE_HOME: join(home, cache),
  AWS_ENDPOINT_URL_S3: server.endpoint,
  AWS_ACCESS_KEY_ID: TEST_ACCESS_KEY,
  AWS_SECRET_ACCESS_KEY: TEST_SECRET_KEY,
  AWS_REGION: 'us-west-2',
});
const trajstore = (args: string[], cache: string) => runTool('trajstore', args, { env: env(cache), cwd: home });

function storeAt(prefix: string): S3ObjectStore {
  return new S3ObjectStore({ uri: `s3://lake/${prefix}`, bucket: 'lake', prefix, endpoint: server.endpoint, region: 'us-west-2' }, env('unused'));
}

/** Copies every object of one prefix to another, with `edit` applied to each (return undefined to keep it as it is). */
async function copyPrefix(from: string, to: string, edit: (key: string, bytes: Buffer) => Buffer | string | undefined = () => undefined): Promise<void> {
  const [source, target] = [storeAt(from), storeAt(to)];
  try {
    for (const key of await source.list('')) {
      const bytes = (await source.get(key))!;
      await target.put(key, edit(key, bytes) ?? bytes);
    }
  } finally {
    source.close();
    target.close();
  }
}

/** `bytes` with the byte at `at` inverted: the same size, other bytes. */
function flipped(bytes: Buffer, at: number): Buffer {
  const copy = Buffer.from(bytes);
  copy[at]! ^= 0xff;
  return copy;
}

/** The file of the parts cache of `cache` that holds `key`. */
function cachedPart(cache: string, key: string): string {
  const found: string[] = [];
  walkFiles(join(home, cache, 'trajstore', 's3', 'parts'), (rel, _entry, full) => rel.endsWith(key) && found.push(full));
  assert.is(found.length, 1, `${key} is cached once`);
  return found[0]!;
}

async function runCount(prefix: string, cache: string): Promise<number> {
  const r = await trajstore(['query', `s3://lake/${prefix}`, '--sql', 'SELECT count(*) AS n FROM dataset.runs', '--format', 'json'], cache);
  assert.is(r.code, 0, r.stderr);
  return (JSON.parse(r.stdout) as Array<{ n: number }>)[0]!.n;
}

test.before(async () => {
  server = await S3TestServer.start();
  await server.createBucket('lake');
  const made = await trajstore(['import', '-f', ATIF, '-t', 's3://lake/good'], 'cache-setup');
  assert.is(made.code, 0, made.stderr);
});

test.after(async () => {
  await server?.stop();
});

test('a descriptor listing a part key that climbs out of the cache is refused (exit 2) and nothing is written outside', async () => {
  const escape = `parts/runs/../../../../../../..${home}/PWNED.parquet`;
  await copyPrefix('good', 'climb', (key, bytes) => {
    if (!key.startsWith('snapshots/')) return undefined;
    const snapshot = JSON.parse(bytes.toString('utf8')) as Snapshot;
    snapshot.relations.runs![0]!.key = escape;
    return JSON.stringify(snapshot);
  });
  const store = storeAt('climb');
  await store.put(escape, 'attacker bytes');
  store.close();
  const r = await trajstore(['list', 's3://lake/climb'], 'cache-climb');
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, /not a valid snapshot descriptor: relations\.runs lists .* not a key of the form parts\/runs\/<name>\.parquet/);
  assert.not.ok(existsSync(join(home, 'PWNED.parquet')), 'the key was not downloaded outside the cache');
});

test('a manifest whose snapshot id is a path is refused before any file is made from it', async () => {
  await copyPrefix('good', 'idpath', (key, bytes) => {
    if (key !== 'trajstore.json') return undefined;
    const manifest = JSON.parse(bytes.toString('utf8')) as Manifest;
    return JSON.stringify({ ...manifest, snapshot_id: `../../../../../..${home}/SNAPDIR` });
  });
  const r = await trajstore(['list', 's3://lake/idpath'], 'cache-idpath');
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, /trajstore\.json: not a trajstore manifest \(snapshot_id .* is not a snapshot id\)/);
  assert.not.ok(existsSync(join(home, 'SNAPDIR')) || existsSync(join(home, 'SNAPDIR.json')));
});

test("a prefix naming another dataset's snapshot id with other parts does not change what that dataset reads", async () => {
  // `decoy` is the good dataset's snapshot with the runs part swapped for another dataset's.
  const other = await trajstore(['import', '-f', CLAUDE, '-t', 's3://lake/other'], 'cache-setup');
  assert.is(other.code, 0, other.stderr);
  const otherStore = storeAt('other');
  const otherRuns = (await otherStore.list('parts/runs/'))[0]!;
  const otherBytes = (await otherStore.get(otherRuns))!;
  otherStore.close();
  await copyPrefix('good', 'decoy', (key, bytes) => {
    if (key.startsWith('parts/runs/')) return otherBytes;
    if (!key.startsWith('snapshots/')) return undefined;
    // The same id, with the runs part's size of the bytes it now holds.
    const snapshot = JSON.parse(bytes.toString('utf8')) as Snapshot;
    for (const part of snapshot.relations.runs ?? []) Object.assign(part, { bytes: otherBytes.length, sha256: createHash('sha256').update(otherBytes).digest('hex') });
    return JSON.stringify(snapshot);
  });
  const cache = 'cache-shared';
  const good = await runCount('good', 'cache-good-alone');
  const decoy = await runCount('decoy', cache);
  assert.is.not(decoy, good, 'the decoy reads its own bytes');
  // Read after the decoy, with the same cache: the good dataset still reads its own parts.
  assert.is(await runCount('good', cache), good);
  const append = await trajstore(['import', '-f', CLAUDE, '-t', 's3://lake/good', '--mode', 'append'], cache);
  assert.is(append.code, 0, append.stderr);
  assert.is(await runCount('good', 'cache-fresh'), await runCount('good', cache), 'the append built on the good snapshot, readable from a clean cache');
});

test('a part damaged in the bucket is a damaged dataset (exit 2) naming the object, and is read again once mended', async () => {
  const good = storeAt('good');
  const key = (await good.list('parts/steps/'))[0]!;
  const bytes = (await good.get(key))!;
  good.close();
  for (const [round, [what, damaged, message]] of ([
    ['truncated', bytes.subarray(0, bytes.length - 100), /the object is \d+ bytes, the snapshot lists \d+: the dataset is damaged/],
    ['garbage of the same size', Buffer.alloc(bytes.length, 7), /its bytes are not those the snapshot lists \(SHA-256\): the dataset is damaged/],
    ['bytes changed inside, the size kept', flipped(bytes, bytes.length >> 1), /its bytes are not those the snapshot lists \(SHA-256\): the dataset is damaged/],
  ] as const).entries()) {
    // A cache of its own: a part is cached by its key, and the mended one of the round before is the good one.
    const cache = `cache-mended-${round}`;
    await copyPrefix('good', 'mended', (k) => (k === key ? damaged : undefined));
    const r = await trajstore(['list', 's3://lake/mended'], cache);
    assert.is(r.code, 2, `${what}: ${r.stderr}`);
    assert.match(r.stderr, message, what);
    assert.match(r.stderr, new RegExp(`s3://lake/mended/${key.replace(/\./g, '\\.')}`), `${what}: names the object`);
    assert.not.match(r.stderr, join(home, cache), `${what}: names no file of the cache`);
    await copyPrefix('good', 'mended');
    assert.is(await runCount('mended', cache), await runCount('good', 'cache-good-alone'), `${what}: read again once mended`);
  }
});

test('a part damaged in the local cache after its download (the size kept) is dropped and fetched again; damaged in the bucket too, the object is named as damaged (exit 2), never the cache', async () => {
  const cache = 'cache-damaged-copy';
  await copyPrefix('good', 'cached');
  const clean = await trajstore(['export', '-f', 's3://lake/cached', '-t', '-', '-o', 'atif'], cache);
  assert.is(clean.code, 0, clean.stderr);
  const store = storeAt('cached');
  const keys = [...(await store.list('parts/steps/')), ...(await store.list('parts/runs/'))];
  const served = new Map<string, Buffer>();
  for (const key of keys) served.set(key, (await store.get(key))!);
  // Inside a part (its footer whole: it still opens as Parquet) and in a footer (it no longer does).
  for (const [i, key] of keys.entries()) {
    const file = cachedPart(cache, key);
    const bytes = readFileSync(file);
    writeFileSync(file, flipped(bytes, i === 0 ? bytes.length >> 1 : bytes.length - 20));
  }
  for (const [args, what] of [
    [['export', '-f', 's3://lake/cached', '-t', '-', '-o', 'atif'], 'export'],
    [['query', 's3://lake/cached', '--sql', 'SELECT count(*) AS n FROM dataset.steps', '--format', 'json'], 'query'],
  ] as const) {
    const r = await trajstore([...args], cache);
    assert.is(r.code, 0, `${what}: ${r.stderr}`);
    for (const key of keys) assert.ok(readFileSync(cachedPart(cache, key)).equals(served.get(key)!), `${what}: the cache holds ${key} as the server does`);
    if (what === 'export') assert.is(r.stdout, clean.stdout);
    // Damaged again for the next command.
    const file = cachedPart(cache, keys[0]!);
    writeFileSync(file, flipped(readFileSync(file), 200));
  }

  const key = keys[0]!;
  await store.put(key, flipped(served.get(key)!, 300));
  store.close();
  const r = await trajstore(['list', 's3://lake/cached'], cache);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, new RegExp(`s3://lake/cached/${key.replace(/\./g, '\\.')}: its bytes are not those the snapshot lists \\(SHA-256\\): the dataset is damaged`));
  assert.not.match(r.stderr, join(home, cache));
});

test('a snapshot written before parts had a SHA-256: a cached part damaged in its footer (it no longer opens as Parquet) is dropped and fetched again', async () => {
  const cache = 'cache-damaged-old';
  await copyPrefix('good', 'cached-old', (key, bytes) => {
    if (!key.startsWith('snapshots/')) return undefined;
    const snapshot = JSON.parse(bytes.toString('utf8')) as Snapshot;
    for (const part of Object.values(snapshot.relations).flat()) delete part.sha256;
    return JSON.stringify(snapshot);
  });
  const clean = await trajstore(['export', '-f', 's3://lake/cached-old', '-t', '-', '-o', 'atif'], cache);
  assert.is(clean.code, 0, clean.stderr);
  const store = storeAt('cached-old');
  const key = (await store.list('parts/steps/'))[0]!;
  const served = (await store.get(key))!;
  store.close();
  const file = cachedPart(cache, key);
  writeFileSync(file, flipped(readFileSync(file), served.length - 20));
  const r = await trajstore(['export', '-f', 's3://lake/cached-old', '-t', '-', '-o', 'atif'], cache);
  assert.is(r.code, 0, r.stderr);
  assert.is(r.stdout, clean.stdout);
  assert.ok(readFileSync(cachedPart(cache, key)).equals(served), 'the cache holds the part as the server does');
});

/** Flips a byte of a cached file and puts its times back: damage no stat can see (a disk's silent error). */
function flipUnseen(file: string, at: number): void {
  const { atime, mtime } = statSync(file);
  writeFileSync(file, flipped(readFileSync(file), at));
  utimesSync(file, atime, mtime);
}

test('a cached part damaged without a change of size or time is dropped at the read that meets it (exit 6, naming the object, never the cache), and the next run fetches it again', async () => {
  const cache = 'cache-damaged-unseen';
  await copyPrefix('good', 'unseen');
  const clean = await trajstore(['export', '-f', 's3://lake/unseen', '-t', '-', '-o', 'atif'], cache);
  assert.is(clean.code, 0, clean.stderr);
  const store = storeAt('unseen');
  const key = (await store.list('parts/steps/'))[0]!;
  const served = (await store.get(key))!;
  store.close();
  const object = new RegExp(`s3://lake/unseen/${key.replace(/\./g, '\\.')}: its copy in the local cache was damaged \\(.*\\) and has been dropped`);
  const copies = join(home, cache, 'trajstore', 's3', 'snapshots');
  // Read by export from the parts, and by a query whose index is rebuilt from them.
  for (const [what, args, before] of [
    ['export', ['export', '-f', 's3://lake/unseen', '-t', '-', '-o', 'atif'], () => undefined],
    ['query rebuilding the index', ['query', 's3://lake/unseen', '--sql', 'SELECT count(*) AS n FROM dataset.steps', '--format', 'json'], () => {
      for (const copy of readdirSync(copies)) rmSync(join(copies, copy, 'index.sqlite'), { force: true });
    }],
  ] as const) {
    flipUnseen(cachedPart(cache, key), served.length - 20);
    before();
    const r = await trajstore([...args], cache);
    assert.is(r.code, 6, `${what}: ${r.stderr}`);
    assert.match(r.stderr, object, what);
    assert.match(r.stderr, /run the command again/, what);
    assert.not.match(r.stderr, join(home, cache), `${what}: names no file of the cache`);
    const again = await trajstore([...args], cache);
    assert.is(again.code, 0, `${what}, run again: ${again.stderr}`);
    if (what === 'export') assert.is(again.stdout, clean.stdout);
    else assert.ok((JSON.parse(again.stdout) as Array<{ n: number }>)[0]!.n > 0);
    assert.ok(readFileSync(cachedPart(cache, key)).equals(served), `${what}: the cache holds the part as the server does`);
  }
});

test.run();
