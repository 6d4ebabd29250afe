/** The product's launcher: `sandbox-vmm` with the image's firmware, its cached root disk and passt. */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { installation } from '../../lib/install.js';
import { rootfsDisk } from '../images/disk.js';
import { FIRMWARE_FILES } from '../images/paths.js';
import type { SupervisorLauncher } from './launcher.js';

export const DEFAULT_VMM = join(installation().root, 'vmm-rs', 'target', 'release', 'sandbox-vmm');
const PASST = '/usr/bin/passt';

export function vmmLauncher(vmm: string): SupervisorLauncher {
  return {
    command: [vmm],
    cgroupLimits: 'required',
    async bootFiles(image, stateDir) {
      if (!image.library_dir) throw new Error('the image names no firmware library_dir');
      const disk = await rootfsDisk({ rootfs: image.rootfs, cacheDir: join(stateDir, 'disks') });
      return {
        kernel: join(image.library_dir, FIRMWARE_FILES.vmlinux),
        initrd: join(image.library_dir, FIRMWARE_FILES.initramfs),
        disks: [{ path: disk.path, read_only: true }],
        ...(existsSync(PASST) ? { net: { passt: PASST } } : {}),
      };
    },
  };
}
