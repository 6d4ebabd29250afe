/**
 * Whose mirror `--to` is: one sync's, the pair of its source and its `--convert` dataset (canonical
 * paths), recorded in `.<name>.sync-owner.json` beside the mirror (in its parent directory, as its
 * lock is), never inside it: the mirror holds the source's files and nothing else.
 *
 * Why the pair: a sync learns what to write into the mirror and what to remove from it only from
 * its dataset's state (state.ts), the stamps of the source files it last took. The mirror's lock
 * (mirror.ts) keeps concurrent syncs apart, but a sync run after another has stopped, of another
 * source or into another dataset, would keep the first's files (its state never saw them) and
 * write its own over the same paths: the mirror would be a copy of neither source. So a sync whose
 * pair is not the record's is refused (exit 4), unless the recorded source is gone (moved or
 * deleted) and the dataset is the same: the dataset is taken over then too (state.ts claimDataset),
 * and so is the mirror.
 *
 * The record binds only while the mirror holds something: a mirror removed or emptied holds nothing
 * of anyone's, and any sync may have the path. A mirror with no record was written by an earlier
 * version of this tool when the dataset's state knows every file in it, and is adopted; anything
 * else in a non-empty `--to` is the user's, and sync neither writes into it nor deletes from it.
 */
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { tempTargetOf, writeFileDurably } from '../../lib/durable.js';
import { ConflictError, InvalidInputError } from '../../lib/errors.js';
import type { Logger } from '../../lib/log.js';
import { readState, standingOf } from './state.js';

const OWNER_VERSION = 1;

interface MirrorOwner {
  version: number;
  /** The source directory it is a copy of. */
  source: string;
  /** The dataset whose state says which of the source's files it holds. */
  convert: string;
}

export interface OwnerClaim {
  from: string;
  to: string;
  convert: string;
  log: Logger;
}

/** The owner record of the mirror at (canonical) `to`. */
export function ownerPathOf(to: string): string {
  return join(dirname(to), `.${basename(to)}.sync-owner.json`);
}

/** The record, or undefined when there is none (or it is not one: then the mirror is judged as unrecorded, which adopts it only when its dataset knows all its files). */
function readOwner(to: string): MirrorOwner | undefined {
  try {
    const owner = JSON.parse(readFileSync(ownerPathOf(to), 'utf8')) as MirrorOwner;
    return owner.version === OWNER_VERSION && typeof owner.source === 'string' && typeof owner.convert === 'string' ? owner : undefined;
  } catch {
    return undefined;
  }
}

/** Records `claim`'s sync as the owner, replacing the record whole; first removes what killed writes of it left. */
function writeOwner(claim: OwnerClaim): void {
  const path = ownerPathOf(claim.to);
  for (const name of readdirSync(dirname(path))) if (tempTargetOf(name) === basename(path)) rmSync(join(dirname(path), name), { force: true });
  const owner: MirrorOwner = { version: OWNER_VERSION, source: claim.from, convert: claim.convert };
  writeFileDurably(path, `${JSON.stringify(owner)}\n`);
}

/**
 * Makes the mirror `claim.to`, which holds `held` (relative paths, temporaries included), this
 * sync's, or throws: ConflictError when it is another sync's, InvalidInputError when it holds
 * files no sync of this source and dataset wrote. Runs under the mirror's lock.
 */
export function claimOwnership(claim: OwnerClaim, held: readonly string[]): void {
  const recorded = readOwner(claim.to);
  const standing = recorded?.convert === claim.convert ? standingOf(recorded.source, claim.from) : undefined;
  if (standing === 'same') return;
  if (held.length === 0) return writeOwner(claim);
  if (recorded) {
    if (standing === 'gone') claim.log.warn(`sync: ${claim.to} mirrored ${recorded.source}, which is gone; it mirrors ${claim.from} now`);
    if (standing === 'gone' || standing === 'same-directory') return writeOwner(claim);
    throw new ConflictError(`--to ${claim.to}: the mirror of sync --from ${recorded.source} --convert ${recorded.convert}, not of --from ${claim.from} --convert ${claim.convert}; a mirror is one sync's copy of its source`, {
      hint: `give this sync another --to, or remove ${claim.to} (a copy of ${recorded.source}) to mirror ${claim.from} there`,
    });
  }
  const known = readState(claim.convert, claim.from);
  // A temporary a killed sync left is known by the file it stood in for.
  const stranger = held.find((rel) => !known?.has(tempTargetOf(rel) ?? rel));
  if (stranger !== undefined) {
    throw new InvalidInputError(`--to ${claim.to}: not empty, and no mirror of this sync (it holds ${stranger}, which --convert ${claim.convert} has no record of syncing from ${claim.from})`, {
      hint: 'give --to a new or empty directory: a sync writes over and deletes the files of its mirror',
    });
  }
  claim.log.info(`sync: ${claim.to}: a mirror of ${claim.from} that --convert ${claim.convert} knows, written before mirrors recorded their owner; adopted`);
  writeOwner(claim);
}
