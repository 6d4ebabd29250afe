/**
 * Every writer on an object store commits by a conditional PUT, so before its first one it checks
 * that the server honours them (s3-store.ts `requireConditionalWrites`). Against s3rver, a real
 * server that ignores them, every writer refuses (exit 2) before writing anything, unless the user
 * says there is one writer (TRAJSTORE_S3_SINGLE_WRITER=1). Against moto, which honours them, every
 * command works as before, the probe's object is gone after it and never listed, the verdict is
 * kept in the cache for an hour, and reading commands never probe.
 */
import { existsSync, readdirSync, utimesSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool } from '../../lib/testing/run-tool.js';
import { scratchDir } from '../../lib/testing/scratch.js';
import { S3Gate, S3TestServer } from '../../bench/lib/s3-server.js';
import { S3ObjectStore } from '../dataset/s3-store.js';
import { PROJECT_TESTDATA } from './helpers/fixtures.js';
import { S3rverServer } from './helpers/s3rver.js';

const ATIF = join(PROJECT_TESTDATA, 'samples', 'atif');
const STORYLINE = join(PROJECT_TESTDATA, 'samples', 'storyline');
const home = scratchDir('s3-conditional-writes');
let careless: S3rverServer;
let moto: S3TestServer;
let gate: S3Gate;

/** The environment of a command reaching a server by `vars`, with its own home and `cache`. */
function envOf(vars: Record<string, string>, cache = join(home, 'cache')): NodeJS.ProcessEnv {
  return { HOME: home, XDG_CONFIG_HOME: join(home, 'config'), XDG_DATA_HOME: join(home, 'data'), XDG_CACHE_HOME: cache, TRAJSTORE_S3_SINGLE_WRITER: '', ...vars };
}
const trajstore = (args: string[], env: NodeJS.ProcessEnv) => runTool('trajstore', args, { env, cwd: home });

/** The keys under `prefix` of bucket `lake`, read straight from the server. */
async function keysOf(vars: Record<string, string>, prefix: string): Promise<string[]> {
  const store = new S3ObjectStore({ uri: `s3://lake/${prefix}`, bucket: 'lake', prefix, endpoint: vars.AWS_ENDPOINT_URL_S3, region: 'us-west-2', credentials: { accessKeyId: vars.AWS_ACCESS_KEY_ID!, secretAccessKey: vars.AWS_SECRET_ACCESS_KEY! } }, {});
  try {
    return await store.list('');
  } finally {
    store.close();
  }
}

/** The runs of an object-store dataset, as `list` prints them (csv). */
async function runsOf(uri: string, env: NodeJS.ProcessEnv): Promise<string> {
  const listed = await trajstore(['list', uri, '--format', 'csv'], env);
  assert.is(listed.code, 0, listed.stderr);
  return listed.stdout;
}

test.before(async () => {
  careless = await S3rverServer.start(scratchDir('s3rver-data'), 'lake');
  moto = await S3TestServer.start();
  await moto.createBucket('lake');
  gate = await S3Gate.open(moto);
});

test.after(async () => {
  await gate?.close();
  await moto?.stop();
  await careless?.stop();
});

test('a server that ignores conditional PUTs (s3rver): import create and append, drop and a create-only export exit 2 naming the endpoint and what it answered, and write nothing', async () => {
  const env = envOf(careless.env);
  const refused = await trajstore(['import', '-f', ATIF, '-t', 's3://lake/careless'], env);
  assert.is(refused.code, 2, refused.stderr);
  assert.match(refused.stderr, `s3://lake/careless: the object store at ${careless.endpoint} (bucket lake) does not honour conditional writes`);
  assert.match(refused.stderr, 'it answered 200 to a PUT with If-None-Match: * over an existing object');
  assert.match(refused.stderr, 'TRAJSTORE_S3_SINGLE_WRITER=1');
  assert.not.match(refused.stderr, 'S3RVER', 'no credential in the message');
  assert.equal(await keysOf(careless.env, 'careless'), [], 'no manifest, no part, no probe left');

  // One writer, as the user says: the same commands write without the check.
  const single = envOf({ ...careless.env, TRAJSTORE_S3_SINGLE_WRITER: '1' });
  const made = await trajstore(['import', '-f', ATIF, '-t', 's3://lake/careless'], single);
  assert.is(made.code, 0, made.stderr);
  const appended = await trajstore(['import', '-f', STORYLINE, '-t', 's3://lake/careless', '--mode', 'append'], single);
  assert.is(appended.code, 0, appended.stderr);
  const runs = await runsOf('s3://lake/careless', env);
  assert.match(runs, /release-notes/);
  const before = await keysOf(careless.env, 'careless');

  // Without it, every writer refuses before writing: an append, a drop, a create-only export.
  const append = await trajstore(['import', '-f', ATIF, '-t', 's3://lake/careless', '--mode', 'append', '--on-duplicate', 'suffix'], env);
  assert.is(append.code, 2, append.stderr);
  assert.match(append.stderr, 'does not honour conditional writes');
  const drop = await trajstore(['drop', 's3://lake/careless', '--yes'], env);
  assert.is(drop.code, 2, drop.stderr);
  assert.match(drop.stderr, 'does not honour conditional writes');
  assert.equal(await keysOf(careless.env, 'careless'), before, 'the dataset as it was');
  assert.is(await runsOf('s3://lake/careless', env), runs);
  const exported = await trajstore(['export', '-f', 's3://lake/careless', '-t', 's3://lake/careless-out/', '-o', 'atif'], env);
  assert.is(exported.code, 2, exported.stderr);
  assert.match(exported.stderr, `s3://lake/careless-out: the object store at ${careless.endpoint} (bucket lake) does not honour conditional writes`);
  assert.equal(await keysOf(careless.env, 'careless-out'), []);
  // --overwrite puts no condition: nothing to check.
  const overwrite = await trajstore(['export', '-f', 's3://lake/careless', '-t', 's3://lake/careless-out/', '-o', 'atif', '--overwrite'], env);
  assert.is(overwrite.code, 0, overwrite.stderr);
  assert.ok((await keysOf(careless.env, 'careless-out')).length > 0);

  const dropped = await trajstore(['drop', 's3://lake/careless', '--yes'], single);
  assert.is(dropped.code, 0, dropped.stderr);
  assert.equal(await keysOf(careless.env, 'careless'), []);
  assert.equal((await keysOf(careless.env, '')).filter((key) => key.includes('trajstore-probe')), [], 'no probe left anywhere');
});

test('TRAJSTORE_S3_SINGLE_WRITER takes 1 or 0 (or nothing); anything else is refused (exit 2) naming it, before any request', async () => {
  const bad = await trajstore(['import', '-f', ATIF, '-t', 's3://lake/flag'], envOf({ ...careless.env, TRAJSTORE_S3_SINGLE_WRITER: 'yes' }));
  assert.is(bad.code, 2, bad.stderr);
  assert.match(bad.stderr, 'invalid TRAJSTORE_S3_SINGLE_WRITER "yes"');
  const off = await trajstore(['import', '-f', ATIF, '-t', 's3://lake/flag'], envOf({ ...careless.env, TRAJSTORE_S3_SINGLE_WRITER: '0' }));
  assert.is(off.code, 2, off.stderr);
  assert.match(off.stderr, 'does not honour conditional writes');
  assert.equal(await keysOf(careless.env, 'flag'), []);
});

/** The variables that reach moto through the gate (which records every request). */
const gateVars = (): Record<string, string> => ({ ...moto.env, AWS_ENDPOINT_URL_S3: gate.endpoint });

/** The probe's requests (its object's key) among those the gate saw. */
const probes = (): string[] => gate.requests.filter((line) => line.includes('/.trajstore-probes/'));

test('a server that honours them (moto): import, append, drop and export work as before; the probe runs before the first write, once per cache for an hour, and leaves nothing', async () => {
  const cache = join(home, 'cache-moto');
  const env = envOf(gateVars(), cache);
  gate.requests.length = 0;
  const made = await trajstore(['import', '-f', ATIF, '-t', 's3://lake/honest'], env);
  assert.is(made.code, 0, made.stderr);
  // A plain put, one with each condition, the delete; all before the first part goes up.
  assert.equal(probes().map((line) => line.split(' ')[0]), ['PUT', 'PUT', 'PUT', 'DELETE']);
  assert.ok(gate.requests.indexOf(probes()[0]!) < gate.requests.findIndex((line) => line.startsWith('PUT /lake/honest/parts/')), 'probed before the first upload');
  assert.equal((await keysOf(moto.env, 'honest')).filter((key) => !/^(trajstore\.json|snapshots\/|parts\/)/.test(key)), [], 'nothing but the dataset');
  const verdicts = join(cache, 'trajstore', 'conditional-writes');
  assert.is(readdirSync(verdicts).length, 1, 'the verdict kept in the cache');

  // The same cache within the hour: no probe.
  gate.requests.length = 0;
  const appended = await trajstore(['import', '-f', STORYLINE, '-t', 's3://lake/honest', '--mode', 'append'], env);
  assert.is(appended.code, 0, appended.stderr);
  assert.equal(probes(), []);
  // A verdict past the hour: probed again.
  const old = new Date(Date.now() - 2 * 60 * 60_000);
  for (const name of readdirSync(verdicts)) utimesSync(join(verdicts, name), old, old);
  gate.requests.length = 0;
  const again = await trajstore(['import', '-f', ATIF, '-t', 's3://lake/honest', '--mode', 'append', '--on-duplicate', 'suffix'], env);
  assert.is(again.code, 0, again.stderr);
  assert.is(probes().length, 4);

  // Reading commands, even with an empty cache, never probe and never write.
  const reader = envOf(gateVars(), join(home, 'cache-moto-reader'));
  gate.requests.length = 0;
  for (const args of [['list', 's3://lake/honest'], ['stats', 's3://lake/honest'], ['find', 's3://lake/honest', '--match', 'release'], ['query', 's3://lake/honest', '--sql', 'SELECT count(*) FROM dataset.runs'], ['export', '-f', 's3://lake/honest', '-t', '-', '-o', 'atif']]) {
    const r = await trajstore(args, reader);
    assert.is(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
  }
  assert.equal(gate.requests.filter((line) => !line.startsWith('GET ')), [], 'reads only');
  assert.not.ok(existsSync(join(home, 'cache-moto-reader', 'trajstore', 'conditional-writes')));

  // A create-only export and a drop, each with a cache of its own: probed, and nothing left.
  gate.requests.length = 0;
  const exported = await trajstore(['export', '-f', 's3://lake/honest', '-t', 's3://lake/honest-out/', '-o', 'atif'], envOf(gateVars(), join(home, 'cache-moto-export')));
  assert.is(exported.code, 0, exported.stderr);
  assert.is(probes().length, 4);
  assert.equal((await keysOf(moto.env, 'honest-out')).filter((key) => key.includes('trajstore-probe')), []);
  gate.requests.length = 0;
  const dropped = await trajstore(['drop', 's3://lake/honest', '--yes'], envOf(gateVars(), join(home, 'cache-moto-drop')));
  assert.is(dropped.code, 0, dropped.stderr);
  assert.ok(gate.requests.indexOf(probes()[0]!) < gate.requests.indexOf('PUT /lake/honest/trajstore.json'), 'probed before the marker');
  assert.equal(await keysOf(moto.env, 'honest'), []);
});

test('a probe a killed writer left: readers never see it; the next commit removes one past the grace period, a drop any', async () => {
  const env = envOf(moto.env, join(home, 'cache-leftover'));
  assert.is((await trajstore(['import', '-f', ATIF, '-t', 's3://lake/left'], env)).code, 0);
  const runs = await runsOf('s3://lake/left', env);
  const store = new S3ObjectStore({ uri: 's3://lake/left', bucket: 'lake', prefix: 'left', endpoint: moto.endpoint, region: 'us-west-2' }, env);
  const stamp = (at: number): string => `${at.toString(36)}-0123abcd`;
  const oldProbe = `.trajstore-probes/${stamp(Date.now() - 2 * 60 * 60_000)}-conditional-writes`;
  const youngProbe = `.trajstore-probes/${stamp(Date.now())}-conditional-writes`;
  try {
    await store.put(oldProbe, 'left by a killed writer\n');
    await store.put(youngProbe, 'a live writer\'s\n');
    assert.is(await runsOf('s3://lake/left', envOf(moto.env, join(home, 'cache-leftover-reader'))), runs);
    const found = await trajstore(['find', 's3://lake/left', '--match', 'release', '--format', 'json'], env);
    assert.is(found.code, 0, found.stderr);
    assert.not.match(found.stdout, 'trajstore-probe');
    const appended = await trajstore(['import', '-f', STORYLINE, '-t', 's3://lake/left', '--mode', 'append'], env);
    assert.is(appended.code, 0, appended.stderr);
    const probesLeft = (await store.list('')).filter((key) => key.includes('trajstore-probe'));
    assert.equal(probesLeft, [youngProbe], 'the old probe reclaimed, the young one kept');
    const dropped = await trajstore(['drop', 's3://lake/left', '--yes'], env);
    assert.is(dropped.code, 0, dropped.stderr);
    assert.equal(await store.list(''), []);
  } finally {
    store.close();
  }
});

test.run();
