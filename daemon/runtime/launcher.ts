/**
 * How a sandbox's supervisor process is started: the VMM in the product, the process-backed test
 * supervisor in tests. Both get the same start frame on stdin (secrets never in argv or the
 * environment), answer with the same ready frame on stdout, and then serve the same
 * `control.sock` and hybrid vsock contracts; the daemon cannot tell them apart.
 */
import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { join } from 'node:path';
import { encodeFrame, FrameDecoder } from '../framing.js';
import type { ImageManifest } from '../images/manifest.js';
import type { CgroupBinding } from '../store/record.js';

export type { ImageManifest };

/** What one sandbox's boot needs, from its image. */
export interface BootFiles {
  kernel: string;
  initrd?: string;
  disks: { path: string; read_only: boolean }[];
  net?: { passt: string };
}

export interface SupervisorLauncher {
  /** The supervisor's argv (no secrets). */
  command: string[];
  /** Whether every cgroup limit file must exist (product) or only those present are written (test). */
  cgroupLimits: 'required' | 'where-available';
  bootFiles(image: ImageManifest, stateDir: string): Promise<BootFiles>;
}

export interface LaunchSpec {
  dir: string;
  vsockPath: string;
  cgroup: CgroupBinding;
  vcpus: number;
  memoryMib: number;
  /** The guest argv: the image entrypoint followed by the workload. */
  argv: string[];
  boot: BootFiles;
}

export const READY_TIMEOUT_MS = 60_000;

/** The kernel command line that tells the guest init what to run. */
export function guestCmdline(argv: string[]): string {
  const exec = Buffer.from(JSON.stringify(argv)).toString('base64url');
  return `console=ttyS0 reboot=k panic=-1 sandbox.root=/dev/vda sandbox.rootfstype=ext4 sandbox.exec=${exec}`;
}

/**
 * Starts the supervisor detached (it outlives the daemon), writes the start frame and waits for
 * the ready frame. Its diagnostics go to `<dir>/supervisor.log`.
 */
export async function launchSupervisor(launcher: SupervisorLauncher, spec: LaunchSpec): Promise<{ pid: number }> {
  const frame = {
    kernel: spec.boot.kernel,
    ...(spec.boot.initrd ? { initrd: spec.boot.initrd } : {}),
    cmdline: guestCmdline(spec.argv),
    vcpus: spec.vcpus,
    memory_mib: spec.memoryMib,
    disks: spec.boot.disks,
    ...(spec.boot.net ? { net: spec.boot.net } : {}),
    vsock_socket: spec.vsockPath,
    state_dir: spec.dir,
    cgroup: { path: spec.cgroup.path, device: Number(spec.cgroup.device), inode: Number(spec.cgroup.inode) },
  };
  const log = openSync(join(spec.dir, 'supervisor.log'), 'a', 0o600);
  const [exe, ...args] = launcher.command;
  const child = spawn(exe!, args, { detached: true, stdio: ['pipe', 'pipe', log], env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' }, cwd: spec.dir });
  closeSync(log);
  child.stdin!.on('error', () => undefined);
  child.stdin!.end(encodeFrame(frame));
  try {
    const answer = await new Promise<Record<string, unknown>>((resolve, reject) => {
      const decoder = new FrameDecoder();
      const timer = setTimeout(() => reject(new Error(`supervisor not ready within ${READY_TIMEOUT_MS} ms`)), READY_TIMEOUT_MS);
      child.stdout!.on('data', (chunk: Buffer) => {
        try {
          decoder.push(chunk);
          const next = decoder.next();
          if (next) {
            clearTimeout(timer);
            resolve(next.value as Record<string, unknown>);
          }
        } catch (error) {
          clearTimeout(timer);
          reject(error as Error);
        }
      });
      child.once('error', (error) => (clearTimeout(timer), reject(error)));
      child.once('exit', (code) => (clearTimeout(timer), reject(new Error(`supervisor exited (${code}) before it was ready`))));
    });
    if (answer.ok !== true) {
      const error = answer.error as { message?: string } | undefined;
      throw new Error(`supervisor refused to start: ${error?.message ?? JSON.stringify(answer)}`);
    }
    return { pid: child.pid! };
  } finally {
    // The supervisor lives on without us: its later frames go nowhere, it is never reaped by pid.
    child.stdout!.destroy();
    child.removeAllListeners('exit');
    child.unref();
  }
}
