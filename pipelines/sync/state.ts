/**
 * What sync has converted: the stamp (scan.ts) of each source file as it was when last read, kept
 * in `sync-state.json` inside the converted dataset and written after each successful batch, under
 * the dataset's writer lock (batch.ts), so that it names the versions the dataset holds. It only
 * saves work: a batch killed after its commit and before this file is written converts those
 * files again on restart, which replaces their runs (never doubles them). A missing or unreadable
 * state (or one of another source) converts everything again, the same way.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileDurably } from '../../lib/durable.js';
import { SYNC_STATE_FILE } from '../dataset/layout.js';
import type { FileStamp, TreeStamps } from './scan.js';

const STATE_VERSION = 1;

interface StateFile {
  version: number;
  /** The source directory the stamps are of: another source starts afresh. */
  source: string;
  files: Record<string, FileStamp>;
}

/** The stamps of what the dataset at `convert` holds of `source`; undefined when it holds no state of it (none yet, dropped, replaced). */
export function readState(convert: string, source: string): TreeStamps | undefined {
  try {
    const state = JSON.parse(readFileSync(join(convert, SYNC_STATE_FILE), 'utf8')) as StateFile;
    if (state.version !== STATE_VERSION || state.source !== source) return undefined;
    return new Map(Object.entries(state.files));
  } catch {
    return undefined;
  }
}

export function writeState(convert: string, source: string, stamps: TreeStamps): void {
  const state: StateFile = { version: STATE_VERSION, source, files: Object.fromEntries(stamps) };
  writeFileDurably(join(convert, SYNC_STATE_FILE), `${JSON.stringify(state)}\n`);
}
