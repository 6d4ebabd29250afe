/**
 * `serve` of an s3:// dataset and the local cache's eviction (s3-cache.ts), as real processes against
 * the real S3 test server: the copy of the snapshot serve reads is marked in use (its directory's
 * time) for as long as serve holds it, so another command's eviction, past the cache's bound, leaves
 * it alone however long serve has been running.
 */
import { existsSync, readdirSync, rmSync, statSync, utimesSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool } from '../../lib/testing/run-tool.js';
import { S3TestServer } from '../../bench/lib/s3-server.js';
import { startServeProcess } from '../../bench/lib/serve-process.js';
import { scratchDir } from '../../lib/testing/scratch.js';
import { PROJECT_TESTDATA } from './helpers/fixtures.js';

const home = scratchDir('s3-serve-cache');
let server: S3TestServer;

function envOf(cache: string, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  return {
    HOME: home,
    XDG_CONFIG_HOME: join(home, 'config'),
    XDG_DATA_HOME: join(home, 'data'),
    XDG_CACHE_HOME: join(home, cache),
    ...server.env,
    ...extra,
  };
}
const trajstore = (args: string[], env: NodeJS.ProcessEnv) => runTool('trajstore', args, { env, cwd: home });

test.before(async () => {
  server = await S3TestServer.start();
  await server.createBucket('lake');
});

test.after(async () => {
  await server?.stop();
});

test('a copy serve reads stays in use while serve runs: another command\'s eviction, long after serve opened it, leaves it, and serve answers on', async () => {
  const writer = envOf('cache-writer');
  const samples = join(PROJECT_TESTDATA, 'samples');
  assert.is((await trajstore(['import', '-f', join(samples, 'atif'), '-t', 's3://lake/served'], writer)).code, 0);
  assert.is((await trajstore(['import', '-f', join(samples, 'chat-messages'), '-t', 's3://lake/other'], writer)).code, 0);
  const reader = envOf('cache-reader');
  // A query first: the copy gets its index inside it, which serve then reads.
  const counted = await trajstore(['query', 's3://lake/served', '--sql', 'SELECT count(*) AS n FROM dataset.runs', '--format', 'json'], reader);
  assert.is(counted.code, 0, counted.stderr);
  const runs = (JSON.parse(counted.stdout) as Array<{ n: number }>)[0]!.n;
  const served = await startServeProcess(['serve', 's3://lake/served', '--listen', '127.0.0.1:0'], { env: reader, cwd: home });
  try {
    const answers = async (): Promise<{ health: number; query: number; runs: unknown }> => {
      const health = await fetch(`${served.url}api/mounts/default`);
      await health.arrayBuffer();
      const query = await fetch(`${served.url}api/mounts/default/query`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ sql: 'SELECT count(*) FROM dataset.runs' }) });
      const body = (await query.json()) as { rows?: unknown[][] };
      return { health: health.status, query: query.status, runs: body.rows?.[0]?.[0] };
    };
    assert.equal(await answers(), { health: 200, query: 200, runs });
    const snapshots = join(home, 'cache-reader', 'trajstore', 's3', 'snapshots');
    const copies = readdirSync(snapshots).filter((name) => !name.startsWith('.'));
    assert.is(copies.length, 1);
    const copy = join(snapshots, copies[0]!);
    // As if serve had opened it minutes ago: past the minute a copy counts as in use unless its holder says otherwise.
    const past = new Date(Date.now() - 5 * 60_000);
    utimesSync(copy, past, past);
    const refreshed = (): boolean => statSync(copy).mtimeMs > Date.now() - 60_000;
    for (const end = Date.now() + 15_000; !refreshed() && Date.now() < end; ) await sleep(100);
    // Another command reads another dataset with the cache past its bound: what is not in use goes.
    const other = await trajstore(['list', 's3://lake/other'], { ...reader, TRAJSTORE_S3_CACHE_MAX_BYTES: '1' });
    assert.is(other.code, 0, other.stderr);
    assert.equal(await answers(), { health: 200, query: 200, runs });
    assert.ok(existsSync(copy), 'the copy serve holds stays');

    // An append: serve moves to the new snapshot and lets the old copy go, which is then no longer marked in use.
    assert.is((await trajstore(['import', '-f', join(samples, 'chat-messages'), '-t', 's3://lake/served', '--mode', 'append'], writer)).code, 0);
    const appended = await answers();
    assert.equal([appended.health, appended.query], [200, 200]);
    assert.ok(Number(appended.runs) > runs, JSON.stringify(appended));
    utimesSync(copy, past, past);
    // Longer than a holder takes to mark its copy again.
    await sleep(12_000);
    assert.not.ok(refreshed(), 'the old copy is no longer marked in use');
    assert.is((await trajstore(['list', 's3://lake/other'], { ...reader, TRAJSTORE_S3_CACHE_MAX_BYTES: '1' })).code, 0);
    assert.not.ok(existsSync(copy), 'the old copy is evicted');
    assert.equal(await answers(), appended);
  } finally {
    await served.stop();
  }
});

test('the cache deleted under serve (which the cache allows at any time): the next request fetches the copy again and answers', async () => {
  const writer = envOf('cache-writer');
  assert.is((await trajstore(['import', '-f', join(PROJECT_TESTDATA, 'samples', 'atif'), '-t', 's3://lake/deleted'], writer)).code, 0);
  const reader = envOf('cache-deleted');
  // With the copy's index built inside it by a query, and without (serve builds its own in the cache).
  for (const queryFirst of [true, false]) {
    if (queryFirst) assert.is((await trajstore(['query', 's3://lake/deleted', '--sql', 'SELECT 1'], reader)).code, 0);
    const served = await startServeProcess(['serve', 's3://lake/deleted', '--listen', '127.0.0.1:0'], { env: reader, cwd: home });
    try {
      const answers = async (): Promise<number[]> => {
        const health = await fetch(`${served.url}api/mounts/default`);
        await health.arrayBuffer();
        const query = await fetch(`${served.url}api/mounts/default/query`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ sql: 'SELECT count(*) FROM dataset.runs' }) });
        await query.arrayBuffer();
        return [health.status, query.status];
      };
      assert.equal(await answers(), [200, 200]);
      rmSync(join(home, 'cache-deleted'), { recursive: true, force: true });
      assert.equal(await answers(), [200, 200], served.stderr());
      assert.ok(readdirSync(join(home, 'cache-deleted', 'trajstore', 's3', 'snapshots')).length > 0, 'the copy is in the cache again');
    } finally {
      await served.stop();
    }
  }
});

test.run();
