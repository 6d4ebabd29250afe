/**
 * One sync batch: the pending files read once each, mirrored byte for byte into `--to`, and
 * converted into the Storyline dataset at `--convert`, replacing the runs they brought before
 * (writer.ts retireSources); then the dataset compacted and reclaimed when it is due. With
 * `--input-format compact-jsonl` the whole tree is imported again and replaces the compact store.
 *
 * A batch is atomic where it matters: a mirrored file is replaced whole (lib/durable.ts), the
 * dataset moves to its next snapshot at the commit or not at all, and the state file (state.ts)
 * follows. Killed anywhere, the next batch converts again what it cannot be sure of, and conversion
 * replaces runs rather than adding them: every complete line ends up imported once.
 */
import { mkdirSync, readFileSync, rmdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { writeFileDurably } from '../../lib/durable.js';
import { pathError, ResourceLimitError, type ToolError } from '../../lib/errors.js';
import type { Logger } from '../../lib/log.js';
import { walkFiles } from '../../lib/walk.js';
import type { CompactSpec } from '../dataset/compact/paths.js';
import { maintainDataset, type CompactionLimits } from '../dataset/compaction.js';
import { readManifest } from '../dataset/layout.js';
import { lockOptions, withWriterLock, type WriterLock } from '../dataset/lock.js';
import { diskFull } from '../dataset/writer.js';
import { LocalObjectStore } from '../dataset/store.js';
import { decodeUtf8, MAX_DOCUMENT_BYTES, parseJson } from '../formats/lines.js';
import type { InputFormat } from '../formats/registry.js';
import { runCompactImport } from '../import/compact.js';
import { runImport } from '../import/import.js';
import { largestDocumentBytes } from '../import/memory.js';
import { bytesFile, type ImportFile } from '../import/sources.js';
import type { Price } from '../pricing/prices.js';
import { isWatched, outOfReach, scanTree, stampOf, stampUnder, unlessGone, unreadableError, type FileStamp } from './scan.js';
import type { SourceFile } from '../formats/types.js';
import { claimDataset, writeState } from './state.js';

export interface SyncTarget {
  /** The source directory (canonical). */
  from: string;
  /** The mirror directory. */
  to: string;
  /** The converted dataset. */
  convert: string;
  inputFormat: InputFormat | 'auto' | 'compact-jsonl';
  /** `--column` specs of a compact store. */
  columns: CompactSpec;
  prices: Record<string, Price>;
  /** How long superseded snapshots and unlisted parts stay (compaction.ts). */
  graceMs: number;
  /** How long to wait for another writer of the dataset, or of the mirror (mirror.ts). */
  lockTimeoutMs: number;
  compaction?: CompactionLimits;
  log: Logger;
}

export interface BatchOutcome {
  files: number;
  /** Documents converted (Storyline runs, or compact records). */
  records: number;
  /** Pending files that could not be read: nothing of them written, their runs and mirror copies kept, for a later batch. */
  held: HeldFile[];
}

export interface HeldFile {
  path: string;
  /** Why, naming the file. */
  error: ToolError;
}

/** The most one read into a buffer takes (Node's limit for readFileSync): a batch holds each file whole. */
const MAX_SOURCE_BYTES = 2 ** 31 - 1;

const tooLarge = (rel: string, size: number): ResourceLimitError =>
  new ResourceLimitError(`${rel}: ${size} bytes; sync reads files smaller than 2 GiB`);

/** A `.json` file is one JSON document; the other watched files are JSON Lines. */
const isWholeDocument = (relPath: string): boolean => relPath.toLowerCase().endsWith('.json');

/**
 * The bytes of a log that are complete: up to its last newline for JSON Lines (the agent may be
 * writing the next line; it waits for a later batch), the whole file for `.json`.
 */
export function completeBytes(relPath: string, bytes: Buffer): Buffer {
  if (isWholeDocument(relPath)) return bytes;
  return bytes.subarray(0, bytes.lastIndexOf(0x0a) + 1);
}

/**
 * Throws when `.json` bytes do not parse: a file caught half-rewritten. Converted, it would be
 * skipped and its runs retired; held, it keeps them until it parses again. (One over the largest
 * document is refused by the conversion whatever it holds, so it is not parsed here.)
 */
function checkWholeDocument(rel: string, bytes: Buffer): void {
  if (isWholeDocument(rel) && bytes.length <= MAX_DOCUMENT_BYTES) parseJson(decodeUtf8(bytes, rel), rel);
}

interface SourceRead {
  stamp: FileStamp;
  bytes: Buffer;
}

/** The source file `rel` as it is now, or undefined when it is gone (deleted, rotated away). Throws when it cannot be read. */
function readSource(from: string, rel: string): SourceRead | undefined {
  const stamp = stampUnder(from, rel);
  if (!stamp) return undefined;
  if (stamp.size > MAX_SOURCE_BYTES) throw tooLarge(rel, stamp.size);
  try {
    const bytes = unlessGone(() => readFileSync(join(from, rel)));
    if (bytes) checkWholeDocument(rel, bytes);
    return bytes && { stamp, bytes };
  } catch (error) {
    // It grew past the limit since its stat.
    if ((error as NodeJS.ErrnoException).code === 'ERR_FS_FILE_TOO_LARGE') throw tooLarge(rel, stampOf(join(from, rel))?.size ?? stamp.size);
    throw error;
  }
}

/**
 * `rel` gone from the mirror, and the directories that leaves empty: a directory the source replaced
 * by a file of its name is emptied in the same batch, and must not be in the way of that file.
 */
function removeMirrored(to: string, rel: string): void {
  unlessGone(() => rmSync(join(to, rel), { force: true }));
  for (let dir = dirname(rel); dir !== '.'; dir = dirname(dir)) {
    try {
      rmdirSync(join(to, dir));
    } catch (error) {
      // Not empty (it holds other files), or already gone: the directories above stay too.
      if (['ENOTEMPTY', 'EEXIST', 'ENOENT', 'ENOTDIR'].includes((error as NodeJS.ErrnoException).code ?? '')) return;
      throw error;
    }
  }
}

/**
 * Runs a batch over the pending files `paths`; returns what it did. A file that cannot be read (or,
 * `.json`, does not parse) is held (left out, as though it had not changed) and the others go on;
 * any other failure throws, nothing committed.
 *
 * The batch reads its sources, mirrors them, converts them and records their stamps all under the
 * dataset's writer lock, so that the batches of two syncs (or a sync and a drop, or an import) never
 * interleave: the state names the versions the dataset holds, and the mirror the ones last read.
 * A dataset that holds no state of this source (dropped, replaced, or new) is given the whole tree,
 * not just what changed since this worker's previous batch: what it held before is gone.
 */
export async function runBatch(target: SyncTarget, paths: readonly string[], signal: AbortSignal): Promise<BatchOutcome> {
  const inputFormat = target.inputFormat;
  if (inputFormat === 'compact-jsonl') return compactBatch(target, signal);
  mkdirSync(dirname(target.convert), { recursive: true });
  const outcome = await withWriterLock(target.convert, lockOptions('sync', { lockTimeoutMs: target.lockTimeoutMs, signal, log: target.log }), (lock) => convertUnderLock({ ...target, inputFormat }, paths, lock, signal)).catch(
    (error: unknown) => {
      // Taking the lock, or writing the state, on a full disk: the dataset is what failed (writer.ts).
      throw diskFull(error, target.convert);
    },
  );
  // Nothing was read: nothing was written.
  if (outcome.files === 0) return outcome;
  await maintainDataset(target.convert, { purpose: 'sync compaction', graceMs: target.graceMs, ...(target.compaction ? { limits: target.compaction } : {}), signal, log: target.log }).catch((error: unknown) => {
    if (signal.aborted) throw error;
    // The batch has committed: compaction only keeps the dataset quick to read (a crash in it leaves
    // the old snapshot or the new one), so its failure (a full disk) fails no batch; the next one tries again.
    target.log.warn(`sync: ${target.convert}: the batch is in, but compacting the dataset failed (the next batch tries again): ${(pathError(error, target.convert) as Error).message}`);
  });
  return outcome;
}

/**
 * What a batch takes when the dataset holds no state of this source (new, dropped, replaced, or taken
 * over from a source that moved): every file of the tree, and every watched file of the mirror (this
 * sync's: owner.ts) that the tree lacks, so that the copy of a file deleted meanwhile, which no state
 * remembers, is read as gone and leaves both outputs. Files out of reach (an unreadable directory,
 * the source root itself) are not taken as gone: the worker's own scan holds them back.
 */
function wholeTree(target: SyncTarget, pending: readonly string[]): string[] {
  const unread: string[] = [];
  const tree = scanTree(target.from, (rel) => unread.push(rel));
  const stale: string[] = [];
  walkFiles(target.to, (rel, entry) => {
    if (entry.isFile() && isWatched(entry.name) && !tree.has(rel) && !outOfReach(rel, unread)) stale.push(rel);
  });
  return [...new Set([...pending, ...tree.keys(), ...stale])];
}

/** The batch's reads and writes, under the dataset's lock. */
async function convertUnderLock(target: SyncTarget & { inputFormat: InputFormat | 'auto' }, pending: readonly string[], lock: WriterLock, signal: AbortSignal): Promise<BatchOutcome> {
  const manifest = await readManifest(new LocalObjectStore(target.convert));
  const state = manifest ? claimDataset(target.convert, target.from, 'storyline', (message) => target.log.warn(message)) : undefined;
  const paths = state ? pending : wholeTree(target, pending);
  // Nothing changed and a dataset is there (a --once run): nothing to write.
  if (paths.length === 0 && manifest) return { files: 0, records: 0, held: [] };
  const held: HeldFile[] = [];
  /** Each file read: its bytes, or undefined when it is gone. */
  const sources = new Map<string, SourceRead | undefined>();
  for (const rel of [...paths].sort()) {
    signal.throwIfAborted();
    try {
      sources.set(rel, readSource(target.from, rel));
    } catch (error) {
      held.push({ path: rel, error: unreadableError(rel, error) });
    }
  }
  if (sources.size === 0 && manifest) return { files: 0, records: 0, held };
  // Deleted or rotated away: gone from the mirror (first: see removeMirrored), and their runs from the next snapshot.
  for (const [rel, source] of sources) if (!source) removeMirrored(target.to, rel);
  const files: ImportFile[] = [];
  for (const [rel, source] of sources) {
    if (!source) continue;
    const mirrored = join(target.to, rel);
    try {
      writeFileDurably(mirrored, source.bytes, { createDirectory: true });
    } catch (error) {
      // A write's error names no file (a full disk): the mirror's copy is what could not be written.
      throw pathError(error, mirrored);
    }
    files.push(bytesFile(join(target.from, rel), rel, completeBytes(rel, source.bytes)));
  }
  const summary = await runImport({
    from: target.from,
    to: target.convert,
    inputFormat: target.inputFormat,
    outputFormat: 'storyline',
    // A first batch creates the dataset (over an empty directory too).
    mode: 'append',
    createMissing: true,
    heldLock: lock,
    onDuplicate: 'suffix',
    onError: 'skip',
    prices: target.prices,
    largestDocumentBytes: Math.max(0, ...files.map((f) => f.size ?? 0)),
    stdin: Readable.from([]),
    log: target.log,
    signal,
    // What a new dataset holds nothing of retires nothing.
    sources: { files, retire: [...sources.keys()] },
    purpose: 'sync',
  });
  const stamps = state ?? new Map();
  for (const [rel, source] of sources) {
    if (source) stamps.set(rel, source.stamp);
    else stamps.delete(rel);
  }
  writeState(target.convert, target.from, stamps);
  return { files: sources.size, records: summary.total.runs, held };
}

/**
 * A source read when it is opened, up to its last complete line: a compact batch reads the whole
 * tree again, one file at a time, and a log being written must not fail it (nor lose its records).
 * A file gone since the scan was deleted: it holds nothing. One that cannot be read fails, naming it.
 */
function completeLinesFile(path: string, relPath: string): SourceFile {
  return {
    path,
    relPath,
    name: relPath,
    open: () => {
      let read: Buffer | undefined;
      try {
        read = unlessGone(() => readFileSync(path));
      } catch (error) {
        throw unreadableError(relPath, error);
      }
      const bytes = completeBytes(relPath, read ?? Buffer.alloc(0));
      return Readable.from(bytes.length > 0 ? [bytes] : [], { objectMode: false });
    },
  };
}

/**
 * A compact-jsonl batch: the whole tree again, atomically replacing the store at `--convert`. The
 * store is replaced whole, so a file left out would lose its records: anything the batch cannot
 * read in full (a file or directory without permission, a complete line or `.json` that does not
 * parse, as `import --input-format compact-jsonl` refuses it) fails the batch, and the previous
 * store stays until a retry succeeds. It is checked to be this source's, replaced and recorded as
 * this source's (state.ts) under the store's writer lock, as a Storyline batch is.
 */
async function compactBatch(target: SyncTarget, signal: AbortSignal): Promise<BatchOutcome> {
  mkdirSync(dirname(target.convert), { recursive: true });
  return withWriterLock(target.convert, lockOptions('sync', { lockTimeoutMs: target.lockTimeoutMs, signal, log: target.log }), async (lock) => {
    if (await readManifest(new LocalObjectStore(target.convert))) claimDataset(target.convert, target.from, 'compact', (message) => target.log.warn(message));
    const files = [...scanTree(target.from).keys()].sort().map((rel) => completeLinesFile(join(target.from, rel), rel));
    const summary = await runCompactImport({
      files,
      from: target.from,
      to: target.convert,
      // Of nothing, a replace is a create.
      mode: 'replace',
      heldLock: lock,
      columns: target.columns,
      onError: 'fail',
      largestDocumentBytes: largestDocumentBytes(target.from),
      log: target.log,
      signal,
    });
    // The batch reads the whole tree again: the state only names the source.
    writeState(target.convert, target.from, new Map());
    return { files: summary.files, records: summary.total.runs, held: [] };
  }).catch((error: unknown) => {
    throw diskFull(error, target.convert);
  });
}
