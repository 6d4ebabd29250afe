/**
 * What sync has converted: the stamp (scan.ts) of each source file as it was when last read, kept
 * in `sync-state.json` inside the converted dataset and written after each successful batch, under
 * the dataset's writer lock (batch.ts), so that it names the versions the dataset holds. It only
 * saves work: a batch killed after its commit and before this file is written converts those
 * files again on restart, which replaces their runs (never doubles them). A missing or unreadable
 * state converts everything again, the same way.
 *
 * The state also names the source, and a dataset is synced from one: runs are known by their path
 * relative to the source, so a second source would replace the first's runs of the same paths, and
 * each sync, finding the other's state, would convert its whole tree again at every batch. A compact
 * store is synced from one too (each batch replaces it whole with its source's records, so a second
 * source would replace the first's): its state names the source and holds no stamps, as each of its
 * batches reads the whole tree again.
 */
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileDurably } from '../../lib/durable.js';
import { ConflictError } from '../../lib/errors.js';
import { SYNC_STATE_FILE, type DatasetKind } from '../dataset/layout.js';
import type { FileStamp, TreeStamps } from './scan.js';

const STATE_VERSION = 1;

interface StateFile {
  version: number;
  /** The source directory the stamps are of. */
  source: string;
  files: Record<string, FileStamp>;
}

function readStateFile(convert: string): StateFile | undefined {
  try {
    const state = JSON.parse(readFileSync(join(convert, SYNC_STATE_FILE), 'utf8')) as StateFile;
    return state.version === STATE_VERSION && typeof state.source === 'string' ? state : undefined;
  } catch {
    return undefined;
  }
}

/** The stamps of what the dataset at `convert` holds of `source`; undefined when it holds no state of it (none yet, dropped, replaced). */
export function readState(convert: string, source: string): TreeStamps | undefined {
  const state = readStateFile(convert);
  return state?.source === source ? new Map(Object.entries(state.files)) : undefined;
}

export function writeState(convert: string, source: string, stamps: TreeStamps): void {
  const state: StateFile = { version: STATE_VERSION, source, files: Object.fromEntries(stamps) };
  writeFileDurably(join(convert, SYNC_STATE_FILE), `${JSON.stringify(state)}\n`);
}

/** A sync into a dataset that another source's sync owns: not retried, it would fail the same way. */
export class OtherSourceError extends ConflictError {}

/** The directory at `path`, when there is one: its device and inode, by which one directory under two names is one. */
function directoryId(path: string): string | undefined {
  const stat = statSync(path, { throwIfNoEntry: false });
  return stat?.isDirectory() ? `${stat.dev}:${stat.ino}` : undefined;
}

/**
 * How the source an output records stands to `from`: the same path; the same directory under
 * another name; `gone` (moved or deleted: it has nothing left to sync, so its output may be taken
 * over); or another directory that is still there, whose output is not `from`'s to write.
 */
export type SourceStanding = 'same' | 'same-directory' | 'gone' | 'other';

export function standingOf(recorded: string, from: string): SourceStanding {
  if (recorded === from) return 'same';
  const other = directoryId(recorded);
  if (other === undefined) return 'gone';
  return other === directoryId(from) ? 'same-directory' : 'other';
}

/** Per kind of dataset: why two sources would replace each other's data, and what a dataset taken over from a source that is gone keeps of it. */
const ONE_SOURCE: Record<DatasetKind, { why: string; keptOnTakeover: string }> = {
  // A batch replaces only the runs of the files it converts.
  storyline: { why: 'runs are known by their path in the source', keptOnTakeover: 'the runs brought from there stay' },
  compact: { why: 'each batch replaces the store whole', keptOnTakeover: 'the store is replaced with the records of the new source' },
};

/**
 * The stamps of what the dataset (of `kind`) at `convert` holds of `from` (undefined when none, as
 * readState), read once for the check that comes with them: throws OtherSourceError when the dataset
 * is synced from another directory that is still there. One that is gone (moved, deleted) has
 * nothing left to sync: its dataset is taken over, and `warn` says so.
 */
export function claimDataset(convert: string, from: string, kind: DatasetKind, warn?: (message: string) => void): TreeStamps | undefined {
  const state = readStateFile(convert);
  if (state === undefined) return undefined;
  const standing = standingOf(state.source, from);
  if (standing === 'same') return new Map(Object.entries(state.files));
  if (standing === 'gone') {
    warn?.(`sync: ${convert} was synced from ${state.source}, which is gone; it is synced from ${from} now (${ONE_SOURCE[kind].keptOnTakeover})`);
    return undefined;
  }
  if (standing === 'same-directory') return undefined;
  throw new OtherSourceError(`--convert ${convert}: synced from ${state.source}, not from --from ${from}; each dataset is synced from one source`, {
    hint: `sync ${from} into a dataset of its own (${ONE_SOURCE[kind].why}, so two sources would replace each other's), or drop ${convert} first`,
  });
}
