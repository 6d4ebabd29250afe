/**
 * Datasets at s3://bucket/prefix, through the real CLI against a real S3-compatible server process
 * on loopback (bench/lib/s3-server.ts: moto's S3, which honours If-None-Match and If-Match on PUT),
 * never a mocked client: every command, the conditional manifest commit with two writers, the
 * endpoint going away mid-import, the exit codes, and credentials never shown.
 */
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, spawnSync } from 'node:child_process';
import { runTool, toolScript } from '../../lib/testing/run-tool.js';
import { S3Gate, S3TestServer, TEST_ACCESS_KEY, TEST_SECRET_KEY } from '../../bench/lib/s3-server.js';
import { startServeProcess } from '../../bench/lib/serve-process.js';
import { scratchDir } from '../../lib/testing/scratch.js';
import { walkFiles } from '../../lib/walk.js';
import { dropMarker, MANIFEST_KEY, type Snapshot } from '../dataset/layout.js';
import { partKeysOf } from '../dataset/s3-cache.js';
import { S3ObjectStore } from '../dataset/s3-store.js';
import { PROJECT_TESTDATA, SHARED_FIXTURES } from './helpers/fixtures.js';

const ATIF = join(PROJECT_TESTDATA, 'samples', 'atif');
const CLAUDE = join(PROJECT_TESTDATA, 'samples', 'agentb-code');
const COMPACT = join(SHARED_FIXTURES, 'synthetic', 'compact-jsonl', 'valid');
const home = scratchDir('s3-datasets');
let server: S3TestServer;
let gate: S3Gate;

/** The environment of a command: its own home and cache, the server reached through `endpoint`. */
function envOf(endpoint: string, cache = join(home, 'cache')): NodeJS.ProcessEnv {
  return {
    HOME: home,
    XDG_CONFIG_HOME: join(home, 'config'),
    XDG_DATA_HOME: join(home, 'data'),
    XDG_CACHE_HOME: cache,
    AWS_ENDPOINT_URL_S3: endpoint,
    AWS_ACCESS_KEY_ID: TEST_ACCESS_KEY,
    AWS_SECRET_ACCESS_KEY: TEST_SECRET_KEY,
    AWS_REGION: 'us-west-2',
  };
}
const trajstore = (args: string[], env: NodeJS.ProcessEnv = envOf(server.endpoint)) => runTool('trajstore', args, { env, cwd: home });

async function queryJson(args: string[], sql: string, env?: NodeJS.ProcessEnv): Promise<Array<Record<string, unknown>>> {
  const r = await trajstore(['query', ...args, '--sql', sql, '--format', 'json'], env);
  assert.is(r.code, 0, r.stderr);
  return JSON.parse(r.stdout) as Array<Record<string, unknown>>;
}

const TOTALS = 'SELECT count(*) AS runs, sum(prompt_tokens) AS prompt, sum(completion_tokens) AS completion FROM dataset.runs';

test.before(async () => {
  server = await S3TestServer.start();
  await server.createBucket('lake');
  gate = await S3Gate.open(server);
});

test.after(async () => {
  await gate?.close();
  await server?.stop();
});

test('import create and append, then list, stats, find, query and export read the object-store dataset as they read the same local one', async () => {
  for (const [mode, from] of [['create', ATIF], ['append', CLAUDE]] as const) {
    const remote = await trajstore(['import', '-f', from, '-t', 's3://lake/both', '--mode', mode]);
    assert.is(remote.code, 0, remote.stderr);
    assert.match(remote.stdout, /into s3:\/\/lake\/both/);
    const local = await trajstore(['import', '-f', from, '-t', join(home, 'both-local'), '--mode', mode]);
    assert.is(local.code, 0, local.stderr);
  }
  assert.equal(await queryJson(['s3://lake/both'], TOTALS), await queryJson([join(home, 'both-local')], TOTALS));
  const list = await trajstore(['list', 's3://lake/both', '--format', 'json']);
  const localList = await trajstore(['list', join(home, 'both-local'), '--format', 'json']);
  assert.is(list.code, 0, list.stderr);
  assert.equal(JSON.parse(list.stdout), JSON.parse(localList.stdout));
  const stats = await trajstore(['stats', 's3://lake/both', '--format', 'json']);
  assert.is(stats.code, 0, stats.stderr);
  assert.is((JSON.parse(stats.stdout) as { dataset_uri: string }).dataset_uri, 's3://lake/both');
  const find = await trajstore(['find', 's3://lake/both', '--match', 'release', '--format', 'json']);
  const localFind = await trajstore(['find', join(home, 'both-local'), '--match', 'release', '--format', 'json']);
  assert.is(find.code, 0, find.stderr);
  // The same matches; only where they were found differs.
  const hits = (text: string): unknown => {
    const { dataset_uri: _uri, snapshot_id: _id, ...rest } = JSON.parse(text) as Record<string, unknown>;
    return rest;
  };
  assert.equal(hits(find.stdout), hits(localFind.stdout));
  // A mount of each kind in one statement.
  const mixed = await queryJson(['--mount', `l=${join(home, 'both-local')}`, '--mount', 'r=s3://lake/both'], 'SELECT (SELECT count(*) FROM l.steps) AS local_steps, (SELECT count(*) FROM r.steps) AS remote_steps');
  assert.ok((mixed[0]?.local_steps as number) > 0);
  assert.is(mixed[0]?.local_steps, mixed[0]?.remote_steps);
  for (const [from, to] of [['s3://lake/both', 'exported-remote'], [join(home, 'both-local'), 'exported-local']]) {
    const exported = await trajstore(['export', '-f', from!, '-t', join(home, to!), '-o', 'atif']);
    assert.is(exported.code, 0, exported.stderr);
  }
  assert.ok(readFileSync(join(home, 'exported-remote')).equals(readFileSync(join(home, 'exported-local'))), 'the same export');
  const toStore = await trajstore(['export', '-f', 's3://lake/both', '-t', 's3://lake/both/exported.jsonl', '-o', 'atif']);
  assert.is(toStore.code, 2, toStore.stderr);
  assert.match(toStore.stderr, 'inside the dataset being exported');
  assert.not.ok(existsSync(join(home, 's3:')), 'no local directory named after the uri');
});

test('export to the object store: one object or one per document, create-only unless --overwrite, an existing object untouched', async () => {
  const local = join(home, 'export-source');
  assert.is((await trajstore(['import', '-f', CLAUDE, '-t', local])).code, 0);
  const store = new S3ObjectStore({ uri: 's3://lake/exports', bucket: 'lake', prefix: 'exports', endpoint: server.endpoint, region: 'us-west-2' }, envOf(server.endpoint));
  try {
    const first = await trajstore(['export', '-f', local, '-t', 's3://lake/exports/run.jsonl', '-o', 'atif']);
    assert.is(first.code, 0, first.stderr);
    const expected = await trajstore(['export', '-f', local, '-t', '-', '-o', 'atif']);
    assert.is((await store.get('run.jsonl'))?.toString('utf8'), expected.stdout);
    // Create-only: an existing object is refused (exit 4) and left as it is; --overwrite replaces it.
    await store.put('taken.jsonl', 'mine\n');
    const taken = await trajstore(['export', '-f', local, '-t', 's3://lake/exports/taken.jsonl', '-o', 'storyline']);
    assert.is(taken.code, 4, taken.stderr);
    assert.match(taken.stderr, '-t s3://lake/exports/taken.jsonl: already exists');
    assert.is((await store.get('taken.jsonl'))?.toString('utf8'), 'mine\n');
    const replaced = await trajstore(['export', '-f', local, '-t', 's3://lake/exports/taken.jsonl', '-o', 'storyline', '--overwrite']);
    assert.is(replaced.code, 0, replaced.stderr);
    assert.match((await store.get('taken.jsonl'))?.toString('utf8') ?? '', /^\{"schema_version":"storyline\/v1"/);
    // A prefix ending in /: one object per document, as a local directory gets one file per document.
    const dir = await trajstore(['export', '-f', local, '-t', 's3://lake/exports/docs/', '-o', 'storyline']);
    assert.is(dir.code, 0, dir.stderr);
    const localDir = await trajstore(['export', '-f', local, '-t', join(home, 'export-docs/'), '-o', 'storyline']);
    assert.is(localDir.code, 0, localDir.stderr);
    const names = readdirSync(join(home, 'export-docs')).sort();
    assert.equal(await store.list('docs/'), names.map((n) => `docs/${n}`));
    for (const name of names) assert.ok((await store.get(`docs/${name}`))?.equals(readFileSync(join(home, 'export-docs', name))), name);
    // Again: refused before anything is uploaded, every object as it was.
    await store.put(`docs/${names[0]}`, 'changed');
    const again = await trajstore(['export', '-f', local, '-t', 's3://lake/exports/docs/', '-o', 'storyline']);
    assert.is(again.code, 4, again.stderr);
    assert.is((await store.get(`docs/${names[0]}`))?.toString('utf8'), 'changed');
    // A compact record store's files, byte for byte, at their relative paths.
    const records = join(home, 'export-records');
    assert.is((await trajstore(['import', '-f', COMPACT, '-t', records, '-o', 'compact-jsonl'])).code, 0);
    const compact = await trajstore(['export', '-f', records, '-t', 's3://lake/exports/records/', '-o', 'compact-jsonl']);
    assert.is(compact.code, 0, compact.stderr);
    const files: string[] = [];
    walkFiles(COMPACT, (relPath) => files.push(relPath));
    assert.equal(await store.list('records/'), files.sort().map((f) => `records/${f}`));
    for (const file of files) assert.ok((await store.get(`records/${file}`))?.equals(readFileSync(join(COMPACT, file))), file);
    const bucketOnly = await trajstore(['export', '-f', local, '-t', 's3://lake', '-o', 'atif']);
    assert.is(bucketOnly.code, 2, bucketOnly.stderr);
  } finally {
    store.close();
  }
});

test('an export with --overwrite that fails part-way through its upload deletes the objects it added, never one it wrote over (what that held is gone already)', async () => {
  // Records files a (its object there already), b (new) and c, whose object the server refuses.
  const source = join(home, 'refused-source');
  mkdirSync(source, { recursive: true });
  for (const name of ['a', 'b', 'c']) writeFileSync(join(source, `${name}.jsonl`), `{"${name}":1}\n`);
  const records = join(home, 'refused-records');
  const imported = await trajstore(['import', '-f', source, '-t', records, '-i', 'compact-jsonl']);
  assert.is(imported.code, 0, imported.stderr);
  const store = new S3ObjectStore({ uri: 's3://lake/refused', bucket: 'lake', prefix: 'refused', endpoint: server.endpoint, region: 'us-west-2' }, envOf(server.endpoint));
  try {
    await store.put('a.jsonl', 'mine\n');
    gate.refusePutsTo('/refused/c.jsonl');
    const failed = await trajstore(['export', '-f', records, '-t', 's3://lake/refused/', '-o', 'compact-jsonl', '--overwrite'], envOf(gate.endpoint));
    assert.ok(failed.code !== 0, failed.stderr);
    assert.ok(gate.requests.includes('PUT /lake/refused/c.jsonl'), gate.requests.join(' '));
    assert.is((await store.get('a.jsonl'))?.toString('utf8'), '{"a":1}\n', 'the object written over keeps what the export wrote');
    assert.equal(await store.list(''), ['a.jsonl'], 'the objects the export added are gone');
  } finally {
    gate.refusePutsTo(undefined);
    store.close();
  }
});

test("an export to the object store killed (SIGKILL) while it stages: the next one removes its staging from the cache, never a live export's", async () => {
  const env = envOf(server.endpoint, join(home, 'export-cache'));
  const tmp = join(home, 'export-cache', 'trajstore', 'exports');
  // Big enough that staging it takes seconds.
  const storylines = join(SHARED_FIXTURES, 'synthetic', 'storyline');
  const base = JSON.parse(readFileSync(join(storylines, readdirSync(storylines).sort()[0] as string), 'utf8'));
  writeFileSync(join(home, 'export-big.jsonl'), Array.from({ length: 20_000 }, (_, i) => `${JSON.stringify({ ...base, trajectory: `big-${i}` })}\n`).join(''));
  const big = join(home, 'export-big');
  assert.is((await trajstore(['import', '-f', join(home, 'export-big.jsonl'), '-t', big], env)).code, 0);
  const stagedFiles = (): number => {
    let n = 0;
    walkFiles(tmp, () => (n += 1));
    return n;
  };
  const startExport = async (target: string, ready: () => boolean) => {
    const child = spawn(process.execPath, [toolScript('trajstore'), 'export', '-f', big, '-t', target, '-o', 'storyline'], { env: { ...process.env, ...env }, cwd: home, stdio: 'ignore' });
    const started = Date.now();
    while (!ready()) {
      assert.ok(Date.now() - started < 60_000 && child.exitCode === null, `the export to ${target} never staged anything`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    return child;
  };
  const kill = async (child: ReturnType<typeof spawn>): Promise<void> => {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
  };
  await kill(await startExport('s3://lake/killed-export/', () => stagedFiles() >= 100));
  const left = readdirSync(tmp);
  assert.is(left.length, 1, 'the killed export left its staging');
  const live = await startExport('s3://lake/live-export/', () => readdirSync(tmp).some((n) => !left.includes(n)));
  live.kill('SIGSTOP');
  try {
    const staged = readdirSync(tmp).filter((n) => !left.includes(n));
    const next = await trajstore(['export', '-f', join(home, 'export-source'), '-t', 's3://lake/next-export/', '-o', 'storyline'], env);
    assert.is(next.code, 0, next.stderr);
    assert.equal(readdirSync(tmp), staged, "the killed export's staging went, the live one's stayed");
  } finally {
    await kill(live);
  }
});

test('reads fetch only the parts the cache lacks: after an append, a reader downloads the new parts alone', async () => {
  const cache = join(home, 'cache-fetch');
  const env = envOf(gate.endpoint, cache);
  assert.is((await trajstore(['import', '-f', ATIF, '-t', 's3://lake/fetch'], env)).code, 0);
  // A reader with an empty cache: everything comes down once.
  const reader = envOf(gate.endpoint, join(home, 'cache-reader'));
  assert.is((await trajstore(['list', 's3://lake/fetch'], reader)).code, 0);
  const pool = join(home, 'cache-reader', 'trajstore', 's3', 'parts');
  const inodes = (): Map<string, number> => {
    const found = new Map<string, number>();
    walkFiles(pool, (_rel, _entry, path) => found.set(path, statSync(path).ino));
    return found;
  };
  const before = inodes();
  assert.ok(before.size > 0);
  gate.requests.length = 0;
  assert.is((await trajstore(['import', '-f', CLAUDE, '-t', 's3://lake/fetch', '--mode', 'append'], env)).code, 0);
  assert.is(gate.requests.filter((r) => r === 'GET /lake/fetch/trajstore.json').length, 1, 'an append reads the manifest it commits against once');
  assert.is((await trajstore(['list', 's3://lake/fetch'], reader)).code, 0);
  const after = inodes();
  assert.ok(after.size > before.size, 'the appended parts were fetched');
  for (const [path, ino] of before) assert.is(after.get(path), ino, `${path} was not fetched again`);
  // Two snapshot copies, each a whole local dataset.
  const copies = readdirSync(join(home, 'cache-reader', 'trajstore', 's3', 'snapshots')).filter((n) => !n.startsWith('.'));
  assert.is(copies.length, 2);
  // A read of a snapshot the cache holds asks the store for the manifest alone.
  gate.requests.length = 0;
  assert.is((await trajstore(['list', 's3://lake/fetch'], reader)).code, 0);
  assert.equal(gate.requests, ['GET /lake/fetch/trajstore.json']);
});

test('create over an existing object-store dataset exits 4; replace of one is refused (exit 2); compact-jsonl refuses object stores', async () => {
  assert.is((await trajstore(['import', '-f', ATIF, '-t', 's3://lake/exists'])).code, 0);
  const again = await trajstore(['import', '-f', ATIF, '-t', 's3://lake/exists']);
  assert.is(again.code, 4, again.stderr);
  const replace = await trajstore(['import', '-f', ATIF, '-t', 's3://lake/exists', '--mode', 'replace', '--yes']);
  assert.is(replace.code, 2, replace.stderr);
  assert.match(replace.stderr, /cannot be replaced in place/);
  const compact = await trajstore(['import', '-f', ATIF, '-t', 's3://lake/compact', '-i', 'compact-jsonl']);
  assert.is(compact.code, 2, compact.stderr);
  const appendNothing = await trajstore(['import', '-f', ATIF, '-t', 's3://lake/nothing-here', '--mode', 'append']);
  assert.is(appendNothing.code, 3, appendNothing.stderr);
});

test('two appenders that read the same manifest: exactly one commits per round, the other exits 4, and no run is lost or doubled', async () => {
  const env = envOf(gate.endpoint, join(home, 'cache-race'));
  assert.is((await trajstore(['import', '-f', ATIF, '-t', 's3://lake/race'], env)).code, 0);
  const runsPerImport = (await queryJson(['s3://lake/race'], TOTALS, env))[0]?.runs as number;
  let expected = runsPerImport;
  for (let round = 0; round < 3; round++) {
    gate.holdManifestPuts(2);
    // Each writer its own cache, as on two machines.
    const results = await Promise.all(
      ['a', 'b'].map((who) => trajstore(['import', '-f', ATIF, '-t', 's3://lake/race', '--mode', 'append', '--on-duplicate', 'suffix'], envOf(gate.endpoint, join(home, `cache-race-${who}`)))),
    );
    const codes = results.map((r) => r.code).sort();
    assert.equal(codes, [0, 4], results.map((r) => r.stderr).join('\n'));
    assert.match(results.find((r) => r.code === 4)!.stderr, /another writer committed/);
    expected += runsPerImport;
    const totals = await queryJson(['s3://lake/race'], TOTALS, envOf(gate.endpoint, join(home, `cache-race-check-${round}`)));
    assert.is(totals[0]?.runs, expected, `round ${round}`);
  }
  gate.holdManifestPuts(0);
  // Every part the final snapshot lists is on the server (no torn snapshot); the losers left parts
  // that no snapshot lists, and nothing else.
  const store = new S3ObjectStore({ uri: 's3://lake/race', bucket: 'lake', prefix: 'race', endpoint: server.endpoint, region: 'us-west-2' }, envOf(server.endpoint));
  try {
    const manifest = JSON.parse((await store.get('trajstore.json'))!.toString('utf8')) as { snapshot_id: string };
    const snapshot = JSON.parse((await store.get(`snapshots/${manifest.snapshot_id}.json`))!.toString('utf8')) as Snapshot;
    const listed = await store.list('parts/');
    const referenced = partKeysOf(snapshot);
    for (const key of referenced) assert.ok(listed.includes(key), `${key} is on the server`);
    const unreferenced = listed.filter((key) => !referenced.includes(key));
    assert.ok(unreferenced.length >= 3, `the three losers' parts are left unreferenced (${unreferenced.length})`);
    assert.is(snapshot.rows.runs, expected);
  } finally {
    store.close();
  }
});

test('the endpoint going away in the middle of an import: exit 6, the old snapshot stays readable, a retry succeeds', async () => {
  const env = envOf(gate.endpoint, join(home, 'cache-down'));
  assert.is((await trajstore(['import', '-f', ATIF, '-t', 's3://lake/down'], env)).code, 0);
  const before = await queryJson(['s3://lake/down'], TOTALS, env);
  // Past the first part's bytes, while the append uploads.
  gate.goDownAfterUploadBytes(2_000);
  const cut = await trajstore(['import', '-f', CLAUDE, '-t', 's3://lake/down', '--mode', 'append'], env);
  assert.is(cut.code, 6, cut.stderr);
  assert.match(cut.stderr, /unreachable/);
  assert.equal(readdirSync(join(home, 'cache-down', 'trajstore', 's3', 'builds')), [], 'the failed import removed its local build');
  await gate.comeBack();
  // A reader with nothing cached reads the old snapshot from the server.
  assert.equal(await queryJson(['s3://lake/down'], TOTALS, envOf(gate.endpoint, join(home, 'cache-down-reader'))), before);
  const retry = await trajstore(['import', '-f', CLAUDE, '-t', 's3://lake/down', '--mode', 'append'], env);
  assert.is(retry.code, 0, retry.stderr);
  const after = await queryJson(['s3://lake/down'], TOTALS, envOf(gate.endpoint, join(home, 'cache-down-reader-2')));
  assert.ok((after[0]?.runs as number) > (before[0]?.runs as number));
});

test('Ctrl-C in the middle of an upload stops it (exit 130): the dataset is as it was, and the local build is gone', async () => {
  const env = envOf(gate.endpoint, join(home, 'cache-interrupt'));
  assert.is((await trajstore(['import', '-f', ATIF, '-t', 's3://lake/interrupt'], env)).code, 0);
  const before = await queryJson(['s3://lake/interrupt'], TOTALS, env);
  gate.holdPartPuts(true);
  const child = spawn(process.execPath, [toolScript('trajstore'), 'import', '-f', CLAUDE, '-t', 's3://lake/interrupt', '--mode', 'append'], { env: { ...process.env, ...env }, cwd: home, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  // Once the local build is done and its upload hangs.
  const builds = join(home, 'cache-interrupt', 'trajstore', 's3', 'builds');
  const started = Date.now();
  while (!(existsSync(builds) && readdirSync(builds).some((b) => existsSync(join(builds, b, 'dataset', 'snapshots')) && readdirSync(join(builds, b, 'dataset', 'snapshots')).length > 1))) {
    assert.ok(Date.now() - started < 60_000, `the import never reached its upload: ${stderr}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await new Promise((resolve) => setTimeout(resolve, 300));
  child.kill('SIGINT');
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  gate.holdPartPuts(false);
  assert.is(code, 130, stderr);
  assert.equal(readdirSync(builds), []);
  assert.equal(await queryJson(['s3://lake/interrupt'], TOTALS, envOf(gate.endpoint, join(home, 'cache-interrupt-reader'))), before);
});

test("a writer killed (SIGKILL) in the middle of its upload: the next command with that cache removes its build, and never a live writer's", async () => {
  const cache = join(home, 'cache-killed');
  const env = envOf(gate.endpoint, cache);
  assert.is((await trajstore(['import', '-f', ATIF, '-t', 's3://lake/killed'], env)).code, 0);
  const before = await queryJson(['s3://lake/killed'], TOTALS, env);
  const builds = join(cache, 'trajstore', 's3', 'builds');
  gate.holdPartPuts(true);
  const child = spawn(process.execPath, [toolScript('trajstore'), 'import', '-f', CLAUDE, '-t', 's3://lake/killed', '--mode', 'append'], { env: { ...process.env, ...env }, cwd: home, stdio: 'ignore' });
  const started = Date.now();
  while (!(existsSync(builds) && readdirSync(builds).some((b) => existsSync(join(builds, b, 'dataset', 'snapshots')) && readdirSync(join(builds, b, 'dataset', 'snapshots')).length > 1))) {
    assert.ok(Date.now() - started < 60_000, 'the import never reached its upload');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  child.kill('SIGKILL');
  await new Promise((resolve) => child.once('exit', resolve));
  gate.holdPartPuts(false);
  assert.is(readdirSync(builds).length, 1, 'the killed writer left its build');
  // Any command with that cache, a reader too, removes it: nothing else ever would.
  assert.equal(await queryJson(['s3://lake/killed'], TOTALS, env), before);
  assert.equal(readdirSync(builds), [], "the killed writer's build is gone");
  // A live writer's build stays while a reader of the same cache runs: its manifest put is held meanwhile.
  const manifestPuts = (): number => gate.requests.filter((line) => line === 'PUT /lake/killed/trajstore.json').length;
  const puts = manifestPuts();
  gate.holdManifestPuts(2);
  const appending = trajstore(['import', '-f', CLAUDE, '-t', 's3://lake/killed', '--mode', 'append'], env);
  while (manifestPuts() === puts) await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(await queryJson(['s3://lake/killed'], TOTALS, env), before);
  assert.is(readdirSync(builds).length, 1, "the live writer's build stays");
  // Another dataset's commit through the gate lets the held put go.
  assert.is((await trajstore(['import', '-f', ATIF, '-t', 's3://lake/killed-release'], env)).code, 0);
  const append = await appending;
  assert.is(append.code, 0, append.stderr);
  assert.not.match(append.stderr, /warn/, append.stderr);
  assert.equal(readdirSync(builds), []);
});

test('serve of an s3:// dataset serves what another machine commits from the next request on: an append, a drop (404, never the old runs), a dataset made again', async () => {
  const uri = 's3://lake/served';
  const writer = envOf(server.endpoint, join(home, 'cache-served-writer'));
  assert.is((await trajstore(['import', '-f', ATIF, '-t', uri], writer)).code, 0);
  const served = await startServeProcess(['serve', uri, '--listen', '127.0.0.1:0'], { env: envOf(server.endpoint, join(home, 'cache-served')), cwd: home });
  try {
    const runs = async (): Promise<{ status: number; sources: string[] }> => {
      const answer = await fetch(`${served.url}api/mounts/default/runs`);
      const body = (await answer.json()) as { runs?: Array<{ source_path: string }> };
      return { status: answer.status, sources: [...new Set((body.runs ?? []).map((run) => run.source_path))].sort() };
    };
    const atif = await runs();
    assert.is(atif.status, 200);
    assert.ok(atif.sources.length > 0);
    assert.is((await trajstore(['import', '-f', CLAUDE, '-t', uri, '--mode', 'append'], writer)).code, 0);
    const appended = await runs();
    assert.is(appended.status, 200);
    assert.ok(appended.sources.length > atif.sources.length, `the append is served: ${JSON.stringify(appended)}`);
    assert.is((await trajstore(['drop', uri, '--yes'], writer)).code, 0);
    assert.is((await runs()).status, 404, 'a dropped dataset is not found, never its old runs');
    assert.is((await trajstore(['import', '-f', CLAUDE, '-t', uri], writer)).code, 0);
    const again = await runs();
    assert.is(again.status, 200);
    assert.equal(again.sources, appended.sources.filter((source) => !atif.sources.includes(source)), 'the new dataset alone is served');
  } finally {
    await served.stop();
  }
});

test('exit codes: unreachable endpoint 6, missing bucket 3, missing dataset 3, malformed uri 2, drop of a whole bucket 2', async () => {
  const unreachable = await trajstore(['list', 's3://lake/both'], envOf('http://127.0.0.1:9'));
  assert.is(unreachable.code, 6, unreachable.stderr);
  const noBucket = await trajstore(['stats', 's3://no-such-bucket/x']);
  assert.is(noBucket.code, 3, noBucket.stderr);
  const noDataset = await trajstore(['find', 's3://lake/absent', '--match', 'x']);
  assert.is(noDataset.code, 3, noDataset.stderr);
  for (const bad of ['s3://Not_A_Bucket/x', 's3://lake/a//b', 's3://lake/../x']) {
    const r = await trajstore(['list', bad]);
    assert.is(r.code, 2, `${bad}: ${r.stderr}`);
  }
  const bucket = await trajstore(['drop', 's3://lake', '--yes']);
  assert.is(bucket.code, 2, bucket.stderr);
  assert.match(bucket.stderr, /whole bucket/);
});

test('drop removes every object of the dataset; the prefix is then no dataset', async () => {
  assert.is((await trajstore(['import', '-f', ATIF, '-t', 's3://lake/dropme'])).code, 0);
  const dropped = await trajstore(['drop', 's3://lake/dropme', '--yes']);
  assert.is(dropped.code, 0, dropped.stderr);
  assert.is((await trajstore(['list', 's3://lake/dropme'])).code, 3);
  assert.is((await trajstore(['drop', 's3://lake/dropme', '--yes'])).code, 3);
  assert.is((await trajstore(['import', '-f', ATIF, '-t', 's3://lake/dropme'])).code, 0, 'the prefix can be created again');
});

test('a drop cut short after its commit point: its leftovers stay while an import could be writing them, then a drop removes them', async () => {
  const place = (prefix: string) => new S3ObjectStore({ uri: `s3://lake/${prefix}`, bucket: 'lake', prefix, endpoint: server.endpoint, region: 'us-west-2' }, envOf(server.endpoint));
  // Fresh: a drop killed right after deleting the manifest, or an import creating the dataset.
  assert.is((await trajstore(['import', '-f', ATIF, '-t', 's3://lake/cut-drop'])).code, 0);
  const fresh = place('cut-drop');
  try {
    await fresh.delete('trajstore.json');
    const refused = await trajstore(['drop', 's3://lake/cut-drop', '--yes']);
    assert.is(refused.code, 4, refused.stderr);
    assert.match(refused.stderr, /s3:\/\/lake\/cut-drop: holds \d+ objects of a dataset but no trajstore.json, the newest written at .*: an import may be creating a dataset there/);
    assert.ok((await fresh.list('')).length > 0, 'nothing was removed');
  } finally {
    fresh.close();
  }
  // Older than the reclamation grace: a drop's leftovers, which the next drop finishes.
  const old = place('cut-drop-old');
  const hoursAgo = Date.now() - 2 * 3600_000;
  try {
    await old.put(`parts/steps/${hoursAgo.toString(36)}-0123abcd-000001.parquet`, 'left over');
    await old.put('snapshots/0123456789abcdef0123.json', JSON.stringify({ id: '0123456789abcdef0123', kind: 'storyline', layout_version: 1, parent: null, created_at: new Date(hoursAgo).toISOString(), relations: {}, rows: {} }));
    const dropped = await trajstore(['drop', 's3://lake/cut-drop-old', '--yes']);
    assert.is(dropped.code, 0, dropped.stderr);
    assert.equal(await old.list(''), []);
  } finally {
    old.close();
  }
  // Anything else under a prefix without a manifest is still no dataset to drop.
  const stranger = place('cut-drop-stranger');
  try {
    await stranger.put('notes.txt', 'mine');
    const refused = await trajstore(['drop', 's3://lake/cut-drop-stranger', '--yes']);
    assert.is(refused.code, 2, refused.stderr);
    assert.match(refused.stderr, /is not a trajstore dataset \(no trajstore.json\)/);
  } finally {
    stranger.close();
  }
});

for (const cutShort of [false, true]) {
  test(`a dataset dropped while an append uploads${cutShort ? ' (the drop cut short after its commit: its marker left)' : ''}: the append exits 3 saying so, commits nothing and leaves nothing behind${cutShort ? '; a second drop finishes the first' : ', so a second drop finds no dataset'}`, async () => {
    const prefix = `drop-race${cutShort ? '-cut' : ''}`;
    const env = envOf(gate.endpoint, join(home, `cache-${prefix}`));
    assert.is((await trajstore(['import', '-f', ATIF, '-t', `s3://lake/${prefix}`], env)).code, 0);
    // The append's manifest put is held until a second one arrives: the drop runs meanwhile.
    const manifestPuts = (): number => gate.requests.filter((line) => line === `PUT /lake/${prefix}/trajstore.json`).length;
    const created = manifestPuts();
    gate.holdManifestPuts(2);
    const appending = trajstore(['import', '-f', CLAUDE, '-t', `s3://lake/${prefix}`, '--mode', 'append'], env);
    while (manifestPuts() === created) await new Promise((resolve) => setTimeout(resolve, 20));
    const dropped = await trajstore(['drop', `s3://lake/${prefix}`, '--yes'], envOf(server.endpoint, join(home, `cache-${prefix}-dropper`)));
    assert.is(dropped.code, 0, dropped.stderr);
    const store = new S3ObjectStore({ uri: `s3://lake/${prefix}`, bucket: 'lake', prefix, endpoint: server.endpoint, region: 'us-west-2' }, envOf(server.endpoint));
    try {
      // A drop killed before it removed its marker (the last thing it deletes).
      if (cutShort) await store.put(MANIFEST_KEY, dropMarker());
      // Another dataset's commit through the gate lets the held put go.
      assert.is((await trajstore(['import', '-f', ATIF, '-t', `s3://lake/${prefix}-release`], env)).code, 0);
      const append = await appending;
      assert.is(append.code, 3, append.stderr);
      assert.match(append.stderr, `s3://lake/${prefix}: the dataset was dropped while this import ran; nothing was committed`);
      assert.equal(await store.list(''), cutShort ? [MANIFEST_KEY] : [], 'nothing of the append is left under the prefix');
      if (cutShort) {
        const read = await trajstore(['list', `s3://lake/${prefix}`]);
        assert.is(read.code, 3, read.stderr);
        assert.match(read.stderr, `s3://lake/${prefix}: is being dropped (a drop committed there and has not finished)`);
        const create = await trajstore(['import', '-f', ATIF, '-t', `s3://lake/${prefix}`]);
        assert.is(create.code, 4, create.stderr);
        assert.match(create.stderr, `hint: run trajstore drop s3://lake/${prefix} --yes to finish it`);
        const later = await trajstore(['import', '-f', ATIF, '-t', `s3://lake/${prefix}`, '--mode', 'append']);
        assert.is(later.code, 3, later.stderr);
        assert.match(later.stderr, `s3://lake/${prefix}: is being dropped`);
        assert.is((await trajstore(['drop', `s3://lake/${prefix}`, '--yes'])).code, 0);
        assert.equal(await store.list(''), []);
      }
    } finally {
      store.close();
    }
    assert.is((await trajstore(['drop', `s3://lake/${prefix}`, '--yes'])).code, 3);
  });
}

for (const [server_, honours] of [['a server that honours If-Match on DELETE', true], ['a server that ignores If-Match on DELETE (MinIO)', false]] as const) {
  test(`an append that commits while a drop is between reading the manifest and committing, on ${server_}: the drop exits 4 and deletes nothing, the append's runs all stay; a drop run again removes the dataset`, async () => {
    const prefix = `s3://lake/drop-append-${honours ? 'honoured' : 'ignored'}`;
    assert.is((await trajstore(['import', '-f', ATIF, '-t', prefix])).code, 0);
    const before = (await queryJson([prefix], TOTALS))[0]?.runs as number;
    gate.honourDeleteConditions(honours);
    try {
      const held = gate.holdManifestWrite();
      const dropping = trajstore(['drop', prefix, '--yes'], envOf(gate.endpoint, join(home, `cache-drop-append-dropper-${honours}`)));
      await held.arrived;
      const append = await trajstore(['import', '-f', CLAUDE, '-t', prefix, '--mode', 'append']);
      assert.is(append.code, 0, append.stderr);
      held.release();
      const dropped = await dropping;
      assert.is(dropped.code, 4, dropped.stderr);
      assert.match(dropped.stderr, `${prefix}: another writer committed to the dataset after drop read it; nothing was dropped`);
      const after = (await queryJson([prefix], TOTALS, envOf(server.endpoint, join(home, `cache-drop-append-reader-${honours}`))))[0]?.runs as number;
      assert.ok(after > before, `the append's runs are there (${before} before it, ${after} after)`);
      const again = await trajstore(['drop', prefix, '--yes'], envOf(gate.endpoint));
      assert.is(again.code, 0, again.stderr);
      assert.is((await trajstore(['list', prefix])).code, 3);
    } finally {
      gate.honourDeleteConditions(true);
    }
  });
}

test('a local cache that cannot be written: the error names the s3:// object or dataset the user gave and says it is the local cache, never a path of the cache (exit 2); after a commit it is a warning', async () => {
  assert.is((await trajstore(['import', '-f', ATIF, '-t', 's3://lake/cacheless'])).code, 0);
  // Permissions bind other users only: as root the commands run as nobody, who owns all but the locked directories.
  const root = process.getuid?.() === 0;
  /**
   * Runs `args` with a cache of its own, in which `prepare` (given the cache's trajstore/s3 directory)
   * makes the directories it returns, to be locked; returns the line of stderr that has `said` (exit
   * `code`), checked to name no path of the cache (but its root, in a hint), and says where the cache is.
   */
  const run = async (args: string[], prepare: (s3: string) => string[], said = 'error:', code = 2): Promise<string> => {
    const own = scratchDir('s3-datasets-cacheless');
    const cache = join(own, 'cache');
    const s3 = join(cache, 'trajstore', 's3');
    mkdirSync(s3, { recursive: true });
    const locked = prepare(s3);
    if (root) {
      assert.is(spawnSync('chown', ['-R', '65534:65534', own]).status, 0);
      for (const dir of locked) chownSync(dir, 0, 0);
    } else for (const dir of locked) chmodSync(dir, 0o555);
    const r = await runTool('trajstore', args, { env: { ...envOf(server.endpoint, cache), HOME: own, XDG_CONFIG_HOME: join(own, 'config'), XDG_DATA_HOME: join(own, 'data') }, cwd: own, ...(root ? { uid: 65534, gid: 65534 } : {}) });
    assert.is(r.code, code, r.stderr);
    const line = r.stderr.split('\n').find((text) => text.includes(said)) ?? '';
    assert.not.ok(line.replaceAll(`(the local cache is ${s3} `, '').includes(own), `the message names no path of the cache but its root, in the hint: ${line}`);
    assert.ok(r.stderr.includes(s3), `the hint says where the cache is: ${r.stderr}`);
    return line;
  };
  const made = (dir: string): string => (mkdirSync(dir, { recursive: true }), dir);
  // A part that cannot be downloaded into the cache (its directory cannot be made, or its temporary file): named by its object.
  assert.match(await run(['list', 's3://lake/cacheless'], (s3) => [made(join(s3, 'parts'))]), /s3:\/\/lake\/cacheless\/parts\/\w+\/\S+\.parquet: its copy in the local cache: permission denied/);
  const relationDirs = (s3: string): string[] => {
    // The pool of a cache that held the dataset, emptied: the downloads go into directories that exist.
    const listed = spawnSync(process.execPath, [toolScript('trajstore'), 'list', 's3://lake/cacheless'], { env: { ...process.env, ...envOf(server.endpoint, join(s3, '..', '..')) } });
    assert.is(listed.status, 0, String(listed.stderr));
    rmSync(join(s3, 'snapshots'), { recursive: true });
    const dirs = new Set<string>();
    walkFiles(join(s3, 'parts'), (_rel, _entry, full) => {
      rmSync(full);
      dirs.add(dirname(full));
    });
    return [...dirs];
  };
  assert.match(await run(['list', 's3://lake/cacheless'], relationDirs), /s3:\/\/lake\/cacheless\/parts\/\w+\/\S+\.parquet: its copy in the local cache: permission denied/);
  // The snapshot's copy that cannot be made: named by the dataset.
  assert.match(await run(['list', 's3://lake/cacheless'], (s3) => [made(join(s3, 'snapshots'))]), /s3:\/\/lake\/cacheless: its copy in the local cache: permission denied/);
  // An import whose build cannot be made: named by its target.
  assert.match(await run(['import', '-f', ATIF, '-t', 's3://lake/cacheless-import'], (s3) => [made(join(s3, 'builds'))]), /s3:\/\/lake\/cacheless-import: its build in the local cache: permission denied/);
  // An import whose commit is made, and whose copy of the new snapshot cannot be kept: it succeeds, and says so.
  const kept = await run(['import', '-f', ATIF, '-t', 's3://lake/cacheless-import'], (s3) => [made(join(s3, 'snapshots'))], 'warn:', 0);
  assert.match(kept, /s3:\/\/lake\/cacheless-import: committed snapshot \w+; keeping its copy in the local cache failed: permission denied/);
  assert.match((await trajstore(['list', 's3://lake/cacheless-import', '--format', 'csv'], envOf(server.endpoint, join(home, 'cache-cacheless-reader')))).stdout, /release-notes\.atif\.json/);
});

test('a pin with endpoint and keys: the keys reach the server, and no output, log line or cached file shows the secret', async () => {
  const bare = { HOME: home, XDG_CONFIG_HOME: join(home, 'config-pin'), XDG_CACHE_HOME: join(home, 'cache-pin') };
  const keys = { TRAJSTORE_ACCESS_KEY: TEST_ACCESS_KEY, TRAJSTORE_SECRET_KEY: TEST_SECRET_KEY };
  const outputs: string[] = [];
  const run = async (args: string[], extra: NodeJS.ProcessEnv = {}) => {
    const r = await runTool('trajstore', ['--log-level', 'debug', ...args], { env: { ...bare, ...extra }, cwd: home });
    outputs.push(r.stdout, r.stderr);
    return r;
  };
  // The keys from the environment variables `dataset pin` reads: never on a command line.
  const pinned = await run(['dataset', 'pin', 'lake', 's3://lake/pinned', '--endpoint', server.endpoint], keys);
  assert.is(pinned.code, 0, pinned.stderr);
  const imported = await run(['import', '-f', ATIF, '-t', '@lake']);
  assert.is(imported.code, 0, imported.stderr);
  for (const args of [['list', '@lake'], ['stats', '@lake'], ['query', '@lake', '--sql', 'SELECT count(*) FROM dataset.runs'], ['dataset', 'list'], ['dataset', 'show', 'lake']]) {
    const r = await run(args);
    assert.is(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
  }
  // A failure's message names the dataset and the object, never the keys.
  const failed = await run(['list', '@lake/absent']);
  assert.is(failed.code, 3);
  for (const text of outputs) assert.not.ok(text.includes(TEST_SECRET_KEY), 'the secret key was printed');
  const cached = join(home, 'cache-pin');
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else assert.not.ok(readFileSync(path).includes(TEST_SECRET_KEY), `${path} holds the secret key`);
    }
  };
  assert.ok(existsSync(cached));
  walk(cached);
});

test.run();
