/**
 * What sync has converted: the stamp (scan.ts) of each source file as it was when last read, kept
 * in `sync-state.json` inside the converted dataset and written after each successful batch. It
 * only saves work: a batch killed after its commit and before this file is written converts those
 * files again on restart, which replaces their runs (never doubles them). A missing or unreadable
 * state converts everything again, the same way.
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

export function readState(convert: string, source: string): TreeStamps {
  try {
    const state = JSON.parse(readFileSync(join(convert, SYNC_STATE_FILE), 'utf8')) as StateFile;
    if (state.version !== STATE_VERSION || state.source !== source) return new Map();
    return new Map(Object.entries(state.files));
  } catch {
    return new Map();
  }
}

export function writeState(convert: string, source: string, stamps: TreeStamps): void {
  const state: StateFile = { version: STATE_VERSION, source, files: Object.fromEntries(stamps) };
  writeFileDurably(join(convert, SYNC_STATE_FILE), `${JSON.stringify(state)}\n`);
}
