/**
 * The native runtime: one supervisor process per sandbox, in the sandbox's own cgroup, driven over
 * its `control.sock`, its services reached over its hybrid vsock socket. Absence is only ever
 * concluded from proof (another boot, or the bound cgroup empty); lost IPC is uncertainty.
 */
import { existsSync, lstatSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { writeFileDurably } from '../../lib/durable.js';
import { InvalidInputError } from '../../lib/errors.js';
import type { CgroupBinding, SandboxRecord } from '../store/record.js';
import { cgroupStatus, createCgroup, killCgroup, populated, removeCgroup } from './cgroup.js';
import { controlRequest } from './control-client.js';
import { listenGuestControl } from './guest-control.js';
import { launchSupervisor, type ImageManifest, type SupervisorLauncher } from './launcher.js';
import { checkReadiness } from './readiness.js';
import { connectGuestPort, GUEST_CONTROL_PORT } from './vsock.js';

/** What the runtime can prove about a sandbox. `unknown`: no proof either way. */
export type NativeState = 'running' | 'paused' | 'stopped' | 'missing' | 'unknown';

const GUEST_READY_TIMEOUT_MS = 90_000;
const CLEANUP_WAIT_MS = 10_000;
const MIB = 1024 * 1024;

export class NativeRuntime {
  constructor(
    private readonly stateDir: string,
    private readonly cgroupRoot: string,
    private readonly launcher: SupervisorLauncher,
  ) {}

  sandboxDir(id: string): string {
    return join(this.stateDir, 'run', id);
  }

  private controlPath(id: string): string {
    return join(this.sandboxDir(id), 'control.sock');
  }

  vsockPath(id: string): string {
    return join(this.sandboxDir(id), 'vsock.sock');
  }

  cgroupPath(id: string): string {
    return join(this.cgroupRoot, `sandboxd-${id}`);
  }

  /**
   * Refuses a `run/` (or a sandbox's directory in it) that is not a real directory of the state
   * directory: through a symbolic link, sockets would be made and directories removed elsewhere.
   */
  checkRunDirectory(): void {
    const run = join(this.stateDir, 'run');
    const refuse = (path: string): never => {
      throw new InvalidInputError(`${path}: not a directory but a symbolic link or a file; the daemon keeps its sandboxes' files only inside the state directory`);
    };
    const st = lstatSync(run, { throwIfNoEntry: false });
    if (!st) return;
    if (!st.isDirectory()) refuse(run);
    for (const id of readdirSync(run)) if (!lstatSync(join(run, id)).isDirectory()) refuse(join(run, id));
  }

  /** Makes the sandbox's directory and cgroup; the caller persists the binding before `start`. */
  prepare(record: SandboxRecord): CgroupBinding {
    mkdirSync(join(this.stateDir, 'run'), { recursive: true, mode: 0o700 });
    mkdirSync(this.sandboxDir(record.id), { mode: 0o700 });
    return createCgroup(this.cgroupPath(record.id), { cpuMillis: record.cpuMillis, memoryBytes: record.memoryBytes }, this.launcher.cgroupLimits);
  }

  /** Starts the supervisor, configures the guest and waits until its services are ready. */
  async start(record: SandboxRecord, image: ImageManifest): Promise<void> {
    if (!record.cgroup) throw new Error(`sandbox ${record.id} has no cgroup binding`);
    const dir = this.sandboxDir(record.id);
    const vsockPath = this.vsockPath(record.id);
    const workload = record.entrypoint.length > 0 ? record.entrypoint : (image.cmd ?? []);
    const control = await listenGuestControl(`${vsockPath}_${GUEST_CONTROL_PORT}`, {
      env: { ...(image.env ?? {}), ...record.env },
      execdToken: record.execdToken,
      egressToken: record.egressToken,
    });
    try {
      await launchSupervisor(this.launcher, {
        dir,
        vsockPath,
        cgroup: record.cgroup,
        vcpus: Math.min(8, Math.max(1, Math.ceil(record.cpuMillis / 1000))),
        memoryMib: Math.max(16, Math.floor(record.memoryBytes / MIB)),
        argv: [...image.entrypoint, ...workload],
        boot: await this.launcher.bootFiles(image, this.stateDir),
      });
      await control.ready(GUEST_READY_TIMEOUT_MS);
      await checkReadiness(vsockPath);
    } finally {
      control.close();
    }
  }

  async inspect(record: SandboxRecord): Promise<NativeState> {
    if (!record.cgroup) {
      // Made but never bound (a crash between mkdir and the record's write): the supervisor is only
      // ever started after the binding is durable, so an unbound cgroup with no process proves absence.
      const path = this.cgroupPath(record.id);
      return existsSync(path) && populated(path) ? 'unknown' : 'missing';
    }
    const status = cgroupStatus(record.cgroup);
    if (status === 'other-boot') return 'missing';
    if (status !== 'same') return 'unknown';
    try {
      const answer = await controlRequest(this.controlPath(record.id), 'inspect', 5_000);
      if (answer.ok && (answer.state === 'running' || answer.state === 'paused' || answer.state === 'stopped')) return answer.state;
    } catch {
      // fall through to the cgroup's evidence
    }
    return populated(record.cgroup.path) ? 'unknown' : 'missing';
  }

  /** Pauses or resumes; resolves only with the confirmed state asked for. */
  async control(record: SandboxRecord, op: 'pause' | 'resume'): Promise<void> {
    const want = op === 'pause' ? 'paused' : 'running';
    const answer = await controlRequest(this.controlPath(record.id), op, 15_000);
    if (!answer.ok || answer.state !== want) {
      throw new Error(`${op} not confirmed: state ${answer.state}${answer.error ? ` (${answer.error.message})` : ''}`);
    }
    if (op === 'resume') await checkReadiness(this.vsockPath(record.id));
  }

  connect(id: string, port: number): Promise<Socket> {
    return connectGuestPort(this.vsockPath(id), port);
  }

  /**
   * Stops the sandbox and removes everything of it but its directory's tombstone; true only when
   * that is confirmed: the bound cgroup empty and removed (or the sandbox from another boot). A
   * tombstone written before the cgroup goes lets a retry after a crash finish without it, so it
   * stays until the record is gone (the caller then calls `removeDir`, or maintenance removes the
   * stray directory): removed before, a crash ahead of the record's removal left a record whose
   * cgroup was gone without proof, which no deletion could finish.
   */
  async destroy(record: SandboxRecord): Promise<boolean> {
    const dir = this.sandboxDir(record.id);
    const tombstone = join(dir, 'tombstone.json');
    if (existsSync(this.controlPath(record.id))) await controlRequest(this.controlPath(record.id), 'terminate', 5_000).catch(() => undefined);
    const binding = record.cgroup;
    if (binding) {
      const status = cgroupStatus(binding);
      if (status === 'same') {
        const deadline = Date.now() + CLEANUP_WAIT_MS;
        while (populated(binding.path)) {
          if (Date.now() > deadline) return false;
          killCgroup(binding);
          await sleep(50);
        }
        // Its presence is the proof; empty, it takes no data block, so cleanup works on a full disk too.
        if (existsSync(dir)) writeFileDurably(tombstone, '', { mode: 0o600 });
        removeCgroup(binding.path);
      } else if ((status === 'gone' || status === 'replaced') && !existsSync(tombstone)) {
        return false;
      }
    } else if (existsSync(this.cgroupPath(record.id))) {
      // Made but never bound (a crash between mkdir and the record's write): nothing ran in it.
      removeCgroup(this.cgroupPath(record.id));
    }
    this.clearDir(record.id, tombstone);
    return true;
  }

  /** Removes what the sandbox's directory holds (sockets, logs, the guest's runtime files) but `keep`. */
  private clearDir(id: string, keep: string): void {
    const dir = this.sandboxDir(id);
    if (!existsSync(dir)) return;
    for (const name of readdirSync(dir)) if (join(dir, name) !== keep) rmSync(join(dir, name), { recursive: true, force: true });
  }

  /** Removes a sandbox's private directory, its tombstone included: once its record is gone. */
  removeDir(id: string): void {
    rmSync(this.sandboxDir(id), { recursive: true, force: true });
  }

  /** Directories of sandboxes the registry no longer has, left by a crash after the record went. */
  strayDirs(known: Set<string>): string[] {
    const run = join(this.stateDir, 'run');
    if (!existsSync(run)) return [];
    return readdirSync(run).filter((id) => !known.has(id) && existsSync(join(run, id, 'tombstone.json')));
  }
}
