/** Where set-up leaves the guest firmware (gitignored build output, never committed). */
import { join } from 'node:path';
import { installation } from '../../lib/install.js';

const REPO_ROOT = installation().root;

/** The firmware library directory `scripts/setup.sh` builds: the default `library_dir`. */
export const DEFAULT_FIRMWARE_DIR = join(REPO_ROOT, 'vmm-rs', 'target', 'firmware');

/** The statically linked sandbox-guest `scripts/setup.sh` builds (its own target dir). */
export const STATIC_GUEST_BINARY = join(REPO_ROOT, 'vmm-rs', 'target', 'static', 'x86_64-unknown-linux-gnu', 'release', 'sandbox-guest');

/** Names of the files inside a firmware library directory. */
export const FIRMWARE_FILES = {
  vmlinux: 'vmlinux',
  bzImage: 'bzImage',
  initramfs: 'initramfs',
  guest: 'sandbox-guest',
  manifest: 'manifest.json',
} as const;
