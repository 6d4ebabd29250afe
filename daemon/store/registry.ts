/**
 * The durable registry (format version 2) in the state directory:
 *
 *   owner.json             the owner marker, a UUID as a JSON string; never fabricated except for a
 *                          fresh registry or an empty version-1 one
 *   sandboxes.json         header `{version: 2, owner, sandboxes: {}}` (version 1 held every record)
 *   records/meta.json      `{version: 2, owner}`
 *   records/<id>.json      `{owner, record}`, mode 0600, one per sandbox
 *
 * Every write goes to a temporary name, is fsynced, renamed into place and the directory fsynced,
 * so a crash leaves the old record or the new one. A version-1 registry migrates by building the
 * records directory under a temporary name, renaming it into place and only then swapping the
 * header: until the swap the version-1 file is the truth and the copy is disposable.
 *
 * The aggregate logical size (what the records would take in one version-1 file) is capped at
 * 16 MiB; a write beyond it is refused before anything changes. A new record is admitted only
 * while every record keeps RECORD_HEADROOM_BYTES below the cap, room for what the lifecycle adds
 * to it later (cgroup binding, a status message, the deletion intent): a registry filled by
 * admission must never refuse the deletion that would empty it.
 */
import { randomUUID } from 'node:crypto';
import { closeSync, constants, fstatSync, lstatSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { fsyncPath, hiddenTempSiblingOf, replaceDirectory, tempTargetOf, writeFileDurably } from '../../lib/durable.js';
import { InvalidInputError, ResourceLimitError } from '../../lib/errors.js';
import { recordFileProblem, type RecordFile, type SandboxRecord } from './record.js';

export const REGISTRY_VERSION = 2;
export const LOGICAL_BUDGET_BYTES = 16 * 1024 * 1024;
/** Above a record's growth after admission: a cgroup path of up to 4 KiB and a message of MAX_MESSAGE_CHARS, JSON-escaped. */
export const RECORD_HEADROOM_BYTES = 16 * 1024;
const PRIVATE_FILE = 0o600;
const RECORD_FILE = /^sb-[0-9a-f-]{36}\.json$/;
const RECORDS_DIR_FILE = /^(?:sb-[0-9a-f-]{36}|meta)\.json$/;
const HEADER_FILE = /^(?:owner|sandboxes)\.json$/;

/** The registry files refused to open: the daemon exits, naming the file and the rule. */
export class RegistryRejectedError extends InvalidInputError {}

const SYMLINK_REFUSED = 'a symbolic link; the registry uses only files inside the state directory (put the file itself here)';

/** Whether anything (a dangling symbolic link included) is at `path`. */
function present(path: string): boolean {
  return lstatSync(path, { throwIfNoEntry: false }) !== undefined;
}

/**
 * A registry file's JSON, never read through a symbolic link (it would load a file from outside
 * the state directory, which later writes would then replace by one inside) nor from anything but
 * a regular file (a FIFO would block the start-up).
 */
function readJson(path: string): unknown {
  let text: string;
  try {
    const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    try {
      if (!fstatSync(fd).isFile()) throw new RegistryRejectedError(`${path}: not a regular file`);
      text = readFileSync(fd, 'utf8');
    } finally {
      closeSync(fd);
    }
  } catch (error) {
    if (error instanceof RegistryRejectedError) throw error;
    if ((error as NodeJS.ErrnoException).code === 'ELOOP') throw new RegistryRejectedError(`${path}: ${SYMLINK_REFUSED}`);
    throw new RegistryRejectedError(`${path}: unreadable registry file: ${(error as Error).message}`);
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new RegistryRejectedError(`${path}: unreadable registry file: ${(error as Error).message}`);
  }
}

/** A registry header (sandboxes.json, records/meta.json): a JSON object. */
function readHeader(path: string): { version?: unknown; owner?: unknown; sandboxes?: unknown } {
  const value = readJson(path);
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new RegistryRejectedError(`${path}: not a registry header (a JSON object)`);
  return value;
}

/** What a durable write cut short (kill -9 before its rename) leaves: `<registry file>.tmp-<suffix>`. */
function isCutShortWrite(name: string, target: RegExp): boolean {
  const stands = tempTargetOf(name);
  return stands !== undefined && target.test(stands);
}

function logicalSize(record: SandboxRecord): number {
  // A version-1 entry: `"<id>":<record>,`.
  return Buffer.byteLength(JSON.stringify(record)) + record.id.length + 4;
}

export class Registry {
  private readonly records = new Map<string, SandboxRecord>();
  private logical = 0;

  private constructor(
    readonly dir: string,
    readonly owner: string,
  ) {}

  private get recordsDir(): string {
    return join(this.dir, 'records');
  }

  /** Opens (creating, migrating) the registry of a locked state directory. */
  static open(dir: string): Registry {
    const ownerPath = join(dir, 'owner.json');
    const headerPath = join(dir, 'sandboxes.json');
    const hasOwner = present(ownerPath);
    const header = present(headerPath) ? readHeader(headerPath) : undefined;
    let owner: string;
    if (hasOwner) {
      const value = readJson(ownerPath);
      if (typeof value !== 'string' || value.length === 0) throw new RegistryRejectedError(`${ownerPath}: the owner marker must be a JSON string`);
      owner = value;
    } else if (header === undefined && !present(join(dir, 'records'))) {
      owner = randomUUID();
      writeFileDurably(ownerPath, JSON.stringify(owner), { mode: PRIVATE_FILE });
    } else if (header?.version === 1 && isEmptyMap(header.sandboxes)) {
      owner = typeof header.owner === 'string' ? header.owner : randomUUID();
      writeFileDurably(ownerPath, JSON.stringify(owner), { mode: PRIVATE_FILE });
    } else if (header?.version === 1) {
      throw new RegistryRejectedError(`${headerPath}: an occupied version-1 registry without owner.json is refused (its sandboxes may belong to another runtime); restore ${ownerPath}`);
    } else {
      throw new RegistryRejectedError(`${dir}: a version-2 registry without owner.json is refused, even with no sandboxes; restore ${ownerPath}`);
    }
    if (header !== undefined && header.owner !== undefined && header.owner !== owner) {
      throw new RegistryRejectedError(`${headerPath}: owned by ${String(header.owner)}, but owner.json says ${owner}`);
    }
    const registry = new Registry(dir, owner);
    if (header === undefined) registry.initialise(headerPath);
    else if (header.version === 1) registry.migrate(headerPath, header.sandboxes);
    else if (header.version !== REGISTRY_VERSION) throw new RegistryRejectedError(`${headerPath}: unknown registry version ${String(header.version)}`);
    registry.load();
    registry.sweepCutShortWrites();
    return registry;
  }

  private initialise(headerPath: string): void {
    rmSync(join(this.dir, 'records'), { recursive: true, force: true });
    this.writeRecordsDir(join(this.dir, 'records'), {});
    writeFileDurably(headerPath, JSON.stringify({ version: REGISTRY_VERSION, owner: this.owner, sandboxes: {} }), { mode: PRIVATE_FILE });
  }

  private migrate(headerPath: string, sandboxes: unknown): void {
    if (sandboxes === null || typeof sandboxes !== 'object') throw new RegistryRejectedError(`${headerPath}: version 1 without a sandboxes map`);
    const staging = hiddenTempSiblingOf(this.recordsDir);
    this.writeRecordsDir(staging, sandboxes as Record<string, SandboxRecord>);
    // A copy left by an interrupted migration is replaced whole.
    replaceDirectory(staging, this.recordsDir);
    // The activation: from here on the records directory is the truth.
    writeFileDurably(headerPath, JSON.stringify({ version: REGISTRY_VERSION, owner: this.owner, sandboxes: {} }), { mode: PRIVATE_FILE });
  }

  private writeRecordsDir(path: string, sandboxes: Record<string, SandboxRecord>): void {
    mkdirSync(path, { mode: 0o700 });
    writeFileDurably(join(path, 'meta.json'), JSON.stringify({ version: REGISTRY_VERSION, owner: this.owner }), { mode: PRIVATE_FILE });
    for (const [id, record] of Object.entries(sandboxes)) {
      writeFileDurably(join(path, `${id}.json`), JSON.stringify({ owner: this.owner, record }), { mode: PRIVATE_FILE });
    }
    fsyncPath(path);
  }

  private load(): void {
    if (lstatSync(this.recordsDir, { throwIfNoEntry: false })?.isSymbolicLink()) throw new RegistryRejectedError(`${this.recordsDir}: ${SYMLINK_REFUSED}`);
    const meta = readHeader(join(this.recordsDir, 'meta.json'));
    if (meta.version !== REGISTRY_VERSION || meta.owner !== this.owner) {
      throw new RegistryRejectedError(`${join(this.recordsDir, 'meta.json')}: expected version ${REGISTRY_VERSION} of owner ${this.owner}`);
    }
    for (const name of readdirSync(this.recordsDir)) {
      if (!RECORD_FILE.test(name)) continue;
      const path = join(this.recordsDir, name);
      const wrapped = readJson(path);
      const problem = recordFileProblem(wrapped);
      if (problem) throw new RegistryRejectedError(`${path}: not a record: ${problem}`);
      const { owner, record } = wrapped as RecordFile;
      if (owner !== this.owner || `${record.id}.json` !== name) throw new RegistryRejectedError(`${path}: not a record of owner ${this.owner}`);
      this.records.set(record.id, record);
      this.logical += logicalSize(record);
    }
  }

  /**
   * Removes the temporaries of writes that a kill cut short: never renamed into place, so never
   * part of the registry, yet each may hold a whole record and its tokens. Only under the state
   * directory's lock, where no other writer can be midway.
   */
  private sweepCutShortWrites(): void {
    for (const [dir, target] of [[this.dir, HEADER_FILE], [this.recordsDir, RECORDS_DIR_FILE]] as const) {
      for (const name of readdirSync(dir)) if (isCutShortWrite(name, target)) rmSync(join(dir, name), { force: true });
    }
  }

  get(id: string): SandboxRecord | undefined {
    return this.records.get(id);
  }

  all(): SandboxRecord[] {
    return [...this.records.values()];
  }

  get size(): number {
    return this.records.size;
  }

  /** Durably writes a record (new or changed); memory changes only after the write. */
  put(record: SandboxRecord): void {
    const before = this.records.get(record.id);
    const logical = this.logical - (before ? logicalSize(before) : 0) + logicalSize(record);
    const headroom = before ? 0 : (this.records.size + 1) * RECORD_HEADROOM_BYTES;
    if (logical + headroom > LOGICAL_BUDGET_BYTES) {
      const kept = headroom ? ` plus ${headroom} kept free for the records' later changes` : '';
      throw new ResourceLimitError(`registry budget: ${logical} bytes${kept} would exceed ${LOGICAL_BUDGET_BYTES}`);
    }
    writeFileDurably(join(this.recordsDir, `${record.id}.json`), JSON.stringify({ owner: this.owner, record }), { mode: PRIVATE_FILE });
    this.records.set(record.id, structuredClone(record));
    this.logical = logical;
  }

  /** Durably removes a record: only after confirmed cleanup. */
  remove(id: string): void {
    const before = this.records.get(id);
    if (!before) return;
    try {
      unlinkSync(join(this.recordsDir, `${id}.json`));
    } catch (error) {
      // Gone already: an earlier attempt's unlink took effect before the sync of the directory failed.
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
    fsyncPath(this.recordsDir);
    this.records.delete(id);
    this.logical -= logicalSize(before);
  }
}

function isEmptyMap(value: unknown): boolean {
  return value !== null && typeof value === 'object' && Object.keys(value).length === 0;
}
