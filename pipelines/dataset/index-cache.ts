/**
 * The index cache: `$XDG_CACHE_HOME/trajstore/index/<dataset>-<snapshot id>.sqlite` (default
 * ~/.cache/trajstore/index), where a reader that may not write a dataset's index in the dataset
 * (open.ts: a writer holds its lock, the directory is read-only, `serve`) rebuilds it.
 *
 * - `<dataset>` is a hash of the dataset's real path: a snapshot id is what the dataset's own
 *   descriptor says, so a dataset made by someone else could claim another's and, keyed by the id
 *   alone, have that one read its index (or read that one's).
 * - bounded, as a dataset served while it is appended to gets one index there per snapshot, each as
 *   large as the dataset's index: past TRAJSTORE_INDEX_CACHE_MAX_BYTES (default DEFAULT_INDEX_CACHE_MAX_BYTES), each rebuild there
 *   removes the indexes used least recently (cache-bound.ts), never the one just built nor one used in
 *   the last minute; a reader marks an index used before it opens it, and every ten seconds while it
 *   holds it open (`holdIndex`), so a `serve` never has the index it reads removed, which would make it
 *   rebuild at its next request (OpenDataset.onDisk). The cache may exceed the bound by what is in use.
 * - its own bound, not the S3 cache's: the two hold different things (an S3 copy costs a download to
 *   get back, an index only local work), and one bound over both would have an index rebuild remove
 *   S3 copies, or each cache reach the bound, twice the number the user set.
 * - what a killed rebuild left (`<dataset>-<snapshot id>.sqlite.tmp-<random>`) is removed once an hour old: a
 *   rebuild at work writes its temporary all along.
 */
import { createHash } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { cacheHome } from '../../lib/config.js';
import { dirname, join } from 'node:path';
import { limitFromEnv } from '../../lib/env-limit.js';
import { cacheEntries, evictLeastRecentlyUsed, holdInUse, markUsed } from './cache-bound.js';

/** 4 GiB: the indexes of a few snapshots of a large dataset. */
export const DEFAULT_INDEX_CACHE_MAX_BYTES = 4 * 1024 ** 3;

/**
 * Where the index of snapshot `snapshotId` of the dataset at `root` (its real path) is rebuilt when
 * not in the dataset, with the cache's bound (read first: a mistyped one fails before any work).
 */
export function cachedIndexOf(env: NodeJS.ProcessEnv, root: string, snapshotId: string): { path: string; maxBytes: number } {
  const maxBytes = limitFromEnv(env, 'TRAJSTORE_INDEX_CACHE_MAX_BYTES', DEFAULT_INDEX_CACHE_MAX_BYTES, 'bytes');
  const dir = join(cacheHome(env), 'trajstore', 'index');
  mkdirSync(dir, { recursive: true });
  const dataset = createHash('sha256').update(root).digest('hex').slice(0, 16);
  return { path: join(dir, `${dataset}-${snapshotId}.sqlite`), maxBytes };
}

/**
 * Marks the cached index at `path` used, then keeps it so until `release`: called before it is
 * opened, so that an eviction under way leaves it (or puts it back) for this reader.
 */
export function holdIndex(path: string): { release(): void } {
  markUsed(path);
  return holdInUse(path);
}

/** Keeps the index cache that holds `built` (just rebuilt) under `maxBytes` (see the module comment). */
export function evictIndexes(built: string, maxBytes: number): void {
  const dir = dirname(built);
  const indexes = cacheEntries(dir, (_path, stat) => stat.size);
  const total = indexes.reduce((n, index) => n + index.bytes, 0);
  evictLeastRecentlyUsed(dir, indexes, total, maxBytes, built);
}
