/**
 * `sandboxd image prepare` through the real CLI: a tiny rootfs in a temp dir becomes a prepared
 * image (bootstrap installed, manifest exactly as the spec's "prepared image manifest"), an
 * existing key is a conflict unless --force, and every bad input exits 2 naming the input (a
 * flag, a configuration line, or the default library a fresh clone has not built yet).
 * The firmware library is a stand-in holding the real static sandbox-guest (set-up builds it).
 */
import { copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { installation } from '../../lib/install.js';
import { DIST_ROOT, runTool } from '../../lib/testing/run-tool.js';
import { STATIC_GUEST_BINARY } from '../images/paths.js';

const base = mkdtempSync(join(tmpdir(), 'image-prepare-'));
const rootfs = join(base, 'tiny');
const images = join(base, 'images');
const library = join(base, 'firmware');

test.before(() => {
  if (!existsSync(STATIC_GUEST_BINARY)) {
    throw new Error(`static sandbox-guest missing at ${STATIC_GUEST_BINARY}; scripts/setup.sh builds it (build_guest_firmware)`);
  }
  for (const d of ['bin', 'etc', 'tmp']) mkdirSync(join(rootfs, d), { recursive: true });
  writeFileSync(join(rootfs, 'bin', 'sh'), '#!/bin/false\n', { mode: 0o755 });
  mkdirSync(library);
  copyFileSync(STATIC_GUEST_BINARY, join(library, 'sandbox-guest'));
  writeFileSync(join(library, 'manifest.json'), '{"format":1}\n');
});
test.after(() => rmSync(base, { recursive: true, force: true }));

const prepare = (...args: string[]) => runTool('sandboxd', ['image', 'prepare', ...args]);
const manifestOf = (key: string): unknown => JSON.parse(readFileSync(join(images, `${key}.json`), 'utf8'));

test('prepares a rootfs: bootstrap installed, manifest exactly as specified', async () => {
  const r = await prepare(rootfs, '--images-dir', images, '--key', 'tiny-busybox', '--library-dir', library,
    '--env', 'PATH=/bin:/sbin', '--env', 'GREETING=a=b c', '--', '/bin/sh', '-c', 'echo "$GREETING"');
  assert.is(r.code, 0, r.stderr);
  assert.is(r.stdout, `${join(realpathSync(images), 'tiny-busybox.json')}\n`);
  assert.equal(manifestOf('tiny-busybox'), {
    rootfs: realpathSync(rootfs),
    entrypoint: ['/sbin/sandbox-guest', 'bootstrap', '--'],
    cmd: ['/bin/sh', '-c', 'echo "$GREETING"'],
    env: { GREETING: 'a=b c', PATH: '/bin:/sbin' },
    library_dir: realpathSync(library),
  });
  const installed = join(rootfs, 'sbin', 'sandbox-guest');
  assert.ok(readFileSync(installed).equals(readFileSync(join(library, 'sandbox-guest'))), 'the library\'s bootstrap is installed');
  assert.is(statSync(installed).mode & 0o777, 0o755);
  assert.equal(readdirSync(images), ['tiny-busybox.json'], 'no temporary files left behind');
});

test('an existing key is a conflict (exit 4) unless --force', async () => {
  const before = manifestOf('tiny-busybox');
  const again = await prepare(rootfs, '--images-dir', images, '--key', 'tiny-busybox', '--library-dir', library, '--', '/bin/true');
  assert.is(again.code, 4, again.stderr);
  assert.match(again.stderr, 'tiny-busybox');
  assert.match(again.stderr, '--force');
  assert.equal(manifestOf('tiny-busybox'), before, 'a refused prepare changes nothing');
  const forced = await prepare(rootfs, '--images-dir', images, '--key', 'tiny-busybox', '--library-dir', library, '--force', '--', '/bin/true');
  assert.is(forced.code, 0, forced.stderr);
  assert.equal((manifestOf('tiny-busybox') as { cmd: string[]; env: object }).cmd, ['/bin/true']);
  assert.equal((manifestOf('tiny-busybox') as { env: object }).env, {});
});

test('the key defaults to the rootfs directory name; images-dir is created', async () => {
  const fresh = join(base, 'more-images', 'nested');
  const r = await prepare(rootfs, '--images-dir', fresh, '--library-dir', library);
  assert.is(r.code, 0, r.stderr);
  assert.equal((JSON.parse(readFileSync(join(fresh, 'tiny.json'), 'utf8')) as { cmd: string[] }).cmd, []);
});

test('-c/--config (and $SANDBOXD_CONFIG) supply images_dir and library_dir, relative to the file; a missing file exits 3, a bad one 2', async () => {
  const config = join(base, 'sandboxd.toml');
  writeFileSync(config, 'images_dir = "configured-images"\nlibrary_dir = "firmware"\n');
  const r = await prepare(rootfs, '--key', 'from-config', '-c', config);
  assert.is(r.code, 0, r.stderr);
  assert.is(r.stdout, `${join(realpathSync(base), 'configured-images', 'from-config.json')}\n`);
  assert.is((JSON.parse(readFileSync(r.stdout.trim(), 'utf8')) as { library_dir: string }).library_dir, join(realpathSync(base), 'firmware'));
  const viaEnv = await runTool('sandboxd', ['image', 'prepare', rootfs, '--key', 'from-env'], { env: { SANDBOXD_CONFIG: config } });
  assert.is(viaEnv.code, 0, viaEnv.stderr);
  assert.is(viaEnv.stdout, `${join(realpathSync(base), 'configured-images', 'from-env.json')}\n`);
  // A flag wins over the file.
  const flag = await prepare(rootfs, '--key', 'flag-wins', '-c', config, '--images-dir', images, '--library-dir', library);
  assert.is(flag.stdout, `${join(realpathSync(images), 'flag-wins.json')}\n`);
  const missing = await prepare(rootfs, '--key', 'x', '-c', join(base, 'nowhere.toml'));
  assert.is(missing.code, 3, missing.stderr);
  assert.match(missing.stderr, 'nowhere.toml');
  writeFileSync(config, 'images_dir = "configured-images"\nlibrary_dir = "."\n');
  const notLibrary = await prepare(rootfs, '--key', 'x', '-c', config);
  assert.is(notLibrary.code, 2, notLibrary.stderr);
  assert.match(notLibrary.stderr, `${config}:2 (library_dir) ${realpathSync(base)}: not a firmware library`);
  for (const [text, why] of [
    ['images_dir = \n', 'sandboxd.toml:1'],
    ['imagesdir = "x"\n', 'imagesdir'],
    ['images_dir = 5\n', 'images_dir'],
  ] as const) {
    writeFileSync(config, text);
    const bad = await prepare(rootfs, '--key', 'x', '-c', config);
    assert.is(bad.code, 2, `${text}: ${bad.stderr}`);
    assert.match(bad.stderr, why);
  }
});

test('bad inputs exit 2 and name the input', async () => {
  const file = join(base, 'a-file');
  writeFileSync(file, 'x');
  const noLibrary = join(base, 'not-firmware');
  mkdirSync(noLibrary);
  const cases: Array<[string[], string]> = [
    [[join(base, 'missing'), '--images-dir', images, '--library-dir', library], `${join(base, 'missing')}: no such directory`],
    [[file, '--images-dir', images, '--library-dir', library], `${file}: not a directory`],
    [['/', '--images-dir', images, '--library-dir', library, '--key', 'host'], 'host root'],
    [[rootfs, '--library-dir', library], '--images-dir is required'],
    [[rootfs, '--images-dir', file, '--library-dir', library], '--images-dir'],
    [[rootfs, '--images-dir', images, '--library-dir', library, '--key', '../escape'], '--key "../escape"'],
    [[rootfs, '--images-dir', images, '--library-dir', noLibrary, '--key', 'x'], `--library-dir ${realpathSync(noLibrary)}: not a firmware library`],
    [[rootfs, '--images-dir', images, '--library-dir', library, '--key', 'x', '--env', 'NOVALUE'], '--env "NOVALUE"'],
    [[rootfs, '--images-dir', join(rootfs, 'etc'), '--library-dir', library, '--key', 'x'], 'must not contain one another'],
  ];
  for (const [args, expected] of cases) {
    const r = await prepare(...args);
    assert.is(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, expected, `${args.join(' ')}`);
  }
  assert.not.ok(existsSync(join(images, 'x.json')));
});

test('a fresh clone (no firmware built yet): the default library is named as missing, with how to build it', async () => {
  // The built tools without set-up's build output: the installation root holds no vmm-rs/target.
  const fresh = join(base, 'fresh-clone');
  cpSync(join(DIST_ROOT, 'bin'), join(fresh, 'dist', 'bin'), { recursive: true });
  cpSync(join(DIST_ROOT, 'lib', 'errors.js'), join(fresh, 'dist', 'lib', 'errors.js'));
  copyFileSync(join(installation().root, 'package.json'), join(fresh, 'package.json'));
  const r = await runTool(relative(DIST_ROOT, join(fresh, 'dist', 'bin', 'sandboxd.js')), ['image', 'prepare', rootfs, '--images-dir', images, '--key', 'x']);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, `the default firmware library (--library-dir unset) ${join(fresh, 'vmm-rs', 'target', 'firmware')}: no such directory`);
  assert.match(r.stderr, 'scripts/setup.sh builds the default one, or `sandboxd firmware build --kernel-deb FILE --vmlinux FILE`');
  assert.not.ok(existsSync(join(images, 'x.json')));
});

test.run();
