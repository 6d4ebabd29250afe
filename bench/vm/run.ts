/**
 * sandbox-vmm benchmark: builds and runs the Rust example `vm_bench` (bench/vm/vm_bench.rs),
 * which measures the KVM exit round trip, confirmed pause/resume latency with 1 and 2 vCPUs
 * (in process and through control.sock), VM create-to-first-serial-byte, vsock echo through the
 * hybrid socket and virtio-blk reads, each beside a baseline measured in the same run.
 *
 *   node dist/bench/vm/run.js                       tiny guests; any host with a usable /dev/kvm
 *   node dist/bench/vm/run.js virtio [--vsock-mib N] [--blk-mib N]    only the device figures
 *   node dist/bench/vm/run.js boot --kernel PATH [--initrd PATH] [--cmdline TEXT] [--until TEXT]
 *       [--disk PATH] [--vsock-echo PORT] [--blk-start TEXT --blk-end TEXT]
 *                                                   a real guest's boot time, its vsock echo figures
 *                                                   and its disk reads between two console marks
 *                                                   (hardware-virtualized hosts)
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const workspace = join(fileURLToPath(import.meta.url), '..', '..', '..', '..', 'vmm-rs');
const build = spawnSync('cargo', ['build', '--release', '--quiet', '-p', 'sandbox-vmm', '--example', 'vm_bench'], {
  cwd: workspace,
  stdio: 'inherit',
});
if (build.status !== 0) process.exit(build.status ?? 1);
const run = spawnSync(join(workspace, 'target', 'release', 'examples', 'vm_bench'), process.argv.slice(2), { stdio: 'inherit' });
process.exit(run.status ?? 1);
