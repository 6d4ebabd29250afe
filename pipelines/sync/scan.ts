/**
 * What sync watches: the `.json`, `.jsonl` and `.ndjson` files under the source directory (symbolic
 * links not followed), each known by its size, modification time and inode. A file whose three are
 * unchanged is not read again, so a rescan of thousands of files costs one `lstat` each.
 */
import { lstatSync } from 'node:fs';
import { join } from 'node:path';
import { walkFiles } from '../../lib/walk.js';

export const SYNC_EXTENSIONS = ['.json', '.jsonl', '.ndjson'];

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

export function scanTree(root: string): TreeStamps {
  const stamps: TreeStamps = new Map();
  walkFiles(root, (rel, entry, path) => {
    if (!entry.isFile() || !SYNC_EXTENSIONS.some((ext) => entry.name.toLowerCase().endsWith(ext))) return;
    const stamp = stampOf(path);
    if (stamp) stamps.set(rel, stamp);
  });
  return stamps;
}

/** What changed from `before` to `after`: files new or with another stamp, and files gone. */
export function changesBetween(before: TreeStamps, after: TreeStamps): { changed: string[]; removed: string[] } {
  const changed: string[] = [];
  const removed: string[] = [];
  for (const [rel, stamp] of after) if (!sameStamp(before.get(rel), stamp)) changed.push(rel);
  for (const rel of before.keys()) if (!after.has(rel)) removed.push(rel);
  return { changed, removed };
}
