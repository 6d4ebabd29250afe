/**
 * sandboxd's engine, the one module the command line imports. Constants and types are exported as
 * they are; each operation loads its implementation on first use, so that loading the tool (for
 * --help, or another command) costs nothing of it.
 */
import type { RootfsDisk, RootfsDiskOptions } from './images/disk.js';
import type { FirmwareInputs, FirmwareResult } from './images/firmware.js';
import type { PrepareImageOptions, PreparedImage } from './images/prepare.js';

export { DEFAULT_FIRMWARE_DIR, STATIC_GUEST_BINARY } from './images/paths.js';
export { SERVE_DEFAULTS, defaultStateDir, publicAuthority } from './listen.js';
export type { ServeOptions } from './options.js';
export type { PathInput } from './path-input.js';
export type { RunningDaemon, RuntimeParts } from './daemon.js';
export type { SupervisorLauncher, ImageManifest, BootFiles } from './runtime/launcher.js';
export type { Preflight } from './preflight.js';
import type { Logger } from '../lib/log.js';
import type { RunningDaemon, RuntimeParts } from './daemon.js';
import type { ServeOptions } from './options.js';

/** The protocol profile `sandboxd protocol` prints. */
export const PROTOCOL_PROFILE = 'OpenSandbox lifecycle 1.1.0 (partial profile: /v1 classic routes, endpoints 44772 and 18080, server proxy)';

/** Starts the daemon with the given runtime parts (tests: the test supervisor and its preflight). */
export async function startDaemon(options: ServeOptions, parts: RuntimeParts, log: Logger): Promise<RunningDaemon> {
  return (await import('./daemon.js')).startDaemon(options, parts, log);
}

/** The product's runtime parts: the VMM as each sandbox's supervisor, the full preflight. */
export async function productRuntime(): Promise<RuntimeParts> {
  const { vmmLauncher, DEFAULT_VMM } = await import('./runtime/vmm-launcher.js');
  const { productPreflight } = await import('./preflight.js');
  return { launcher: vmmLauncher(DEFAULT_VMM), preflight: productPreflight(DEFAULT_VMM) };
}
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
