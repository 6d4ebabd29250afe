/**
 * `sandboxd serve` as a user runs it: flag and secret checks, the images directory from its flag
 * or the configuration file, the preflight refusing a missing images directory, an ordinary
 * directory and this machine's controller-less cgroup v2 hierarchy with one message per missing
 * piece, the VMM set-up builds, and a second daemon on a busy state directory (exit 4).
 */
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool } from '../../lib/testing/run-tool.js';
import { scratchDir } from '../../lib/testing/scratch.js';
import { PROTOCOL_PROFILE } from '../index.js';
import { DEFAULT_VMM } from '../runtime/vmm-launcher.js';
import { cgroup2Mount, makeFixture } from './supervisor/fixture.js';

const KEY = randomBytes(32).toString('hex');
const work = scratchDir('serve');
const noState = ['serve', '--images-dir', work, '--cgroup-root', work];
const base = [...noState, '--state', join(work, 'state')];

function serve(args: string[], env: NodeJS.ProcessEnv = { SVC_API_KEY: KEY }) {
  return runTool('sandboxd', args, { env: { SVC_API_KEY: undefined, ...env }, timeoutMs: 30_000 });
}

test('sandboxd protocol prints the profile', async () => {
  const r = await runTool('sandboxd', ['protocol']);
  assert.is(r.code, 0);
  assert.is(r.stdout.trim(), PROTOCOL_PROFILE);
});

test('bad settings exit 2 naming the input; the secret is never printed', async () => {
  const cases: [string[], NodeJS.ProcessEnv, RegExp][] = [
    [base, {}, /SVC_API_KEY: the lifecycle secret must be set in the environment\nsandboxd: hint: e\.g\. export SVC_API_KEY=\$\(openssl rand -hex 32\)/],
    [base, { SVC_API_KEY: 'short-secret-value' }, /at least 32 bytes/],
    [[...base, '--listen', '0.0.0.0:8080'], { SVC_API_KEY: KEY }, /--public-endpoint is required/],
    [[...base, '--listen', '127.0.0.1:0'], { SVC_API_KEY: KEY }, /--public-endpoint is required/],
    [[...base, '--listen', 'nowhere'], { SVC_API_KEY: KEY }, /--listen/],
    [[...base, '--max-timeout-seconds', '31536001'], { SVC_API_KEY: KEY }, /--max-timeout-seconds/],
    [[...noState, '--state', 'relative'], { SVC_API_KEY: KEY }, /--state relative: must be an absolute path/],
    [[...noState, '--state', `/tmp/${'d'.repeat(60)}`], { SVC_API_KEY: KEY }, /--state .*at most 46 bytes/],
    [['serve', '--cgroup-root', work], { SVC_API_KEY: KEY }, /--images-dir/],
  ];
  for (const [args, env, message] of cases) {
    const r = await serve(args, env);
    assert.is(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message);
    assert.not.match(r.stderr + r.stdout, KEY);
    assert.not.match(r.stderr, 'short-secret-value');
  }
});

test('preflight: an ordinary directory is refused before binding; the VMM set-up builds is found', async () => {
  const r = await serve(base);
  assert.is(r.code, 6, r.stderr);
  assert.match(r.stderr, `--cgroup-root ${work}: not a cgroup v2 hierarchy`);
  assert.not.match(r.stderr, 'listening');
  assert.not.match(r.stderr, 'is not built', `scripts/setup.sh builds ${DEFAULT_VMM}`);
});

test('preflight: a missing images directory is named beside the other problems', async () => {
  const missing = join(work, 'no-images');
  const r = await serve(['serve', '--images-dir', missing, '--cgroup-root', work, '--state', join(work, 'state')]);
  assert.is(r.code, 6, r.stderr);
  assert.match(r.stderr, `--images-dir ${missing}: no such directory`);
  assert.match(r.stderr, `--cgroup-root ${work}: not a cgroup v2 hierarchy`);
});

test('preflight: a missing cgroup root is named once, by its flag, not again by the VMM as a bare path', async () => {
  const missing = join(work, 'absent-root');
  const r = await serve(['serve', '--images-dir', work, '--cgroup-root', missing, '--state', join(work, 'state')]);
  assert.is(r.code, 6, r.stderr);
  assert.match(r.stderr, `--cgroup-root ${missing}: no such directory`);
  const lines = r.stderr.split('\n').filter((line) => line.includes(missing));
  assert.equal(lines, [`  --cgroup-root ${missing}: no such directory`], r.stderr);
});

test('images_dir of the configuration file: serve uses it (relative to the file) and names its line; a flag overrides it', async () => {
  const config = join(work, 'sandboxd.toml');
  writeFileSync(config, 'images_dir = "configured-images"\n');
  const inputs = ['serve', '-c', config, '--cgroup-root', work, '--state', join(work, 'state')];
  const configured = await serve(inputs);
  assert.is(configured.code, 6, configured.stderr);
  assert.match(configured.stderr, `${config}:1 (images_dir) ${join(work, 'configured-images')}: no such directory`);
  const overridden = await serve([...inputs, '--images-dir', join(work, 'flag-images')]);
  assert.is(overridden.code, 6, overridden.stderr);
  assert.match(overridden.stderr, `--images-dir ${join(work, 'flag-images')}: no such directory`);
  assert.not.match(overridden.stderr, 'configured-images');
});

const mount = cgroup2Mount();
test('preflight: this machine\'s controller-less cgroup v2 hierarchy is refused, each missing piece named', async () => {
  if ('skip' in mount) return console.log(`SKIP: preflight on cgroup2: ${mount.skip}`);
  const fixture = makeFixture(mount.path);
  try {
    const r = await serve(['serve', '--images-dir', fixture.imagesDir, '--cgroup-root', fixture.cgroupRoot, '--state', fixture.state]);
    assert.is(r.code, 6, r.stderr);
    for (const controller of ['cpu', 'memory', 'pids']) assert.match(r.stderr, `the ${controller} controller is not enabled`);
    for (const file of ['cpu.max', 'memory.max', 'memory.swap.max', 'memory.oom.group', 'pids.max']) assert.match(r.stderr, `cannot write ${file}`);
    assert.not.match(r.stderr, 'listening');
  } finally {
    await fixture.cleanup();
  }
});

test('two daemons on one state directory: the second exits 4, busy', async () => {
  if ('skip' in mount) return console.log(`SKIP: two daemons: ${mount.skip}`);
  const fixture = makeFixture(mount.path);
  const first = await fixture.start();
  try {
    const r = await serve(['serve', '--images-dir', fixture.imagesDir, '--cgroup-root', fixture.cgroupRoot, '--state', fixture.state, '--listen', '127.0.0.1:1']);
    assert.is(r.code, 4, r.stderr);
    assert.match(r.stderr, 'state directory busy');
    const listed = await fetch(`${first.url}/v1/sandboxes`, { headers: { 'SVC-API-KEY': fixture.apiKey } });
    assert.is(listed.status, 200);
  } finally {
    await first.close();
    await fixture.cleanup();
  }
});

test.run();
