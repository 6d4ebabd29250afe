/** The launcher of the test supervisor (main.ts): what tests and the harness inject into the daemon. */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { SupervisorLauncher } from '../../index.js';

const MAIN = join(fileURLToPath(new URL('.', import.meta.url)), 'main.js');

export const testSupervisorLauncher: SupervisorLauncher = {
  command: [process.execPath, MAIN],
  // This project's hosts have no cpu/memory/pids controllers in cgroup v2 (ARCHITECTURE.md).
  cgroupLimits: 'where-available',
  // No VM boots: the kernel path only fills the start frame's field; no disk is built.
  bootFiles: async (image) => ({ kernel: join(image.library_dir ?? image.rootfs, 'vmlinux'), disks: [] }),
};
