/**
 * The guest firmware library (`library_dir` of a prepared image): built at set-up from the
 * Debian cloud kernel package that `scripts/setup.sh` downloads, never committed.
 *
 *   vmlinux        the ELF kernel with its PVH note (cut from the bzImage by set-up)
 *   bzImage        the package's boot/vmlinuz-* as shipped
 *   initramfs      newc cpio: the static sandbox-guest as /init plus the guest's modules,
 *                  written by `sandbox-guest initramfs` (fixed order, owner 0, mtime 0)
 *   sandbox-guest  the same static binary, installed into images by `sandboxd image prepare`
 *   manifest.json  what went in: package name, version and sha256, modules, file hashes
 *
 * The build is a pure function of its three inputs (package, vmlinux, binary): the same
 * inputs give byte-identical outputs, and a library already built from them is left alone.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { copyFile, mkdir, readFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';
import { InvalidInputError, UnavailableError } from '../../lib/errors.js';
import { elfFacts } from './elf.js';
import { FIRMWARE_FILES } from './paths.js';
import { fsyncPath, replaceDirectory, writeFileDurably } from '../../lib/durable.js';

const run = promisify(execFile);

/** Bumped when the layout or the manifest changes, so older libraries get rebuilt. */
const FORMAT = 1;

/** The devices the VMM gives a guest (virtio-mmio transport, block, net, vsock) and the overlay root. */
export const REQUIRED_MODULES = ['virtio_mmio', 'virtio_blk', 'virtio_net', 'vsock', 'vmw_vsock_virtio_transport', 'overlay'];

export interface FirmwareInputs {
  /** The linux-image-*-cloud-amd64 .deb. */
  kernelDeb: string;
  /** The ELF vmlinux cut from that package's bzImage. */
  vmlinux: string;
  /** A statically linked sandbox-guest. */
  guestBinary: string;
  /** The library directory to (re)build. */
  out: string;
}

export interface FileEntry {
  sha256: string;
  size: number;
}

export interface ModuleEntry extends FileEntry {
  name: string;
  /** Path inside the initramfs. */
  file: string;
  depends: string[];
}

export interface FirmwareManifest {
  format: number;
  kernel: { package: string; version: string; architecture: string; release: string; deb: string; sha256: string };
  /** Hex PVH entry of vmlinux (Xen note XEN_ELFNOTE_PHYS32_ENTRY). */
  pvh_entry: string;
  files: Record<(typeof FIRMWARE_FILES)[Exclude<keyof typeof FIRMWARE_FILES, 'manifest'>], FileEntry>;
  modules: ModuleEntry[];
}

export interface FirmwareResult {
  built: boolean;
  dir: string;
  manifest: FirmwareManifest;
}

async function fileEntry(path: string): Promise<FileEntry> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return { sha256: hash.digest('hex'), size: statSync(path).size };
}

function requireFile(flag: string, path: string): void {
  if (!existsSync(path) || !statSync(path).isFile()) throw new InvalidInputError(`${flag} ${path}: no such file`);
}

async function tool(cmd: string, args: string[], what: string): Promise<string> {
  try {
    return (await run(cmd, args, { maxBuffer: 16 << 20 })).stdout;
  } catch (error) {
    const e = error as NodeJS.ErrnoException & { stderr?: string };
    if (e.code === 'ENOENT') throw new UnavailableError(`${what}: ${cmd} is not installed`);
    throw new InvalidInputError(`${what}: ${(e.stderr ?? e.message).trim()}`);
  }
}

/** `depends=` of a module's .modinfo section: the modules the kernel needs loaded before it. */
export function moduleDepends(ko: Buffer): string[] {
  const at = ko.indexOf('\0depends=');
  if (at < 0) return [];
  const end = ko.indexOf(0, at + 1);
  const list = ko.subarray(at + '\0depends='.length, end).toString('latin1');
  return list.split(',').filter(Boolean).map((m) => m.replace(/-/g, '_'));
}

/** The library at `dir` when it was built from exactly these inputs and is complete. */
function upToDate(dir: string, deb: FileEntry, vmlinux: FileEntry, guest: FileEntry): FirmwareManifest | undefined {
  try {
    const m = JSON.parse(readFileSync(join(dir, FIRMWARE_FILES.manifest), 'utf8')) as FirmwareManifest;
    const same =
      m.format === FORMAT &&
      m.kernel.sha256 === deb.sha256 &&
      m.files.vmlinux.sha256 === vmlinux.sha256 &&
      m.files['sandbox-guest'].sha256 === guest.sha256 &&
      Object.entries(m.files).every(([name, f]) => existsSync(join(dir, name)) && statSync(join(dir, name)).size === f.size);
    return same ? m : undefined;
  } catch {
    return undefined;
  }
}

export async function buildFirmware(inputs: FirmwareInputs): Promise<FirmwareResult> {
  requireFile('--kernel-deb', inputs.kernelDeb);
  requireFile('--vmlinux', inputs.vmlinux);
  requireFile('--guest-binary', inputs.guestBinary);
  const [debHash, vmlinuxHash, guestHash] = await Promise.all([inputs.kernelDeb, inputs.vmlinux, inputs.guestBinary].map(fileEntry));
  const current = upToDate(inputs.out, debHash!, vmlinuxHash!, guestHash!);
  if (current) return { built: false, dir: inputs.out, manifest: current };

  const facts = (flag: string, path: string): ReturnType<typeof elfFacts> => {
    try {
      return elfFacts(path);
    } catch (error) {
      throw new InvalidInputError(`${flag} ${(error as Error).message}`);
    }
  };
  const pvh = facts('--vmlinux', inputs.vmlinux).pvhEntry;
  if (pvh === undefined) throw new InvalidInputError(`--vmlinux ${inputs.vmlinux}: no PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY); not a vmlinux cut from an x86 bzImage?`);
  if (facts('--guest-binary', inputs.guestBinary).dynamic) {
    throw new InvalidInputError(`--guest-binary ${inputs.guestBinary}: dynamically linked; the initramfs has no C library`, {
      hint: 'RUSTFLAGS="-C target-feature=+crt-static" cargo build --release -p sandbox-guest --target x86_64-unknown-linux-gnu',
    });
  }
  const fields = await tool('dpkg-deb', ['-f', inputs.kernelDeb, 'Package', 'Version', 'Architecture'], `--kernel-deb ${inputs.kernelDeb}`);
  const field = (name: string): string => new RegExp(`^${name}: (.+)$`, 'm').exec(fields)?.[1] ?? '';
  if (!field('Package').startsWith('linux-image-')) {
    throw new InvalidInputError(`--kernel-deb ${inputs.kernelDeb}: package '${field('Package')}' is not a linux-image package`);
  }

  // Built next to the target and swapped in whole: a crash leaves the old library or the new one.
  const tmp = `${inputs.out}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  const unpacked = join(tmp, '.unpacked');
  await mkdir(unpacked, { recursive: true });
  try {
    await tool(
      'sh',
      ['-c', 'dpkg-deb --fsys-tarfile "$1" | tar -x -C "$2" --wildcards "./boot/vmlinuz-*" "./lib/modules/*"', 'sh', inputs.kernelDeb, unpacked],
      `--kernel-deb ${inputs.kernelDeb}`,
    );
    const images = existsSync(join(unpacked, 'boot')) ? readdirSync(join(unpacked, 'boot')).filter((f) => f.startsWith('vmlinuz-')) : [];
    if (images.length !== 1) throw new InvalidInputError(`--kernel-deb ${inputs.kernelDeb}: expected one boot/vmlinuz-*, found ${images.length}`);
    const release = images[0]!.slice('vmlinuz-'.length);
    const modulesDir = join(unpacked, 'lib', 'modules', release);
    if (!existsSync(modulesDir)) throw new InvalidInputError(`--kernel-deb ${inputs.kernelDeb}: no lib/modules/${release}`);

    const listing = join(unpacked, 'initramfs.json');
    await tool(
      inputs.guestBinary,
      ['initramfs', '--modules-dir', modulesDir, '--init-binary', inputs.guestBinary, '--out', join(tmp, FIRMWARE_FILES.initramfs), '--manifest', listing],
      'sandbox-guest initramfs',
    );
    const packed = JSON.parse(await readFile(listing, 'utf8')) as { modules: Array<{ name: string; file: string; source: string }> };
    const modules: ModuleEntry[] = [];
    for (const m of packed.modules) {
      modules.push({ name: m.name, file: m.file, depends: moduleDepends(await readFile(m.source)), ...(await fileEntry(m.source)) });
    }
    checkModules(modules, release);

    await copyFile(inputs.vmlinux, join(tmp, FIRMWARE_FILES.vmlinux));
    await copyFile(join(unpacked, 'boot', images[0]!), join(tmp, FIRMWARE_FILES.bzImage));
    await copyFile(inputs.guestBinary, join(tmp, FIRMWARE_FILES.guest));
    rmSync(unpacked, { recursive: true, force: true });
    const manifest: FirmwareManifest = {
      format: FORMAT,
      kernel: {
        package: field('Package'),
        version: field('Version'),
        architecture: field('Architecture'),
        release,
        deb: basename(inputs.kernelDeb),
        sha256: debHash!.sha256,
      },
      pvh_entry: `0x${pvh.toString(16)}`,
      files: {
        vmlinux: vmlinuxHash!,
        bzImage: await fileEntry(join(tmp, FIRMWARE_FILES.bzImage)),
        initramfs: await fileEntry(join(tmp, FIRMWARE_FILES.initramfs)),
        'sandbox-guest': guestHash!,
      },
      modules,
    };
    for (const name of [FIRMWARE_FILES.vmlinux, FIRMWARE_FILES.bzImage, FIRMWARE_FILES.initramfs, FIRMWARE_FILES.guest]) fsyncPath(join(tmp, name));
    writeFileDurably(join(tmp, FIRMWARE_FILES.manifest), `${JSON.stringify(manifest, null, 2)}\n`);
    replaceDirectory(tmp, inputs.out);
    return { built: true, dir: inputs.out, manifest };
  } catch (error) {
    rmSync(tmp, { recursive: true, force: true });
    throw error;
  }
}

/** Every required device module is packed, and so is every module a packed one depends on (init loads only what is packed). */
function checkModules(modules: ModuleEntry[], release: string): void {
  const packed = new Set(modules.map((m) => m.name));
  const missing = REQUIRED_MODULES.filter((m) => !packed.has(m));
  if (missing.length) throw new InvalidInputError(`kernel ${release}: required modules not found in the package: ${missing.join(', ')}`);
  for (const m of modules) {
    const unmet = m.depends.filter((d) => !packed.has(d));
    if (unmet.length) throw new InvalidInputError(`kernel ${release}: module ${m.name} depends on ${unmet.join(', ')}, which the initramfs does not pack`);
  }
}
