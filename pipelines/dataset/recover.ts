/**
 * What a writer killed part-way (kill -9, a crash, a power cut) leaves behind, and how the next
 * command puts it right. Every writer of a dataset holds the dataset's writer lock (lock.ts), so
 * whatever of these a command finds while holding that lock belongs to a writer that is gone:
 *
 * beside the dataset, in its parent directory (`<name>` is the dataset's directory name):
 *   .<name>.tmp-<random>   a create's or a replace's build, or a dropped dataset renamed aside before
 *                          its deletion: removed (a build never reached its commit; a drop did)
 *   .<name>.tmp-old        the old dataset a replace moved aside: a replace commits when it renames
 *                          the new dataset into place, so when nothing is at the path the old one is
 *                          renamed back, and when something is, the aside is removed
 *   .<name>.lock-<random>  the lock candidate of a killed waiter (removed by lock.ts)
 * inside the dataset, left by an append:
 *   *.tmp-<random>         temporary files (a part, a snapshot, the manifest, the index copy): removed
 *   snapshots/<id>.json    a snapshot that is not the manifest's or one of its ancestors (written by an
 *                          append killed before its manifest swap): removed
 *   parts/<relation>/...   a part that no remaining snapshot lists: removed
 *
 * Writers reclaim all of it (recoverBeside, then reclaimInside where they write into the dataset).
 * Readers never wait for the lock: one that finds nothing at the path but an aside puts the old
 * dataset back if it can take the lock at once, and otherwise (a replace is under way) reads the
 * aside, which is the old dataset whole (readableRoot).
 */
import { existsSync, readdirSync, realpathSync, rmSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { TEMP_MARKER, hiddenTempSiblingOf, isRandomSuffix, renameDurably } from '../../lib/durable.js';
import { readSnapshot, type Snapshot } from './layout.js';
import { tryWriterLock } from './lock.js';
import type { LocalObjectStore } from './store.js';

/**
 * The one name of a local dataset, which its lock and siblings are keyed by: absolute, with
 * symbolic links resolved (those of the parent when the dataset is not there yet).
 */
export function canonicalPath(path: string): string {
  const absolute = resolve(path);
  try {
    return realpathSync(absolute);
  } catch {
    try {
      return join(realpathSync(dirname(absolute)), basename(absolute));
    } catch {
      return absolute;
    }
  }
}

/** A new hidden sibling of the dataset at `path`: where a create or a replace builds it, or a drop renames it before deleting it. */
export function scratchPathOf(path: string): string {
  return hiddenTempSiblingOf(path);
}

/** Where a replace moves the old dataset while it renames the new one in (lib/durable.ts replaceDirectory). */
export function asidePathOf(path: string): string {
  return join(dirname(path), `.${basename(path)}${TEMP_MARKER}old`);
}

/** A build or drop leftover of the dataset at `path`: `.<name>.tmp-<random>` (before the lock, builds also carried the builder's pid: `.<name>.tmp-<pid>-<random>`). */
function isLeftoverOf(path: string, name: string): boolean {
  const prefix = `.${basename(path)}${TEMP_MARKER}`;
  return name.startsWith(prefix) && isRandomSuffix(name.slice(prefix.length).replace(/^\d+-/, ''));
}

/** Puts the old dataset back when a replace was killed between moving it aside and renaming the new one in. */
function restoreAside(path: string): boolean {
  const aside = asidePathOf(path);
  if (existsSync(path) || !existsSync(aside)) return false;
  renameDurably(aside, path);
  return true;
}

/** Reclaims what killed writers left beside the dataset at (canonical) `path`; the caller holds its lock. Says what it did. */
export function recoverBeside(path: string): string[] {
  const notes: string[] = [];
  if (restoreAside(path)) notes.push(`${path}: put back the dataset that an interrupted replace had moved aside`);
  else if (existsSync(asidePathOf(path))) {
    rmSync(asidePathOf(path), { recursive: true, force: true });
    notes.push(`${path}: removed the old copy that an interrupted replace had left`);
  }
  for (const name of readdirSync(dirname(path))) {
    if (!isLeftoverOf(path, name)) continue;
    rmSync(join(dirname(path), name), { recursive: true, force: true });
    notes.push(`${path}: removed ${name}, left by an interrupted writer`);
  }
  return notes;
}

/**
 * Reclaims what killed writers left inside a dataset whose current snapshot is `current`; the
 * caller holds its lock. Snapshots on the chain of parents from `current` stay, with every part
 * they list (older snapshots remain readable). Says what it did.
 */
export async function reclaimInside(store: LocalObjectStore, current: Snapshot): Promise<string[]> {
  const chain = new Set<string>();
  const referenced = new Set<string>();
  for (let snapshot: Snapshot | undefined = current; snapshot; ) {
    chain.add(snapshot.id);
    for (const parts of Object.values(snapshot.relations)) for (const part of parts ?? []) referenced.add(part.key);
    // A missing ancestor ends the chain: what it listed is still listed by its descendants.
    snapshot = snapshot.parent === null || chain.has(snapshot.parent) ? undefined : await readSnapshot(store, snapshot.parent).catch(() => undefined);
  }
  const leftover = (key: string): boolean =>
    key.includes(TEMP_MARKER) ||
    (key.startsWith('snapshots/') && !chain.has(key.slice('snapshots/'.length, -'.json'.length))) ||
    (key.startsWith('parts/') && !referenced.has(key));
  const removed = (await store.list('')).filter(leftover);
  for (const key of removed) await store.delete(key);
  if (removed.length === 0) return [];
  return [`${store.root}: removed ${removed.length} file(s) left by an interrupted writer (${removed.slice(0, 3).join(', ')}${removed.length > 3 ? ', ...' : ''})`];
}

/**
 * The directory a reader reads the dataset at `path` from (canonical): the path itself, unless a
 * replace was killed (or is at work) between moving the old dataset aside and renaming the new one
 * in. Then the old dataset is put back if the lock can be had at once, else read where it is aside.
 */
export function readableRoot(path: string): string {
  const canonical = canonicalPath(path);
  const aside = asidePathOf(canonical);
  if (existsSync(canonical) || !existsSync(aside)) return canonical;
  const lock = tryWriterLock(canonical, 'putting back a dataset after an interrupted replace');
  if (!lock) return aside;
  try {
    restoreAside(canonical);
  } finally {
    lock.release();
  }
  return canonical;
}
