/**
 * The mirror `--to` as one sync's for that sync's life. A batch writes the mirror under the lock of
 * the dataset it converts into (batch.ts), which two syncs into two datasets do not share: sharing
 * one mirror, each would write its source's files over the other's copies of the same paths, and
 * remove the other's copy of a file its own source deleted (the other, seeing nothing change, never
 * puts it back). So a sync holds the mirror's writer lock (dataset/lock.ts: `.<name>.lock` beside
 * it, taken over at once from a killed holder) from start to end, and another waits for it as a
 * writer waits for a dataset, then exits 4 naming the holder. Holding it, the sync checks that the
 * mirror is its own and not another's that has stopped (owner.ts).
 */
import { mkdirSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { tempTargetOf } from '../../lib/durable.js';
import { pathError } from '../../lib/errors.js';
import type { Logger } from '../../lib/log.js';
import { walkFiles } from '../../lib/walk.js';
import { acquireWriterLock, lockOptions, type WriterLock } from '../dataset/lock.js';
import { claimOwnership } from './owner.js';

export interface MirrorClaim {
  from: string;
  to: string;
  convert: string;
  lockTimeoutMs: number;
  signal: AbortSignal;
  log: Logger;
}

/** Takes the mirror for this sync (waiting up to `lockTimeoutMs` for another), clears what killed syncs left in it, and makes it this sync's (owner.ts). */
export async function claimMirror(claim: MirrorClaim): Promise<WriterLock> {
  let lock: WriterLock | undefined;
  try {
    mkdirSync(dirname(claim.to), { recursive: true });
    lock = await acquireWriterLock(claim.to, {
      ...lockOptions(`sync --from ${claim.from} --convert ${claim.convert}`, { lockTimeoutMs: claim.lockTimeoutMs, signal: claim.signal, log: claim.log }),
      guards: 'mirror',
    });
    const held = heldBy(claim.to);
    // Checked first: what is in a directory that is not this sync's mirror is not the sync's to remove.
    claimOwnership(claim, held);
    sweepTemporaries(claim.to, held);
    return lock;
  } catch (error) {
    lock?.release();
    // The lock's own paths (`.<name>.lock-<random>`) are none the user gave: a full disk or a parent it may not write is the mirror's.
    throw pathError(error, `--to ${claim.to}`);
  }
}

/** A mirror's temporary older than this was left by a sync that was killed (a live one renames its own within a batch). */
const STALE_TEMPORARY_MS = 10 * 60_000;

/** What the mirror holds, by relative path (temporaries too): everything but directories. */
function heldBy(to: string): string[] {
  const held: string[] = [];
  walkFiles(to, (rel) => held.push(rel));
  return held;
}

/** Removes what killed syncs left in the mirror: `<file>.tmp-<random>` files no batch will rename. */
function sweepTemporaries(to: string, held: readonly string[]): void {
  const now = Date.now();
  for (const rel of held) {
    if (tempTargetOf(rel) === undefined) continue;
    const path = join(to, rel);
    const stat = statSync(path, { throwIfNoEntry: false });
    if (stat && now - stat.mtimeMs > STALE_TEMPORARY_MS) rmSync(path, { force: true });
  }
}
