/**
 * Slow tier: boots the firmware library that set-up builds (vmm-rs/target/firmware: the PVH
 * vmlinux and the initramfs) with a tiny busybox image made by `sandboxd image prepare` under
 * QEMU's software CPU, and reads the serial log: modules load, the root mounts read-only under
 * a private overlay, the bootstrap starts both services, the workload reaches them, and its
 * exit powers the guest off without touching the root image.
 *
 * The root disk is the image the daemon's cache builds (daemon/images/disk.ts, mke2fs -d),
 * attached read-only as the VMM attaches it.
 *
 * Prerequisites (nothing is downloaded here): `scripts/test.sh --tier slow` installs the
 * Debian packages qemu-system-x86, busybox-static and cpio (set-up installs e2fsprogs), and
 * set-up builds the firmware library (README, "Guest firmware and images").
 */
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool } from '../../lib/testing/run-tool.js';
import { DEFAULT_FIRMWARE_DIR, FIRMWARE_FILES } from '../images/paths.js';
import { rootfsDisk } from '../index.js';

const BUSYBOX = '/bin/busybox';

function which(cmd: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

function prerequisites(): void {
  const missing: string[] = [];
  if (!which('qemu-system-x86_64')) missing.push('qemu-system-x86_64 (apt-get install qemu-system-x86)');
  if (!which('mke2fs')) missing.push('mke2fs (apt-get install e2fsprogs)');
  if (!existsSync(BUSYBOX)) missing.push(`${BUSYBOX} (apt-get install busybox-static)`);
  if (!which('cpio')) missing.push('cpio (apt-get install cpio)');
  if (!existsSync(join(DEFAULT_FIRMWARE_DIR, FIRMWARE_FILES.manifest))) {
    missing.push(`the firmware library at ${DEFAULT_FIRMWARE_DIR} (scripts/setup.sh builds it)`);
  }
  if (missing.length) throw new Error(`the QEMU boot test needs:\n  ${missing.join('\n  ')}`);
}

const WORKLOAD = `#!/bin/sh
echo "workload: GREETING=$GREETING"
echo "workload: root $(grep ' / ' /proc/mounts)"
touch /written-by-workload && echo "workload: upper layer writable"
i=0
while [ $i -lt 600 ]; do
  wget -q -O - http://127.0.0.1:44772/ready 2>/dev/null | grep -q initialized && break
  i=$((i+1)); sleep 0.1
done
echo "workload: ready $(wget -q -O - http://127.0.0.1:44772/ready)"
echo "workload: egress $(wget -q -O - http://127.0.0.1:18080/healthz)"
echo "workload: execd $(wget -q -O - --post-data '{"command":"echo $GREETING via execd"}' http://127.0.0.1:44772/command | grep stdout)"
exit 3
`;

test('the guest boots under QEMU TCG: modules, overlay root, services, workload, power-off', async () => {
  prerequisites();
  const dir = mkdtempSync(join(tmpdir(), 'guest-qemu-'));
  try {
    const root = join(dir, 'tiny-busybox');
    for (const d of ['bin', 'sbin', 'etc', 'proc', 'sys', 'dev', 'run', 'tmp']) mkdirSync(join(root, d), { recursive: true });
    copyFileSync(BUSYBOX, join(root, 'bin', 'busybox'));
    for (const applet of execFileSync(BUSYBOX, ['--list'], { encoding: 'utf8' }).split('\n').filter(Boolean)) {
      if (applet !== 'busybox') symlinkSync('busybox', join(root, 'bin', applet));
    }
    writeFileSync(join(root, 'bin', 'workload.sh'), WORKLOAD, { mode: 0o755 });
    // The image as a user makes it: sandboxd installs the firmware's bootstrap and writes the manifest.
    const images = join(dir, 'images');
    const prepared = await runTool('sandboxd', ['image', 'prepare', root, '--images-dir', images,
      '--env', 'PATH=/bin:/sbin', '--env', 'GREETING=hello-from-host', '--', '/bin/workload.sh']);
    assert.is(prepared.code, 0, prepared.stderr);
    const manifest = JSON.parse(readFileSync(join(images, 'tiny-busybox.json'), 'utf8')) as {
      rootfs: string; entrypoint: string[]; cmd: string[]; env: Record<string, string>; library_dir: string;
    };
    assert.is(manifest.library_dir, realpathSync(DEFAULT_FIRMWARE_DIR));
    // What the host sends over vsock at start (its env from the manifest), here as a file in the image.
    writeFileSync(join(manifest.rootfs, 'etc', 'sandbox-config.json'), JSON.stringify({ type: 'config', version: 1, env: manifest.env }));
    const { path: image } = await rootfsDisk({ rootfs: manifest.rootfs, cacheDir: join(dir, 'disks') });
    const imageHash = createHash('sha256').update(readFileSync(image)).digest('hex');
    // The PVH vmlinux is what the VMM loads; QEMU boots it the same way (its PVH note).
    const kernel = join(manifest.library_dir, FIRMWARE_FILES.vmlinux);
    const initramfs = join(manifest.library_dir, FIRMWARE_FILES.initramfs);
    // A stock cpio reads the archive as the kernel does: /init and exactly the modules its manifest lists.
    const library = JSON.parse(readFileSync(join(manifest.library_dir, FIRMWARE_FILES.manifest), 'utf8')) as { modules: Array<{ file: string }> };
    const listed = execFileSync('cpio', ['-it', '--quiet'], { input: readFileSync(initramfs), encoding: 'utf8' }).split('\n').filter(Boolean);
    assert.equal(listed, ['.', 'dev', 'lib', 'lib/modules', 'proc', 'sys', 'dev/console', 'init', ...library.modules.map((m) => m.file)]);
    // The entrypoint ends with `--`; with no host on vsock here, the config and bridges flags go before it,
    // and the config carries no tokens (the workload calls the services without one): a development set-up.
    const argv = [...manifest.entrypoint.slice(0, -1), '--control', 'file:/etc/sandbox-config.json', '--listen', 'unix:/run/bridges',
      '--dev-no-token', '--', ...manifest.cmd];
    const exec = Buffer.from(JSON.stringify(argv)).toString('base64url');
    const qemu = spawn(
      'qemu-system-x86_64',
      ['-accel', 'tcg', '-m', '512', '-smp', '1', '-nographic', '-no-reboot', '-kernel', kernel, '-initrd', initramfs,
        '-append', `console=ttyS0 quiet panic=-1 sandbox.root=/dev/vda sandbox.exec=${exec}`,
        '-drive', `file=${image},if=virtio,format=raw,readonly=on`],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let serial = '';
    qemu.stdout.setEncoding('utf8').on('data', (d: string) => (serial += d));
    qemu.stderr.setEncoding('utf8').on('data', (d: string) => (serial += d));
    const killer = setTimeout(() => qemu.kill('SIGKILL'), 240_000);
    const code = await new Promise<number | null>((resolve) => qemu.once('exit', (c) => resolve(c)));
    clearTimeout(killer);
    assert.is(code, 0, `qemu did not power off by itself:\n${serial}`);
    for (const m of ['virtio_blk', 'overlay', 'vmw_vsock_virtio_transport', 'virtio_net']) {
      assert.match(serial, `sandbox-guest init: module ${m} ready`, serial);
    }
    assert.match(serial, /workload: root overlay \/ overlay rw,.*lowerdir=\/lower,upperdir=\/rw\/upper,workdir=\/rw\/work/);
    assert.match(serial, 'workload: GREETING=hello-from-host');
    assert.match(serial, 'workload: upper layer writable');
    assert.match(serial, 'sandbox-guest bootstrap: ready');
    assert.match(serial, 'workload: ready {"initialized":true}');
    assert.match(serial, 'workload: egress ok');
    assert.match(serial, /workload: execd \{"type":"stdout","text":"hello-from-host via execd\\n"/);
    assert.match(serial, 'sandbox-guest bootstrap: workload exited with 3');
    assert.match(serial, 'reboot: Power down');
    // The root image was mounted read-only: the workload's write went to the private upper layer.
    assert.is(createHash('sha256').update(readFileSync(image)).digest('hex'), imageHash);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
