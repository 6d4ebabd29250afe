/**
 * What the daemon remembers of one sandbox: the registry's unit, one private file per sandbox. The
 * schema is the type and the check a record read back from disk must pass: a record damaged by hand
 * or by the disk (a reservation that is not a number, a token missing) would otherwise be admitted
 * as a sandbox whose capacity counts as NaN and that no deletion can clean up.
 */
import { type Static, Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';

/** Lifecycle states the API reports (the protocol's open SandboxState enumeration). */
const STATES = ['Pending', 'Running', 'Pausing', 'Paused', 'Resuming', 'Stopping', 'Terminated', 'Failed'] as const;
const SandboxState = Type.Union(STATES.map((state) => Type.Literal(state)));
export type SandboxState = (typeof STATES)[number];

/** Where the sandbox's processes live: bound to the cgroup directory's device and inode and to the boot. */
const CgroupBinding = Type.Object({
  path: Type.String({ pattern: '^/' }),
  device: Type.String({ pattern: '^[0-9]+$' }),
  inode: Type.String({ pattern: '^[0-9]+$' }),
  bootId: Type.String({ minLength: 1 }),
});
export type CgroupBinding = Static<typeof CgroupBinding>;

/** A status message is cut to this many characters: what a record may grow by after admission stays bounded (registry.ts). */
export const MAX_MESSAGE_CHARS = 1024;

const Secret = Type.String({ minLength: 1 });
const StringMap = Type.Record(Type.String(), Type.String());

const SandboxRecordSchema = Type.Object({
  id: Type.String({ pattern: '^sb-[0-9a-f-]{36}$' }),
  state: SandboxState,
  message: Type.Optional(Type.String()),
  lastTransitionAt: Type.String(),
  createdAt: Type.String(),
  /** Absent: manual cleanup. */
  expiresAt: Type.Optional(Type.String()),
  image: Type.String(),
  /** The requested workload argv (appended to the image's entrypoint). */
  entrypoint: Type.Array(Type.String()),
  env: StringMap,
  metadata: StringMap,
  /** Hard reservations, counted against admission until cleanup is confirmed. */
  cpuMillis: Type.Integer({ minimum: 1 }),
  memoryBytes: Type.Integer({ minimum: 1 }),
  /** The data-plane token of this sandbox's proxy (X-SVC-SANDBOX-TOKEN). */
  token: Secret,
  /** The guest services' own access tokens, handed to the bootstrap and to endpoint callers. */
  execdToken: Secret,
  egressToken: Secret,
  /** Durable deletion intent: once set it is never cleared by a native observation. */
  deleting: Type.Optional(Type.Boolean()),
  /** Set, durably, before any process of the sandbox exists. */
  cgroup: Type.Optional(CgroupBinding),
});
export type SandboxRecord = Static<typeof SandboxRecordSchema>;

/** A record file's content: the record wrapped with the registry's owner. */
const RecordFile = Type.Object({ owner: Type.String(), record: SandboxRecordSchema });
export type RecordFile = Static<typeof RecordFile>;

const check = TypeCompiler.Compile(RecordFile);

/** What makes `value` not a record file (`/record/cpuMillis: Expected integer`), or undefined. */
export function recordFileProblem(value: unknown): string | undefined {
  const problem = check.Errors(value).First();
  return problem && `${problem.path || '/'}: ${problem.message}`;
}
