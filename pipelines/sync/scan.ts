/**
 * What sync watches: the `.json`, `.jsonl` and `.ndjson` files under the source directory (symbolic
 * links not followed), each known by its size, modification time and inode. A file whose three are
 * unchanged is not read again, so a rescan of thousands of files costs one `lstat` each.
 */
import { lstatSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { ExitCode, InvalidInputError, pathError, ToolError } from '../../lib/errors.js';
import { undecodableName, walkFiles } from '../../lib/walk.js';

export const SYNC_EXTENSIONS = ['.json', '.jsonl', '.ndjson'];

/** Whether a file of this name is one sync watches (and so one it mirrors). */
export const isWatched = (name: string): boolean => SYNC_EXTENSIONS.some((ext) => name.toLowerCase().endsWith(ext));

/**
 * Errors that say a watched file is gone: removed (ENOENT), or a directory on its path replaced by a
 * file (ENOTDIR) or by a symbolic link that loops (ELOOP). Any other error is the batch's to retry.
 */
const GONE = new Set(['ENOENT', 'ENOTDIR', 'ELOOP']);

export interface FileStamp {
  size: number;
  mtime_ms: number;
  ino: number;
}

/** Relative path (with `/`) -> stamp, of every watched file under `root`. */
export type TreeStamps = Map<string, FileStamp>;

export const sameStamp = (a: FileStamp | undefined, b: FileStamp | undefined): boolean =>
  a !== undefined && b !== undefined && a.size === b.size && a.mtime_ms === b.mtime_ms && a.ino === b.ino;

export function stampOf(path: string): FileStamp | undefined {
  const stat = unlessGone(() => lstatSync(path));
  return stat?.isFile() ? { size: stat.size, mtime_ms: stat.mtimeMs, ino: stat.ino } : undefined;
}

/**
 * The stamp of `rel` under `root`, reached only through real directories. A directory on its path
 * that became a symbolic link (to /etc, say) would otherwise lead the read out of the source tree,
 * as lstat follows links in the middle of a path; the file is gone, as the walk (which follows no
 * link) sees it.
 */
export function stampUnder(root: string, rel: string): FileStamp | undefined {
  let dir = root;
  for (const part of rel.split('/').slice(0, -1)) {
    dir = join(dir, part);
    const stat = unlessGone(() => lstatSync(dir));
    if (!stat?.isDirectory()) return undefined;
  }
  return stampOf(join(root, rel));
}

/** `read()`, or undefined when what it reads is GONE. */
export function unlessGone<T>(read: () => T): T | undefined {
  try {
    return read();
  } catch (error) {
    if (GONE.has((error as NodeJS.ErrnoException).code ?? '')) return undefined;
    throw error;
  }
}

/**
 * Why `rel` under the source could not be read, as the typed error naming it by its relative path
 * (exit 2 for a permission, say). Its control characters are escaped where it is shown (lib/log.ts
 * diagnosticText): a newline in a file name forges no line.
 */
export function unreadableError(rel: string, error: unknown): ToolError {
  const typed = pathError(error, rel);
  if (typed instanceof ToolError) return typed;
  const why = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
  return new ToolError(ExitCode.Internal, `${rel}: cannot be read (${why})`, { cause: error });
}

/**
 * A file or directory whose name is not UTF-8 (undecodableName), which sync leaves out: the dataset
 * keys runs by their source path as UTF-8 text (and the state file by JSON strings), so neither
 * output could hold it faithfully. The error shows the name's bytes (`\xff`).
 */
function notUtf8(path: string, rel: string): ToolError | undefined {
  const shown = undecodableName(path);
  if (shown === undefined) return undefined;
  return new InvalidInputError(`${rel.slice(0, rel.lastIndexOf('/') + 1)}${shown}: the name is not UTF-8 (rename it to sync it)`);
}

/**
 * The watched files under `root`. A directory that cannot be read (`root` itself too, or gone: it
 * goes as `''`, its error naming `root`), a file that cannot be stat'ed (no permission) or a file or
 * directory named in bytes that are not UTF-8 goes to `unreadable` and the scan goes on without it;
 * without `unreadable` its error is thrown.
 */
export function scanTree(root: string, unreadable?: (rel: string, error: ToolError) => void): TreeStamps {
  const stamps: TreeStamps = new Map();
  const cannotRead = (rel: string, error: unknown): void => {
    const typed = unreadableError(rel, error);
    if (!unreadable) throw typed;
    unreadable(rel, typed);
  };
  try {
    // A source gone as a whole (moved away, unmounted) is out of reach, not emptied: walked, it
    // would hold nothing, and both outputs would be emptied of everything it had.
    statSync(root);
    walkFiles(
      root,
      (rel, entry, path) => {
        if (!entry.isFile() || !isWatched(entry.name)) return;
        try {
          const stamp = stampOf(path);
          if (stamp) stamps.set(rel, stamp);
          else {
            const undecodable = notUtf8(path, rel);
            if (undecodable) cannotRead(rel, undecodable);
          }
        } catch (error) {
          cannotRead(rel, error);
        }
      },
      (rel, path, error) => {
        const undecodable = notUtf8(path, rel);
        // A directory named in UTF-8 that was removed while the walk was under way holds nothing.
        if (undecodable || !GONE.has((error as NodeJS.ErrnoException).code ?? '')) cannotRead(rel, undecodable ?? error);
      },
    );
  } catch (error) {
    // Only the root's own listing fails here: with `unreadable`, the walk hands it everything below.
    if (!unreadable) throw error;
    unreadable('', unreadableError(root, error));
  }
  return stamps;
}

/** Whether `rel` is at or under one of the paths a scan could not read (`''`: the whole tree): out of reach, not gone. */
export const outOfReach = (rel: string, unread: readonly string[]): boolean => unread.some((path) => path === '' || rel === path || rel.startsWith(`${path}/`));

/** `now` with what `before` had at or under the paths `unread`: files out of reach this scan, not gone. */
export function keepUnread(now: TreeStamps, before: TreeStamps, unread: readonly string[]): TreeStamps {
  if (unread.length === 0) return now;
  for (const [rel, stamp] of before) if (outOfReach(rel, unread)) now.set(rel, stamp);
  return now;
}

/** What changed from `before` to `after`: files new or with another stamp, and files gone. */
export function changesBetween(before: TreeStamps, after: TreeStamps): { changed: string[]; removed: string[] } {
  const changed: string[] = [];
  const removed: string[] = [];
  for (const [rel, stamp] of after) if (!sameStamp(before.get(rel), stamp)) changed.push(rel);
  for (const rel of before.keys()) if (!after.has(rel)) removed.push(rel);
  return { changed, removed };
}
