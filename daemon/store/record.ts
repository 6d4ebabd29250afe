/** What the daemon remembers of one sandbox: the registry's unit, one private file per sandbox. */

/** Lifecycle states the API reports (the protocol's open SandboxState enumeration). */
export type SandboxState = 'Pending' | 'Running' | 'Pausing' | 'Paused' | 'Resuming' | 'Stopping' | 'Terminated' | 'Failed';

/** Where the sandbox's processes live: bound to the cgroup directory's device and inode and to the boot. */
export interface CgroupBinding {
  path: string;
  device: string;
  inode: string;
  bootId: string;
}

/** A status message is cut to this many characters: what a record may grow by after admission stays bounded (registry.ts). */
export const MAX_MESSAGE_CHARS = 1024;

export interface SandboxRecord {
  id: string;
  state: SandboxState;
  message?: string;
  lastTransitionAt: string;
  createdAt: string;
  /** Absent: manual cleanup. */
  expiresAt?: string;
  image: string;
  /** The requested workload argv (appended to the image's entrypoint). */
  entrypoint: string[];
  env: Record<string, string>;
  metadata: Record<string, string>;
  cpuMillis: number;
  memoryBytes: number;
  /** The data-plane token of this sandbox's proxy (X-SVC-SANDBOX-TOKEN). */
  token: string;
  /** The guest services' own access tokens, handed to the bootstrap and to endpoint callers. */
  execdToken: string;
  egressToken: string;
  /** Durable deletion intent: once set it is never cleared by a native observation. */
  deleting?: boolean;
  /** Set, durably, before any process of the sandbox exists. */
  cgroup?: CgroupBinding;
}
