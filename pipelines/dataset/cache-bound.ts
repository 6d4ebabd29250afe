/**
 * What the local caches share to stay under a bound (s3-cache.ts's snapshot copies, index-cache.ts's
 * indexes). An entry's last use is its modification time. Past the bound, the entries used least
 * recently go first, except the one being opened and any used in the last minute (IN_USE_MS): another
 * command may be about to open it, and a reader that holds one open marks it used every few seconds
 * (`holdInUse`), so a reader that stays open (serve) never has it removed under it. What a killed
 * command left under a temporary name goes once it is stale (STALE_SCRATCH_MS).
 */
import { readdirSync, renameSync, rmSync, statSync, utimesSync, type Stats } from 'node:fs';
import { join } from 'node:path';
import { randomSuffix, TEMP_MARKER, tempTargetOf } from '../../lib/durable.js';
import { STALE_SCRATCH_MS } from '../../lib/owned-scratch.js';

/** An entry used this recently is never evicted: another command may be about to open it. */
const IN_USE_MS = 60_000;
/** How often a reader holding an entry open marks it used again (`holdInUse`): well inside IN_USE_MS. */
const IN_USE_REFRESH_MS = IN_USE_MS / 6;

/** Marks the entry at `path` used now; one that is gone (evicted meanwhile) is for its reader's next open to find. */
export function markUsed(path: string): void {
  const now = new Date();
  try {
    utimesSync(path, now, now);
  } catch {
    // Evicted meanwhile: the caller's open says so.
  }
}

/**
 * Keeps the entry at `path` marked used until `release`: a reader that holds it longer than
 * IN_USE_MS (serve, for as long as the snapshot is current; an export of a large dataset) would
 * otherwise have it evicted under it by another command. The timer does not keep the process alive.
 */
export function holdInUse(path: string): { release(): void } {
  const timer = setInterval(() => markUsed(path), IN_USE_REFRESH_MS);
  timer.unref();
  return { release: () => clearInterval(timer) };
}

export interface CacheEntry {
  path: string;
  /** When it was last used (ms since the epoch). */
  used: number;
  bytes: number;
}

/**
 * The entries of the cache directory `dir`, each with its size (`bytesOf`). What a command left
 * there under a temporary name (`<name>.tmp-<random>`: a build, a rebuild, an eviction) is no entry,
 * and is removed once older than STALE_SCRATCH_MS; other hidden names (lock.ts's locks) are skipped.
 */
export function cacheEntries(dir: string, bytesOf: (path: string, stat: Stats) => number): CacheEntry[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  const now = Date.now();
  const entries: CacheEntry[] = [];
  for (const name of names) {
    const path = join(dir, name);
    const stat = statSync(path, { throwIfNoEntry: false });
    if (!stat) continue;
    if (tempTargetOf(name) !== undefined) {
      if (now - stat.mtimeMs > STALE_SCRATCH_MS) rmSync(path, { recursive: true, force: true });
      continue;
    }
    if (name.startsWith('.')) continue;
    entries.push({ path, used: stat.mtimeMs, bytes: bytesOf(path, stat) });
  }
  return entries;
}

/**
 * Removes `entries` of the cache directory `dir`, least recently used first, until `total` (the
 * cache's bytes) is at most `maxBytes`; `keep` (the entry being opened) and those used in the last
 * minute stay. `alsoFreed`, called after each removal, returns the bytes that went with it.
 *
 * An entry is renamed away first, so that a command finds it whole or not at all. Its time is then
 * read again: a command that marked it used since `entries` were read (it does so before it opens
 * one) gets it back under its name, so a reader about to open an entry does not lose it to an
 * eviction that had decided on its older time. Only a reader that opens it in the instant between the
 * two renames misses it; it then rebuilds (index-cache.ts) or fetches (s3-cache.ts) its own.
 */
export function evictLeastRecentlyUsed(dir: string, entries: readonly CacheEntry[], total: number, maxBytes: number, keep: string, alsoFreed: () => number = () => 0): void {
  const now = Date.now();
  for (const entry of [...entries].sort((a, b) => a.used - b.used)) {
    if (total <= maxBytes) break;
    if (entry.path === keep || now - entry.used < IN_USE_MS) continue;
    const doomed = join(dir, `.evicted${TEMP_MARKER}${randomSuffix()}`);
    try {
      renameSync(entry.path, doomed);
    } catch {
      continue;
    }
    const used = statSync(doomed, { throwIfNoEntry: false })?.mtimeMs ?? 0;
    if (Date.now() - used < IN_USE_MS && putBack(doomed, entry.path)) continue;
    rmSync(doomed, { recursive: true, force: true });
    total -= entry.bytes;
    total -= alsoFreed();
  }
}

/**
 * Renames an entry that was marked used while being evicted back under its name. A directory is not
 * put back over one that a command made meanwhile (the rename fails); a file may replace a newer one
 * of the same name, which holds the same (an index of the same snapshot), so either serves.
 */
function putBack(doomed: string, path: string): boolean {
  try {
    renameSync(doomed, path);
    return true;
  } catch {
    return false;
  }
}
