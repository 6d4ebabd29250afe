/**
 * The root disk cache (daemon/images/disk.ts): a rootfs becomes an ext4 image with mke2fs -d
 * whose files read back as they are, an unchanged tree maps to the image already built, and a
 * change of content or metadata makes a new key. Needs e2fsprogs (set-up installs it).
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, statSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { scratchDir } from '../../lib/testing/scratch.js';
import { rootfsDisk } from '../index.js';

const base = scratchDir('image-disk');
const rootfs = join(base, 'rootfs');
const cacheDir = join(base, 'disks');

/** A file of the image, read with debugfs (e2fsprogs) without mounting it. */
function readFromImage(image: string, path: string): string {
  return execFileSync('debugfs', ['-R', `cat ${path}`, image], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
}

test.before(() => {
  for (const d of ['bin', 'etc', 'empty']) mkdirSync(join(rootfs, d), { recursive: true });
  writeFileSync(join(rootfs, 'etc', 'greeting'), 'hello from the image\n');
  writeFileSync(join(rootfs, 'bin', 'tool'), '#!/bin/sh\necho tool\n', { mode: 0o755 });
  writeFileSync(join(rootfs, 'big'), Buffer.alloc(3 << 20, 7));
  symlinkSync('/etc/greeting', join(rootfs, 'link'));
});

test('a rootfs becomes an ext4 image holding its files, read-only in the cache', async () => {
  const disk = await rootfsDisk({ rootfs, cacheDir });
  assert.ok(disk.built);
  assert.is(disk.path, join(cacheDir, `${disk.key}.ext4`));
  assert.match(disk.key, /^[0-9a-f]{64}$/);
  assert.is(statSync(disk.path).mode & 0o777, 0o444);
  assert.is(readFromImage(disk.path, '/etc/greeting'), 'hello from the image\n');
  assert.is(readFromImage(disk.path, '/bin/tool'), '#!/bin/sh\necho tool\n');
  const stat = execFileSync('debugfs', ['-R', 'stat /bin/tool', disk.path], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  assert.match(stat, /Mode:\s+0755/);
  const fsck = execFileSync('e2fsck', ['-fn', disk.path], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  assert.match(fsck, /clean|files/);
});

test('an unchanged tree is not built again; changed content or metadata is', async () => {
  const indexBefore = statSync(join(cacheDir, 'hashes.json')).ino;
  const first = await rootfsDisk({ rootfs, cacheDir });
  assert.not.ok(first.built, 'rebuilt an unchanged tree');
  assert.is(statSync(join(cacheDir, 'hashes.json')).ino, indexBefore, 'rewrote the hash index of an unchanged tree');
  // Same size and mtime, other content: only the hash tells.
  const greeting = join(rootfs, 'etc', 'greeting');
  const { atime, mtime } = statSync(greeting);
  writeFileSync(greeting, 'HELLO FROM THE IMAGE\n');
  utimesSync(greeting, atime, mtime);
  const changed = await rootfsDisk({ rootfs, cacheDir });
  assert.ok(changed.built);
  assert.is.not(statSync(join(cacheDir, 'hashes.json')).ino, indexBefore, 'kept the hash index of a changed file');
  assert.is.not(changed.key, first.key);
  assert.is(readFromImage(changed.path, '/etc/greeting'), 'HELLO FROM THE IMAGE\n');
  chmodSync(join(rootfs, 'bin', 'tool'), 0o700);
  const chmodded = await rootfsDisk({ rootfs, cacheDir });
  assert.ok(chmodded.built);
  assert.is.not(chmodded.key, changed.key);
  assert.not.ok((await rootfsDisk({ rootfs, cacheDir })).built);
});

test('a rootfs that is not a directory is refused', async () => {
  try {
    await rootfsDisk({ rootfs: join(base, 'nope'), cacheDir });
    assert.unreachable('accepted a missing rootfs');
  } catch (e) {
    assert.match((e as Error).message, /not a directory/);
  }
});

test.run();
