/**
 * `sandboxd firmware build` through the real CLI, on a small kernel package built here with
 * dpkg-deb (stand-in modules carrying real `depends=` modinfo) and a hand-made vmlinux with a
 * PVH note: the library is complete, reproducible byte for byte, a no-op when up to date, and
 * refuses inputs the guest could not boot with (exit 2 naming the input).
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool } from '../../lib/testing/run-tool.js';
import type { FirmwareManifest } from '../images/firmware.js';
import { STATIC_GUEST_BINARY } from '../images/paths.js';

const base = mkdtempSync(join(tmpdir(), 'image-firmware-'));
const RELEASE = '9.9.9-1-cloud-amd64';
/** The guest's modules and their dependencies, as in Debian's cloud kernel. */
const MODULES: Record<string, string[]> = {
  virtio_ring: [],
  virtio: ['virtio_ring'],
  virtio_mmio: ['virtio', 'virtio_ring'],
  virtio_blk: ['virtio', 'virtio_ring'],
  failover: [],
  net_failover: ['failover'],
  virtio_net: ['net_failover', 'virtio', 'virtio_ring'],
  vsock: [],
  vmw_vsock_virtio_transport_common: ['vsock'],
  vmw_vsock_virtio_transport: ['vmw_vsock_virtio_transport_common', 'virtio', 'virtio_ring', 'vsock'],
  overlay: [],
};

/** A kernel package laid out as Debian's: boot/vmlinuz-*, lib/modules/<release>/kernel/.../*.ko. */
function kernelDeb(name: string, modules: Record<string, string[]>): string {
  const root = join(base, `pkg-${name}`);
  mkdirSync(join(root, 'DEBIAN'), { recursive: true });
  writeFileSync(
    join(root, 'DEBIAN', 'control'),
    `Package: linux-image-${RELEASE}\nVersion: 9.9.9-1\nArchitecture: amd64\nMaintainer: test <t@example.org>\nDescription: test kernel\n`,
  );
  mkdirSync(join(root, 'boot'));
  writeFileSync(join(root, 'boot', `vmlinuz-${RELEASE}`), `bzImage of ${name}`);
  for (const [module, depends] of Object.entries(modules)) {
    const dir = join(root, 'lib', 'modules', RELEASE, 'kernel', module.startsWith('virtio') ? 'drivers/virtio' : 'net');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, `${module}.ko`), Buffer.from(`\x7fELF...\0license=GPL\0depends=${depends.join(',')}\0name=${module}\0`, 'latin1'));
  }
  const deb = join(base, `${name}.deb`);
  execFileSync('dpkg-deb', ['--root-owner-group', '-Zgzip', '-b', root, deb], { stdio: 'ignore' });
  return deb;
}

/** An ELF64 header with one PT_NOTE holding Xen's XEN_ELFNOTE_PHYS32_ENTRY (or another note). */
function vmlinux(noteType: number): string {
  const note = Buffer.alloc(12 + 4 + 4);
  note.writeUInt32LE(4, 0);
  note.writeUInt32LE(4, 4);
  note.writeUInt32LE(noteType, 8);
  note.write('Xen\0', 12, 'latin1');
  note.writeUInt32LE(0x1000850, 16);
  const elf = Buffer.alloc(64 + 56);
  elf.write('\x7fELF', 0, 'latin1');
  elf[4] = 2;
  elf[5] = 1;
  elf.writeBigUInt64LE(64n, 32);
  elf.writeUInt16LE(56, 54);
  elf.writeUInt16LE(1, 56);
  elf.writeUInt32LE(4, 64);
  elf.writeBigUInt64LE(BigInt(elf.length), 64 + 8);
  elf.writeBigUInt64LE(BigInt(note.length), 64 + 32);
  const path = join(base, `vmlinux-${noteType}`);
  writeFileSync(path, Buffer.concat([elf, note]));
  return path;
}

let deb = '';
let pvhVmlinux = '';
let guest = '';

test.before(() => {
  if (!existsSync(STATIC_GUEST_BINARY)) {
    throw new Error(`static sandbox-guest missing at ${STATIC_GUEST_BINARY}; scripts/setup.sh builds it (build_guest_firmware)`);
  }
  guest = join(base, 'sandbox-guest');
  copyFileSync(STATIC_GUEST_BINARY, guest);
  chmodSync(guest, 0o755);
  deb = kernelDeb('good', MODULES);
  pvhVmlinux = vmlinux(18);
});
test.after(() => rmSync(base, { recursive: true, force: true }));

const build = (out: string, overrides: Record<string, string> = {}) => {
  const flags = { '--kernel-deb': deb, '--vmlinux': pvhVmlinux, '--guest-binary': guest, '--out': out, ...overrides };
  return runTool('sandboxd', ['firmware', 'build', ...Object.entries(flags).flat()]);
};

test('builds a complete library with a manifest of what went in', async () => {
  const out = join(base, 'fw-a');
  const r = await build(out);
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, `built (linux-image-${RELEASE} 9.9.9-1, 11 modules)`);
  assert.equal(readdirSync(out).sort(), ['bzImage', 'initramfs', 'manifest.json', 'sandbox-guest', 'vmlinux']);
  const m = JSON.parse(readFileSync(join(out, 'manifest.json'), 'utf8')) as FirmwareManifest;
  assert.equal(
    { ...m.kernel, sha256: m.kernel.sha256.length },
    { package: `linux-image-${RELEASE}`, version: '9.9.9-1', architecture: 'amd64', release: RELEASE, deb: 'good.deb', sha256: 64 },
  );
  assert.is(m.pvh_entry, '0x1000850');
  assert.equal(m.modules.map((x) => x.name), Object.keys(MODULES));
  assert.equal(m.modules.find((x) => x.name === 'virtio_net')?.depends, ['net_failover', 'virtio', 'virtio_ring']);
  assert.is(readFileSync(join(out, 'bzImage'), 'utf8'), 'bzImage of good');
  assert.ok(readFileSync(join(out, 'sandbox-guest')).equals(readFileSync(guest)));
  // The initramfs is a newc archive with the static binary as /init and the modules.
  const cpio = readFileSync(join(out, 'initramfs'));
  assert.is(cpio.subarray(0, 6).toString(), '070701');
  for (const name of ['init\0', 'dev/console\0', 'lib/modules/overlay.ko\0', 'lib/modules/vmw_vsock_virtio_transport.ko\0']) {
    assert.ok(cpio.includes(name), name);
  }
  assert.ok(cpio.includes(readFileSync(guest)), 'the static binary is /init');
});

test('reproducible: same inputs, same bytes; an up-to-date library is left alone', async () => {
  const [a, b] = [join(base, 'fw-a'), join(base, 'fw-b')];
  assert.is((await build(b)).code, 0);
  for (const f of ['initramfs', 'manifest.json']) assert.ok(readFileSync(join(a, f)).equals(readFileSync(join(b, f))), f);
  const again = await build(a);
  assert.is(again.code, 0, again.stderr);
  assert.match(again.stdout, 'up to date');
  // A changed input (another package) rebuilds in place.
  const other = kernelDeb('other', MODULES);
  const rebuilt = await build(a, { '--kernel-deb': other });
  assert.match(rebuilt.stdout, 'built');
  assert.is(readFileSync(join(a, 'bzImage'), 'utf8'), 'bzImage of other');
  assert.equal(readdirSync(base).filter((f) => f.includes('.tmp-') || f.includes('.old-')), []);
});

test('inputs the guest could not boot with exit 2 and name the input', async () => {
  const { overlay: _, ...noOverlay } = MODULES;
  const cases: Array<[Record<string, string>, string]> = [
    [{ '--kernel-deb': join(base, 'missing.deb') }, `--kernel-deb ${join(base, 'missing.deb')}: no such file`],
    [{ '--kernel-deb': guest }, `--kernel-deb ${guest}`],
    [{ '--vmlinux': vmlinux(5) }, '--vmlinux'],
    [{ '--vmlinux': join(base, 'good.deb') }, 'not a 64-bit little-endian ELF file'],
    [{ '--guest-binary': process.execPath }, `--guest-binary ${process.execPath}: dynamically linked`],
    [{ '--kernel-deb': kernelDeb('no-overlay', noOverlay) }, 'required modules not found in the package: overlay'],
    [{ '--kernel-deb': kernelDeb('extra-dep', { ...MODULES, overlay: ['exportfs'] }) }, 'module overlay depends on exportfs'],
  ];
  for (const [overrides, expected] of cases) {
    const out = join(base, 'fw-bad');
    const r = await build(out, overrides);
    assert.is(r.code, 2, `${JSON.stringify(overrides)}: ${r.stderr}`);
    assert.match(r.stderr, expected);
    assert.not.ok(existsSync(out), 'nothing half-built is left');
  }
});

test.run();
