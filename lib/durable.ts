/**
 * Crash-safe writing, the one way every writer in the repository replaces a file or a directory:
 * write under a temporary sibling name, fsync it, rename it over the target, fsync the directory.
 * A crash at any point leaves the old state or the new one, never a mix; what a crashed writer
 * left behind carries TEMP_MARKER in its name so that a later writer can sweep it.
 */
import { closeSync, fchmodSync, fsyncSync, linkSync, lstatSync, mkdirSync, openSync, renameSync, rmdirSync, rmSync, unlinkSync, writeSync } from 'node:fs';
import { InvalidInputError } from './errors.js';
import { basename, dirname, join } from 'node:path';

/** Temporary names carry this marker: `<name>.tmp-<random>`. */
export const TEMP_MARKER = '.tmp-';

/**
 * 48 random bits as 12 hex digits. Not node:crypto: this module is on every command's start-up path,
 * and a temporary name needs no secrecy (files are opened exclusively, so a collision fails, never clobbers).
 */
export function randomSuffix(): string {
  return Math.floor(Math.random() * 2 ** 48).toString(16).padStart(12, '0');
}

/** Whether `text` is what `randomSuffix` makes, for sweeps that must not take another name for a temporary. */
export function isRandomSuffix(text: string): boolean {
  return /^[0-9a-f]{12}$/.test(text);
}

/** The name a temporary (`<name>.tmp-<random>`, as tempSiblingOf makes) stands in for; undefined for any other name. */
export function tempTargetOf(name: string): string | undefined {
  const at = name.lastIndexOf(TEMP_MARKER);
  return at >= 0 && isRandomSuffix(name.slice(at + TEMP_MARKER.length)) ? name.slice(0, at) : undefined;
}

/** A temporary sibling name for `path`, unique to this call. */
export function tempSiblingOf(path: string): string {
  return `${path}${TEMP_MARKER}${randomSuffix()}`;
}

/** A hidden temporary sibling (`.<name>.tmp-<random>`), for output a user lists next to the target. */
export function hiddenTempSiblingOf(path: string): string {
  return join(dirname(path), `.${basename(path)}${TEMP_MARKER}${randomSuffix()}`);
}

/** fsync one file or directory by path. */
export function fsyncPath(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** What link(2) says on a filesystem without hard links (FAT, exFAT: EPERM; some network shares). */
const NO_HARD_LINKS = new Set(['EPERM', 'ENOTSUP', 'EOPNOTSUPP', 'ENOSYS']);

/**
 * Renames `from` (a file or a directory) to `to` only if nothing is there, atomically against any
 * other process putting something there at the same moment: that fails EEXIST (ENOTEMPTY for a
 * directory) and what is there stays. A check then a rename would replace what came in between,
 * and rename(2) itself replaces a file or an empty directory. Node has no renameat2(RENAME_NOREPLACE):
 *
 * - a file is linked to `to` (link(2) never replaces), then unlinked from `from`;
 * - a directory, which has no links, is renamed over an empty directory this call made at `to`
 *   (mkdir(2) never replaces), so the name is its own. That directory is there, empty, for the
 *   instant between the two calls, and left behind by a process killed in that instant.
 *
 * A filesystem without hard links gets the same claim for a file: an empty file made exclusively, renamed over.
 */
export function renameExclusive(from: string, to: string): void {
  if (lstatSync(from).isDirectory()) {
    claimThenRename(from, to, () => mkdirSync(to), () => rmdirSync(to));
    return;
  }
  try {
    linkSync(from, to);
  } catch (error) {
    if (!NO_HARD_LINKS.has((error as NodeJS.ErrnoException).code ?? '')) throw error;
    claimThenRename(from, to, () => closeSync(openSync(to, 'wx')), () => unlinkSync(to));
    return;
  }
  unlinkSync(from);
}

/** Makes `to` with `claim` (which fails if anything is there) and renames `from` over it; a rename that fails gives the claim up. */
function claimThenRename(from: string, to: string, claim: () => void, release: () => void): void {
  claim();
  try {
    renameSync(from, to);
  } catch (error) {
    try {
      release();
    } catch {
      // Filled by another process meanwhile (rmdir: ENOTEMPTY): then it is that one's.
    }
    throw error;
  }
}

/**
 * Renames `from` over `to` (a file or a directory) and fsyncs the directories involved. `exclusive`:
 * never over anything, even what appeared a moment ago (`renameExclusive`).
 */
export function renameDurably(from: string, to: string, options: { exclusive?: boolean } = {}): void {
  if (options.exclusive) renameExclusive(from, to);
  else renameSync(from, to);
  fsyncPath(dirname(to));
  if (dirname(from) !== dirname(to)) fsyncPath(dirname(from));
}

export interface DurableFileOptions {
  /** Exact mode of the new file whatever the umask (default 0o644). */
  mode?: number;
  /** Name of the temporary file (default: `tempSiblingOf(path)`). */
  temp?: string;
  /** Create the file's directory (and its parents) when missing; otherwise a missing directory is an error. */
  createDirectory?: boolean;
  /** Commit only to a name still free then (`renameExclusive`): what appeared there meanwhile is never replaced (EEXIST). */
  exclusive?: boolean;
  /**
   * fsync the file and its directory at the commit (default true). false for a scratch copy that
   * nothing reads after a crash (an export staged for its upload): still whole under its name once
   * committed, without the two flushes to disk per file.
   */
  fsync?: boolean;
}

/**
 * Refuses to replace what is at `path` unless it is a regular file (or nothing). A durable write
 * renames over its target: over a device, FIFO, socket or symbolic link that would put a plain file
 * in its place (`--output /dev/null --overwrite` as root replaces the system's /dev/null).
 */
export function assertReplaceable(path: string, shown: string): void {
  const existing = lstatSync(path, { throwIfNoEntry: false });
  if (existing && !existing.isFile() && !existing.isDirectory()) {
    throw new InvalidInputError(`${shown}: not a regular file (a device, FIFO, socket or symbolic link); only regular files are replaced`, { hint: 'name a regular file, or write to stdout and redirect it' });
  }
}

/**
 * A file written in pieces and published at once: nothing is visible under `path` until `commit`,
 * and `abort` leaves no trace. Writes are synchronous, so a caller that stops (a timeout, a limit)
 * can still commit exactly what it wrote.
 */
export class DurableFile {
  readonly temp: string;
  private readonly exclusive: boolean;
  private readonly fsync: boolean;
  private fd: number | undefined;
  private written = 0;

  constructor(
    readonly path: string,
    options: DurableFileOptions = {},
  ) {
    if (options.createDirectory) mkdirSync(dirname(path), { recursive: true });
    this.temp = options.temp ?? tempSiblingOf(path);
    this.exclusive = options.exclusive ?? false;
    this.fsync = options.fsync ?? true;
    this.fd = openSync(this.temp, 'wx', options.mode ?? 0o644);
    if (options.mode !== undefined) fchmodSync(this.fd, options.mode);
  }

  /** Bytes written so far. */
  get size(): number {
    return this.written;
  }

  write(data: Uint8Array | string): void {
    if (this.fd === undefined) throw new Error(`write after close: ${this.path}`);
    const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
    let offset = 0;
    while (offset < bytes.length) offset += writeSync(this.fd, bytes, offset, bytes.length - offset);
    this.written += bytes.length;
  }

  /** fsync, rename over the target (or to it while it is free: `exclusive`), fsync the directory (without `fsync`: the rename alone). */
  commit(): void {
    if (this.fd === undefined) throw new Error(`commit after close: ${this.path}`);
    try {
      if (this.fsync) fsyncSync(this.fd);
    } catch (error) {
      this.abort();
      throw error;
    }
    closeSync(this.fd);
    this.fd = undefined;
    try {
      if (this.fsync) renameDurably(this.temp, this.path, { exclusive: this.exclusive });
      else if (this.exclusive) renameExclusive(this.temp, this.path);
      else renameSync(this.temp, this.path);
    } catch (error) {
      rmSync(this.temp, { force: true });
      throw error;
    }
  }

  /** Closes and removes the temporary file; the target is untouched. Safe to call after commit. */
  abort(): void {
    if (this.fd === undefined) return;
    closeSync(this.fd);
    this.fd = undefined;
    rmSync(this.temp, { force: true });
  }
}

/** Replaces a whole file crash-safely. */
export function writeFileDurably(path: string, data: Uint8Array | string, options: DurableFileOptions = {}): void {
  const file = new DurableFile(path, options);
  try {
    file.write(data);
    file.commit();
  } catch (error) {
    file.abort();
    throw error;
  }
}

/**
 * Publishes a directory built beside `target`: the old one (if any) is renamed to `aside`, the new
 * one renamed in, the parent fsynced, and only then is the old one removed. A crash leaves the old
 * directory, or the new one, never a mix; between the two renames nothing is at `target` and the
 * old directory is at `aside`, so a caller that must always find a directory there names the
 * aside (and holds a lock: the name is then its own) and puts it back after a crash.
 */
export function replaceDirectory(built: string, target: string, aside = hiddenTempSiblingOf(target)): void {
  fsyncPath(built);
  let hadOld = true;
  try {
    renameSync(target, aside);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    hadOld = false;
  }
  renameDurably(built, target);
  if (hadOld) rmSync(aside, { recursive: true, force: true });
}
