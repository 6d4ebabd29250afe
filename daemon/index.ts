/**
 * sandboxd's engine, the one module the command line imports. Constants and types are exported as
 * they are; each operation loads its implementation on first use, so that loading the tool (for
 * --help, or another command) costs nothing of it.
 */
import type { RootfsDisk, RootfsDiskOptions } from './images/disk.js';
import type { FirmwareInputs, FirmwareResult } from './images/firmware.js';
import type { PrepareImageOptions, PreparedImage } from './images/prepare.js';

export { DEFAULT_FIRMWARE_DIR, STATIC_GUEST_BINARY } from './images/paths.js';
export type { RootfsDisk, RootfsDiskOptions } from './images/disk.js';
export type { FirmwareInputs, FirmwareManifest, FirmwareResult } from './images/firmware.js';
export type { PrepareImageOptions, PreparedImage } from './images/prepare.js';

/** Makes a root filesystem directory a prepared image: installs the guest bootstrap, writes its manifest. */
export async function prepareImage(options: PrepareImageOptions): Promise<PreparedImage> {
  return (await import('./images/prepare.js')).prepareImage(options);
}

/** Builds the guest firmware library from a kernel package; a no-op when it is up to date. */
export async function buildFirmware(inputs: FirmwareInputs): Promise<FirmwareResult> {
  return (await import('./images/firmware.js')).buildFirmware(inputs);
}

/** The read-only ext4 root disk of a prepared image's rootfs, from the content-keyed cache or built into it. */
export async function rootfsDisk(options: RootfsDiskOptions): Promise<RootfsDisk> {
  return (await import('./images/disk.js')).rootfsDisk(options);
}
