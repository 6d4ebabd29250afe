import { lstatSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { ConfigLocation } from '../../lib/config.js';
import { ToolError } from '../../lib/errors.js';
import { loadConfig, parseConfig, saveConfig } from '../pins/config.js';
import { resolveDataset } from '../pins/resolve.js';
import { runTool } from '../../lib/testing/run-tool.js';
import { scratchDir } from '../../lib/testing/scratch.js';
import { spawnSync } from 'node:child_process';

const SECRET = 'wJalrXUtnFEMI-K7MDENG-bPxRfiCYzz';
const tmp = () => scratchDir('pins');
const at = (path: string, source: ConfigLocation['source'] = 'flag'): ConfigLocation => ({ path, source });

function configFile(text: string): ConfigLocation {
  const path = join(tmp(), 'config.toml');
  writeFileSync(path, text);
  return at(path);
}

/** The error a call throws, which must be a ToolError. */
async function failure(fn: () => unknown): Promise<ToolError> {
  try {
    await fn();
  } catch (error) {
    if (error instanceof ToolError) return error;
    throw error;
  }
  throw new assert.Assertion({ message: 'expected an error', operator: 'throws', generated: false, actual: undefined, expects: undefined });
}

test('a good configuration: local, s3 (default and explicit region, http endpoint), catalog', () => {
  const loc = configFile(`# mine
[pins.work]
uri = "data/work"

[pins.home]
uri = "~/traj"

[pins."lake.v2"]
uri = "s3://team-bucket/traces/"
endpoint = "http://127.0.0.1:9000"
access_key = "AK1"
secret_key = "${SECRET}"

[pins.eu]
uri = "s3://eu-bucket"
region = "eu-central-1"

[pins.team]
uri = "catalog://127.0.0.1:7070"
access_key = "AK2"
secret_key = "SK2"
`);
  const config = parseConfig(readFileSync(loc.path, 'utf8'), loc, { HOME: '/home/u' });
  const pins = config.pins;
  assert.equal([...pins.keys()], ['work', 'home', 'lake.v2', 'eu', 'team']);
  const work = pins.get('work');
  assert.ok(work?.kind === 'local' && work.path === join(loc.path, '..', 'data', 'work'), 'relative to the config file');
  const home = pins.get('home');
  assert.ok(home?.kind === 'local' && home.path === '/home/u/traj');
  const lake = pins.get('lake.v2');
  assert.ok(lake?.kind === 's3');
  if (lake?.kind === 's3') {
    assert.is(lake.bucket, 'team-bucket');
    assert.is(lake.prefix, 'traces');
    assert.is(lake.region, 'us-west-2');
    assert.ok(lake.regionDefaulted);
    assert.is(lake.endpoint, 'http://127.0.0.1:9000');
    assert.equal(lake.credentials, { accessKeyId: 'AK1', secretAccessKey: SECRET });
  }
  const eu = pins.get('eu');
  assert.ok(eu?.kind === 's3' && eu.region === 'eu-central-1' && !eu.regionDefaulted && eu.credentials === undefined);
  const team = pins.get('team');
  assert.ok(team?.kind === 'catalog' && team.port === 7070);
});

/** Each bad configuration: the text, what the message must say, and the line it must name. */
const BAD: Array<[string, string, RegExp, number | undefined]> = [
  ['legacy default_warehouse', 'default_warehouse = "/data"\n', /legacy key `default_warehouse`/, 1],
  ['legacy default_dataset', '# c\ndefault_dataset = "atif"\n', /legacy key `default_dataset`/, 2],
  ['legacy aliases table', '[aliases]\nwork = "/data"\n', /legacy key `aliases`/, 1],
  ['legacy [[datasets]]', '[pins.a]\nuri = "/a"\n\n[[datasets]]\nname = "x"\nuri = "y"\n', /legacy key `datasets`/, 4],
  ['unknown top-level key', 'colour = "blue"\n', /unknown key `colour`/, 1],
  ['unknown pin key', '[pins.a]\nuri = "/a"\nbucket = "b"\n', /unknown key `pins\.a\.bucket`/, 3],
  ['legacy key inside a pin', '[pins.a]\nuri = "/a"\naliases = "b"\n', /legacy key `pins\.a\.aliases`/, 3],
  ['a value that is not a string', '[pins.a]\nuri = 5\n', /`pins\.a\.uri` must be a string/, 2],
  ['a pin without uri', '[pins.a]\nregion = "x"\n', /pins\.a has no uri/, 1],
  ['a pin that is not a table', 'pins.a = "/data"\n', /pins\.a must be a table/, 1],
  ['pins that is not a table', 'pins = 3\n', /`pins` must be a table/, 1],
  ['an upper-case pin name', '[pins.Work]\nuri = "/a"\n', /invalid pin name "Work"/, 1],
  ['a pin name starting with a digit', '[pins.1a]\nuri = "/a"\n', /invalid pin name "1a"/, 1],
  ['a 65-character pin name', `[pins.a${'b'.repeat(64)}]\nuri = "/a"\n`, /invalid pin name/, 1],
  ['a built-in pin name', '[pins.agentb-code]\nuri = "/a"\n', /built in/, 1],
  ['a default pin on s3', '[pins.default]\nuri = "s3://bucket-a/x"\n', /default.*must be a local directory/, 2],
  ['a pin pointing at a pin', '[pins.a]\nuri = "/a"\n[pins.b]\nuri = "@a"\n', /points at another pin/, 4],
  ['endpoint on a local pin', '[pins.a]\nuri = "/a"\nendpoint = "http://127.0.0.1:1"\n', /pins\.a\.endpoint: endpoint applies to s3/, 3],
  ['region on a catalog pin', '[pins.t]\nuri = "catalog://127.0.0.1:9"\nregion = "r"\naccess_key = "a"\nsecret_key = "b"\n', /pins\.t\.region/, 3],
  ['a catalog pin without credentials', '[pins.t]\nuri = "catalog://127.0.0.1:9"\n', /needs access_key and secret_key/, 1],
  ['a catalog pin off loopback', '[pins.t]\nuri = "catalog://10.0.0.1:9"\naccess_key = "a"\nsecret_key = "b"\n', /catalog:\/\/127\.0\.0\.1:<port>/, 2],
  ['half a key pair', `[pins.a]\nuri = "s3://bucket-a"\nsecret_key = "${SECRET}"\n`, /must be given together/, 3],
  ['credentials on a local pin', `[pins.a]\nuri = "/a"\naccess_key = "x"\nsecret_key = "${SECRET}"\n`, /credentials apply to s3/, 3],
  ['an endpoint that is no URL', '[pins.a]\nuri = "s3://bucket-a"\nendpoint = "not a url"\n', /is not a URL/, 3],
  ['an ftp endpoint', '[pins.a]\nuri = "s3://bucket-a"\nendpoint = "ftp://127.0.0.1/"\n', /http:\/\/ or https:\/\//, 3],
  ['an unsupported scheme', '[pins.a]\nuri = "gs://bucket/x"\n', /unsupported uri scheme "gs:\/\/"/, 2],
  ['a bad bucket', '[pins.a]\nuri = "s3://B_/x"\n', /invalid bucket name/, 2],
  ['a secret in an s3 uri', `[pins.a]\nuri = "s3://AK:${SECRET}@bucket-a/x"\n`, /s3:\/\/ uri must not carry a user name or password/, 2],
  ['a secret in a catalog uri', `[pins.t]\nuri = "catalog://AK:${SECRET}@127.0.0.1:9"\naccess_key = "a"\nsecret_key = "b"\n`, /catalog:\/\/ uri must not carry/, 2],
  ['an empty uri', '[pins.a]\nuri = ""\n', /uri is empty/, 2],
  ['an empty region', '[pins.a]\nuri = "s3://bucket-a"\nregion = ""\n', /region is empty/, 3],
  ['a duplicate table', '[pins.a]\nuri = "/a"\n[pins.a]\nuri = "/b"\n', /invalid TOML/, 3],
  ['a TOML syntax error on a secret line', `[pins.a]\nuri = "s3://bucket-a"\naccess_key = "a"\nsecret_key = "${SECRET}" oops\n`, /invalid TOML at column \d+/, 4],
];

for (const [name, text, message, line] of BAD) {
  test(`bad configuration (${name}) exits 2 naming the file, key and line`, async () => {
    const loc = configFile(text);
    const error = await failure(() => loadConfig(loc, { env: {} }));
    assert.is(error.exitCode, 2);
    assert.match(error.message, message);
    assert.ok(error.message.startsWith(`${loc.path}${line ? `:${line}:` : ':'}`), error.message);
    assert.not.match(`${error.message} ${error.hint ?? ''}`, SECRET, 'never a secret in a message');
  });
}

test('a missing default configuration is empty; a missing named one is not found (3)', async () => {
  const dir = tmp();
  const empty = await loadConfig(at(join(dir, 'none.toml'), 'default'), { env: {} });
  assert.is(empty.exists, false);
  assert.is(empty.pins.size, 0);
  for (const source of ['flag', 'env'] as const) {
    const error = await failure(() => loadConfig(at(join(dir, 'none.toml'), source), { env: {} }));
    assert.is(error.exitCode, 3);
    assert.match(error.message, 'none.toml');
  }
});

test('saving is atomic, mode 0600 with credentials and 0644 without, and round-trips', async () => {
  const dir = join(tmp(), 'nested', 'trajstore');
  const loc = at(join(dir, 'config.toml'), 'default');
  const config = await loadConfig(loc, { env: {} });
  await saveConfig(config, new Map([['work', { uri: '/data/work' }], ['a.b', { uri: 's3://bucket-a/p' }]]));
  assert.is(statSync(loc.path).mode & 0o777, 0o644);
  const plain = await loadConfig(loc, { env: {} });
  assert.equal([...plain.entries.keys()], ['work', 'a.b']);
  await saveConfig(plain, new Map([...plain.entries, ['lake', { uri: 's3://bucket-b', access_key: 'AK', secret_key: SECRET }]]));
  assert.is(statSync(loc.path).mode & 0o777, 0o600);
  const again = await loadConfig(loc, { env: {} });
  assert.equal({ ...again.entries.get('lake') }, { uri: 's3://bucket-b', access_key: 'AK', secret_key: SECRET });
  assert.equal(again.warnings, []);
  assert.equal(readdirSync(dir), ['config.toml'], 'no temporary file left behind');
});

test('a symlinked configuration is written through the link', async () => {
  const dir = tmp();
  const real = join(dir, 'dotfiles-config.toml');
  writeFileSync(real, '[pins.a]\nuri = "/a"\n');
  const link = join(dir, 'config.toml');
  symlinkSync(real, link);
  const config = await loadConfig(at(link), { env: {} });
  await saveConfig(config, new Map([...config.entries, ['b', { uri: '/b' }]]));
  assert.ok(lstatSync(link).isSymbolicLink(), 'still a link');
  assert.match(readFileSync(real, 'utf8'), '[pins.b]');
});

test('credentials in a file others can read give a warning without the secret', async () => {
  const loc = configFile(`[pins.a]\nuri = "s3://bucket-a"\naccess_key = "AK"\nsecret_key = "${SECRET}"\n`);
  const config = await loadConfig(loc, { env: {} });
  assert.is(config.warnings.length, 1);
  assert.match(config.warnings[0] ?? '', 'chmod 600');
  assert.not.match(config.warnings[0] ?? '', SECRET);
});

test('resolveDataset: the default dataset, pins, built-in pins, paths and s3 uris', async () => {
  const loc = configFile(`[pins.work]\nuri = "/data/work"\n[pins.lake]\nuri = "s3://team-bucket/traces"\nendpoint = "http://127.0.0.1:9000"\nregion = "eu-west-1"\naccess_key = "AK"\nsecret_key = "${SECRET}"\n`);
  const env = { HOME: '/home/u' };
  const resolve = (arg: string | undefined, more: NodeJS.ProcessEnv = {}, purpose: 'read' | 'write' = 'read') =>
    resolveDataset(arg, { config: loc, env: { ...env, ...more }, purpose, cwd: '/cwd' });

  assert.equal(await resolve(undefined), { kind: 'local', path: '/home/u/.local/share/trajstore/default', display: '/home/u/.local/share/trajstore/default' });
  assert.is((await resolve(undefined, { XDG_DATA_HOME: '/xdg' })).display, '/xdg/trajstore/default');
  assert.equal(await resolve('@work/a/b'), { kind: 'local', path: '/data/work/a/b', display: '@work/a/b' });
  assert.equal(await resolve('@lake/x'), {
    kind: 's3',
    uri: 's3://team-bucket/traces/x',
    bucket: 'team-bucket',
    prefix: 'traces/x',
    endpoint: 'http://127.0.0.1:9000',
    region: 'eu-west-1',
    display: '@lake/x',
    credentials: { accessKeyId: 'AK', secretAccessKey: SECRET },
  });
  assert.equal(await resolve('rel/dir'), { kind: 'local', path: '/cwd/rel/dir', display: 'rel/dir' });
  assert.equal(await resolve('s3://other-bucket', { AWS_REGION: 'ap-south-1' }), {
    kind: 's3', uri: 's3://other-bucket', bucket: 'other-bucket', prefix: '', region: 'ap-south-1', display: 's3://other-bucket',
  });
  assert.is((await resolve('s3://other-bucket/p') as { region: string }).region, 'us-west-2');

  assert.is((await resolve('@agenta') as { path: string }).path, '/home/u/.codex/sessions');
  assert.is((await resolve('@agenta/2026/05', { CODEX_HOME: '/cx' }) as { path: string }).path, '/cx/sessions/2026/05');
  assert.is((await resolve('@agentb') as { path: string }).path, '/home/u/.claude');
  assert.is((await resolve('@agentb-code') as { path: string }).path, '/home/u/.claude/projects');
  assert.is((await resolve('@agentb-code/-home-x', { CLAUDE_CONFIG_DIR: '/cc' }) as { path: string }).path, '/cc/projects/-home-x');
});

test('resolveDataset: bad references', async () => {
  const loc = configFile('[pins.work]\nuri = "/data/work"\n[pins.team]\nuri = "catalog://127.0.0.1:7070"\naccess_key = "a"\nsecret_key = "b"\n');
  const resolve = (arg: string, purpose: 'read' | 'write' = 'read') => resolveDataset(arg, { config: loc, env: { HOME: '/h' }, purpose });
  for (const arg of ['@work/', '@work//a', '@work/./a', '@work/../etc', '@Work', '@', '@1x']) {
    const error = await failure(() => resolve(arg));
    assert.is(error.exitCode, 2, arg);
    assert.match(error.message, JSON.stringify(arg));
  }
  const missing = await failure(() => resolve('@nope'));
  assert.is(missing.exitCode, 3);
  assert.match(missing.message, '@nope');
  assert.match(missing.hint ?? '', '@work');
  const builtin = await failure(() => resolve('@agentb-code', 'write'));
  assert.is(builtin.exitCode, 2);
  assert.match(builtin.message, 'can be imported from but not written');
  // A directory service is opened one dataset at a time, and its datasets are read-only.
  const whole = await failure(() => resolve('@team'));
  assert.is(whole.exitCode, 2);
  assert.match(whole.message, '@team is a directory service: name one of its datasets as @team/NAME');
  assert.is((await failure(() => resolve('@team/lib', 'write'))).exitCode, 2);
  assert.is((await failure(() => resolve('catalog://127.0.0.1:7070'))).exitCode, 2);
  assert.is((await failure(() => resolve('ftp://x/y'))).exitCode, 2);
  const noFile = await failure(() => resolveDataset('@work', { config: at('/nonexistent/c.toml'), env: {}, purpose: 'read' }));
  assert.is(noFile.exitCode, 3);
});

test('resolveDataset: a default pin that is a file is refused; a missing directory is fine', async () => {
  const dir = tmp();
  writeFileSync(join(dir, 'afile'), 'x');
  mkdirSync(join(dir, 'adir'));
  const asFile = configFile(`[pins.default]\nuri = "${join(dir, 'afile')}"\n`);
  const error = await failure(() => resolveDataset(undefined, { config: asFile, env: {}, purpose: 'write' }));
  assert.is(error.exitCode, 2);
  assert.match(error.message, 'must be a local directory');
  for (const target of ['adir', 'not-yet']) {
    const loc = configFile(`[pins.default]\nuri = "${join(dir, target)}"\n`);
    assert.equal(await resolveDataset(undefined, { config: loc, env: {}, purpose: 'write' }), { kind: 'local', path: join(dir, target), display: '@default' });
  }
});

test('pins changed by several commands at once are all kept (the configuration is locked)', async () => {
  const dir = tmp();
  const env = { TRAJSTORE_CONFIG: join(dir, 'config.toml'), HOME: dir };
  const names = Array.from({ length: 8 }, (_, i) => `p${i}`);
  const results = await Promise.all(names.map((name) => runTool('trajstore', ['dataset', 'pin', name, join(dir, name)], { env, cwd: dir })));
  for (const r of results) assert.is(r.code, 0, r.stderr);
  const config = await loadConfig(at(env.TRAJSTORE_CONFIG), { env: {} });
  assert.equal([...config.entries.keys()].sort(), names);
  assert.equal(readdirSync(dir).filter((f) => f.endsWith('.lock')), [], 'the lock is gone');
});

test('a lock left by a command that died is taken over', async () => {
  const dir = tmp();
  const env = { TRAJSTORE_CONFIG: join(dir, 'config.toml'), HOME: dir };
  const dead = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' }).stdout;
  writeFileSync(`${env.TRAJSTORE_CONFIG}.lock`, `${dead}\n`);
  const r = await runTool('trajstore', ['dataset', 'pin', 'after', join(dir, 'after')], { env, cwd: dir });
  assert.is(r.code, 0, r.stderr);
  assert.ok((await loadConfig(at(env.TRAJSTORE_CONFIG), { env: {} })).entries.has('after'));
});

test.run();
