/**
 * The product's launcher (daemon/runtime/vmm-launcher.ts), which `sandboxd serve` hands the
 * runtime: the boot files of an image are its firmware library's kernel and initramfs and the
 * cached read-only root disk of its rootfs. (This host's preflight stops serve before any VM
 * starts, so the rest of the launch is exercised through the test supervisor.)
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { scratchDir } from '../../lib/testing/scratch.js';
import { FIRMWARE_FILES } from '../images/paths.js';
import { vmmLauncher } from '../runtime/vmm-launcher.js';

const base = scratchDir('vmm-launcher');
const rootfs = join(base, 'rootfs');
const library = join(base, 'firmware');
const stateDir = join(base, 'state');
const launcher = vmmLauncher(join(base, 'sandbox-vmm'));

test.before(() => {
  mkdirSync(join(rootfs, 'etc'), { recursive: true });
  writeFileSync(join(rootfs, 'etc', 'hostname'), 'sandbox\n');
  mkdirSync(library);
  mkdirSync(stateDir);
});

test('the VMM runs with every cgroup limit required, and nothing secret in its argv', () => {
  assert.equal(launcher.command, [join(base, 'sandbox-vmm')]);
  assert.is(launcher.cgroupLimits, 'required');
});

test('boot files: the library\'s kernel and initramfs, the cached root disk read-only, passt when installed', async () => {
  const boot = await launcher.bootFiles({ rootfs, entrypoint: ['/sbin/sandbox-guest', 'bootstrap', '--'], library_dir: library }, stateDir);
  assert.is(boot.kernel, join(library, FIRMWARE_FILES.vmlinux));
  assert.is(boot.initrd, join(library, FIRMWARE_FILES.initramfs));
  assert.is(boot.disks.length, 1);
  assert.ok(boot.disks[0]!.read_only);
  assert.match(boot.disks[0]!.path, new RegExp(`^${join(stateDir, 'disks')}/[0-9a-f]{64}\\.ext4$`));
  assert.ok(existsSync(boot.disks[0]!.path), 'the root disk was built into the state directory\'s cache');
  assert.equal(boot.net, existsSync('/usr/bin/passt') ? { passt: '/usr/bin/passt' } : undefined);
  const again = await launcher.bootFiles({ rootfs, entrypoint: [], library_dir: library }, stateDir);
  assert.is(again.disks[0]!.path, boot.disks[0]!.path, 'an unchanged rootfs reuses its disk');
});

test('an image without a firmware library is refused', async () => {
  const refused = await launcher.bootFiles({ rootfs, entrypoint: [] }, stateDir).then(() => undefined, (error: Error) => error);
  assert.ok(refused, 'booted without a library_dir');
  assert.match(refused!.message, 'the image names no firmware library_dir');
});

test.run();
