/**
 * Writing a dataset: rows arrive per relation, are cut into batches bounded by rows and bytes, each
 * batch becomes one row group of the relation's current Parquet part and is added to the SQLite index
 * being built beside it (both on the storage thread, storage/), and `commit` publishes the result:
 *
 * - create:  everything is built in a hidden temporary sibling directory that is renamed into place
 *            at the end, so a failed create leaves no dataset behind;
 * - append:  new parts go into the existing dataset under fresh names; the new snapshot lists old and
 *            new parts and the manifest swap is the commit point. Until then readers (and a crash, even
 *            `kill -9`) see the previous snapshot; the index is extended in a copy renamed in afterwards;
 * - replace: built beside like create; then the old dataset is moved aside, the new one renamed in
 *            (the commit point) and the old one removed (spec/trajstore.md, "States and transitions").
 *
 * A writer holds the dataset's writer lock (lock.ts) from `begin` until `commit` or `abort`, and
 * before anything else reclaims what killed writers left (recover.ts), so that a crash at any point
 * ends with the old or the new dataset at the path and nothing else once the next writer has run.
 */
import { accessSync, constants, existsSync, mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { ConflictError, ExitCode, InvalidInputError, NotFoundError, pathError, ToolError } from '../../lib/errors.js';
import { INDEX_FILE, LAYOUT_VERSION, MANIFEST_KEY, newPartStamp, publishSnapshot, readManifest, readSnapshot, UnsupportedLayoutError, type CompactColumn, type DatasetKind, type PartRef, type Snapshot } from './layout.js';
import type { Row } from './parquet.js';
import type { Relation } from './relations.js';
import { NEEDS_SPACING } from './rows.js';
import { FTS_TEXT_COLUMNS, hasCjk } from './fts-text.js';
import { openDatabase } from './sqlite.js';
import { StorageThread } from './storage/client.js';
import { indexSnapshotId } from './index-meta.js';
import { rebuildIndex, relationColumns, type RelationColumns } from './sqlite-index.js';
import { LocalObjectStore } from './store.js';
import { fsyncPath, renameDurably, replaceDirectory } from '../../lib/durable.js';
import { acquireWriterLock, lockOptions, type LockWait, type WriterLock } from './lock.js';
import { asidePathOf, scratchPathOf, canonicalPath, reclaimInside, recoverBeside } from './recover.js';

export type WriteMode = 'create' | 'append' | 'replace';

export interface DatasetWriterOptions extends LockWait {
  /** Local directory of the dataset. */
  path: string;
  mode: WriteMode;
  kind: DatasetKind;
  compact?: { id_path: string; timestamp_path: string; columns: CompactColumn[] };
  /** A relation's batch (one row group) is written when it holds this many rows... */
  batchRows?: number;
  /** ...or this many bytes of cell data. */
  batchBytes?: number;
  /** A part is closed and a new one started past this size. */
  partBytes?: number;
  /** The heap cap of the storage thread, sized for the largest row it may receive (import/memory.ts). */
  storageHeapMb?: number;
  /**
   * Also stops the commit: an aborted writer never commits (its caller may have stopped feeding it
   * part-way); it throws the signal's reason and is aborted by its caller.
   */
  signal?: AbortSignal;
  /** What the lock's holder is doing, for the messages of writers that wait for it (default: `import --mode <mode>`). */
  purpose?: string;
  /**
   * An append that finds no dataset (nothing at the path, or an empty directory) makes one instead:
   * sync's batches. Decided under the lock, as another writer may have made it since the caller looked.
   */
  createMissing?: boolean;
  /**
   * The dataset's writer lock, already held by the caller: the writer neither takes nor releases
   * it. Sync holds it across a whole batch, reading its sources and writing its state under it.
   */
  heldLock?: WriterLock;
  /** How a failure to write the dataset (a full disk) names it: its path by default; an object-store build names the dataset it is for. */
  shownAs?: string;
}

const DEFAULT_BATCH_ROWS = 5_000;
/**
 * 1 MiB: a batch passes through several stages (cloned to the storage thread, encoded, compressed,
 * inserted), and batches of 2 and 4 MiB were slower and raised the peak RSS of a 1 GB import (measured).
 */
const DEFAULT_BATCH_BYTES = 1024 * 1024;
const DEFAULT_PART_BYTES = 256 * 1024 * 1024;

/**
 * Whether a steps row's text must go to the full-text index spaced out (fts-text.ts): so flagged
 * by whoever put its long text in the content store (rows.ts), or visible in its own text cells.
 */
function needsSpacing(row: Row): boolean {
  if ((row as { [NEEDS_SPACING]?: true })[NEEDS_SPACING]) return true;
  return FTS_TEXT_COLUMNS.some((name) => typeof row[name] === 'string' && hasCjk(row[name]));
}

/** Rough in-memory size of a row, for batch bounds. */
function rowBytes(row: Row): number {
  let n = 16;
  for (const key in row) {
    const value = row[key];
    if (typeof value === 'string') n += value.length;
    else if (value instanceof Uint8Array) n += value.byteLength;
    else n += 8;
  }
  return n;
}

/**
 * A full disk (exit 5) as the failure of the dataset it struck, naming it: the files it struck (the
 * lock's, parts, the index being built, temporaries) are none the user gave, and a write's error
 * names no file at all. Other errors are returned as they are.
 */
export function diskFull(error: unknown, dataset: string): unknown {
  const typed = pathError(error);
  return typed instanceof ToolError && typed.exitCode === ExitCode.ResourceLimit && typed !== error ? pathError(error, dataset) : error;
}

/** What an import writes into: a local dataset's writer, or an object-store dataset's around it (s3-writer.ts). */
export interface DatasetSink {
  existingDocumentIds(): Set<string>;
  /** Takes the runs of these source paths out of the new snapshot (sync's converted-again sources). */
  retireSources(paths: readonly string[]): Promise<void>;
  add(relation: Relation, rows: readonly Row[]): Promise<void>;
  commit(): Promise<Snapshot>;
  abort(): Promise<void>;
}

/** A lock the caller holds, as the writer uses it: its release is the caller's, after the writer is done. */
const borrowed = (lock: WriterLock): WriterLock => ({ holder: lock.holder, release: () => {} });

/**
 * A part of the previous snapshot with more keys retired. Every earlier part gets them, as which
 * parts hold a key is not known without reading them; compaction (compaction.ts) empties the lists.
 */
function withRetired(part: PartRef, keys: readonly string[]): PartRef {
  const all = [...new Set([...(part.retired ?? []), ...keys])].sort();
  return { ...part, retired: all };
}

export class DatasetWriter implements DatasetSink {
  private readonly store: LocalObjectStore;
  private readonly columns: RelationColumns;
  /**
   * Rows waiting per relation. Each relation fills batches of its own, so a small relation (`runs`,
   * `sources`) gets few large row groups rather than a sliver in every flush of `steps`: a part keeps
   * the metadata of its row groups in memory until it closes.
   */
  private readonly pending = new Map<Relation, { rows: Row[]; bytes: number; spaced: boolean }>();
  private readonly storage: StorageThread;
  /** RETIRE_KEY values (relations.ts) of the previous snapshot's rows this write replaces, and how many rows that is, per relation. */
  private readonly retired = new Map<Relation, { keys: string[]; rows: number }>();
  /** The dataset holds what this writer wrote (an append's manifest swap, a create's or replace's rename): abort undoes nothing. */
  private committed = false;

  private constructor(
    private readonly options: DatasetWriterOptions,
    /** The dataset's canonical path (recover.ts). */
    private readonly path: string,
    /** Where the dataset is being built: `path` (append) or a temporary sibling (create/replace). */
    private readonly buildPath: string,
    private readonly previous: Snapshot | undefined,
    private readonly lock: WriterLock,
    partStamp: string,
  ) {
    this.store = new LocalObjectStore(buildPath);
    this.columns = relationColumns(options.kind, options.compact?.columns.map((c) => c.name));
    this.storage = new StorageThread({
      root: buildPath,
      indexPath: join(buildPath, INDEX_FILE),
      // An append extends a copy of the published index; create and replace start an empty one.
      freshIndex: previous === undefined,
      kind: options.kind,
      columns: this.columns,
      partStamp,
      partMetadata: options.compact ? [{ key: 'trajstore.compact', value: JSON.stringify(options.compact) }] : [],
      partBytes: options.partBytes ?? DEFAULT_PART_BYTES,
    }, options.storageHeapMb);
  }

  /**
   * The dataset writer for a mode: takes the dataset's lock (waiting for another writer), reclaims
   * what killed writers left, and checks the destination (exit 4 on create over an existing path).
   */
  static async begin(options: DatasetWriterOptions): Promise<DatasetWriter> {
    // The parent holds the lock and, for create and replace, the build.
    const parent = dirname(resolve(options.path));
    if (options.mode !== 'append' || options.createMissing) mkdirSync(parent, { recursive: true });
    else if (!existsSync(parent)) throw DatasetWriter.nothingToAppendTo(resolve(options.path));
    const path = canonicalPath(options.path);
    const lock = options.heldLock ? borrowed(options.heldLock) : await acquireWriterLock(path, lockOptions(options.purpose ?? `import --mode ${options.mode}`, options)).catch((error: unknown) => {
      throw diskFull(error, options.shownAs ?? path);
    });
    try {
      for (const note of recoverBeside(path)) options.log?.info(note);
      const mode = options.mode === 'append' && options.createMissing && !existsSync(join(path, MANIFEST_KEY)) ? (existsSync(path) ? 'replace' : 'create') : options.mode;
      if (mode === 'append') {
        const previous = await DatasetWriter.appendable(path, options);
        return new DatasetWriter(options, path, path, previous, lock, await newPartStamp());
      }
      await DatasetWriter.checkReplaceable(path, mode);
      const buildPath = scratchPathOf(path);
      mkdirSync(buildPath);
      return new DatasetWriter({ ...options, mode }, path, buildPath, undefined, lock, await newPartStamp());
    } catch (error) {
      lock.release();
      throw diskFull(error, options.shownAs ?? path);
    }
  }

  /** The current snapshot of the dataset an append adds to, with its leftovers reclaimed and its index current. */
  private static async appendable(path: string, options: DatasetWriterOptions): Promise<Snapshot> {
    if (!existsSync(path)) throw DatasetWriter.nothingToAppendTo(path);
    // As a create or replace refuses it (exit 4): a file is in the dataset's place.
    if (!statSync(path).isDirectory()) throw new ConflictError(`${path}: exists and is not a trajstore dataset; --mode append needs an existing Storyline dataset`);
    // The storage thread writes in it first, and an fs error's code does not cross threads: a dataset
    // the user cannot write is refused here (EACCES, exit 2), naming it.
    accessSync(path, constants.W_OK);
    const store = new LocalObjectStore(path);
    const manifest = await readManifest(store);
    if (!manifest) throw new InvalidInputError(`${path}: not a trajstore dataset (no trajstore.json); --mode append needs an existing Storyline dataset`);
    if (manifest.kind !== options.kind) {
      throw new InvalidInputError(`${path}: is a ${manifest.kind} dataset; --mode append needs a ${options.kind} dataset`);
    }
    const previous = await readSnapshot(store, manifest.snapshot_id);
    for (const note of await reclaimInside(store, previous)) options.log?.info(note);
    const indexPath = join(path, INDEX_FILE);
    if (indexSnapshotId(indexPath) !== previous.id) await rebuildIndex(store, previous, indexPath);
    return previous;
  }

  private static nothingToAppendTo(path: string): NotFoundError {
    return new NotFoundError(`${path}: no dataset to append to`, { hint: 'use --mode create for a new dataset' });
  }

  /** A create needs a new destination; a replace, a dataset or an empty directory (or nothing) to replace. */
  private static async checkReplaceable(path: string, mode: WriteMode): Promise<void> {
    if (!existsSync(path)) return;
    if (mode === 'create') throw new ConflictError(`${path}: already exists`, { hint: 'choose a new destination, or use --mode append or --mode replace' });
    // A dataset of an unsupported layout version is still a dataset: replace is how it is rewritten.
    const isDataset = await readManifest(new LocalObjectStore(path)).then(
      (manifest) => manifest !== undefined,
      (error: unknown) => error instanceof UnsupportedLayoutError,
    );
    const entries = statSync(path).isDirectory() ? readdirSync(path) : ['(a file)'];
    if (!isDataset && entries.length > 0) throw new ConflictError(`${path}: exists and is not a trajstore dataset; refusing to replace it`);
  }

  /** Document ids already in the dataset (append) and not retired by this write, for duplicate handling. */
  existingDocumentIds(): Set<string> {
    const ids = new Set<string>();
    if (!this.previous || this.options.kind !== 'storyline') return ids;
    const retired = new Set(this.retired.get('runs')?.keys);
    this.withPublishedIndex((db) => {
      for (const row of db.prepare('SELECT document_id FROM runs_stored').iterate() as Iterable<{ document_id: string }>) if (!retired.has(row.document_id)) ids.add(row.document_id);
    });
    return ids;
  }

  /** Reads the published index, which describes the previous snapshot (begin() rebuilt it if it was stale). */
  private withPublishedIndex(read: (db: ReturnType<typeof openDatabase>) => void): void {
    const db = openDatabase(join(this.buildPath, INDEX_FILE), { readonly: true, fileMustExist: true });
    try {
      read(db);
    } finally {
      db.close();
    }
  }

  /**
   * Retires what earlier writes brought in from these source paths (an append of a Storyline
   * dataset, before any row is added): their runs, steps, tool calls, source rows and gateway events leave the new
   * snapshot, which marks them in the parts that hold them (PartRef.retired) instead of rewriting
   * those; the index drops them. So a source converted again replaces its runs (sync): one run per
   * session, never `#2` copies. Older snapshots, and their readers, still see them.
   */
  async retireSources(paths: readonly string[]): Promise<void> {
    if (!this.previous || this.options.kind !== 'storyline' || paths.length === 0) return;
    const documents: string[] = [];
    const rows: Partial<Record<Relation, number>> = {};
    this.withPublishedIndex((db) => {
      const count = (table: string, column: string, keys: readonly string[]): number => {
        let n = 0;
        for (let at = 0; at < keys.length; at += 500) {
          const chunk = keys.slice(at, at + 500);
          n += (db.prepare(`SELECT count(*) AS n FROM ${table} WHERE ${column} IN (${chunk.map(() => '?').join(', ')})`).get(chunk) as { n: number }).n;
        }
        return n;
      };
      for (let at = 0; at < paths.length; at += 500) {
        const chunk = paths.slice(at, at + 500);
        for (const row of db.prepare(`SELECT document_id FROM runs_stored WHERE source_path IN (${chunk.map(() => '?').join(', ')})`).iterate(chunk) as Iterable<{ document_id: string }>) documents.push(row.document_id);
      }
      for (const relation of ['runs', 'steps', 'tool_calls'] as const) rows[relation] = count(`${relation}_stored`, 'document_id', documents);
      rows.sources = count('sources', 'source_path', paths);
      rows.events = count('events', 'source_path', paths);
    });
    const keysOf = (relation: Relation): string[] => (relation === 'sources' || relation === 'events' ? [...paths] : documents);
    for (const relation of ['runs', 'steps', 'tool_calls', 'sources', 'events'] as const) {
      const keys = keysOf(relation);
      if (keys.length === 0) continue;
      await this.storage.retire(relation, keys).catch(this.failed);
      const entry = this.retired.get(relation) ?? { keys: [], rows: 0 };
      entry.keys.push(...keys);
      entry.rows += rows[relation] ?? 0;
      this.retired.set(relation, entry);
    }
  }

  /** Queues rows; writes a batch when the bounds are reached (await it: that is the backpressure). */
  async add(relation: Relation, rows: readonly Row[]): Promise<void> {
    if (!this.columns[relation]) throw new Error(`a ${this.options.kind} dataset has no relation ${relation}`);
    const maxRows = this.options.batchRows ?? DEFAULT_BATCH_ROWS;
    const maxBytes = this.options.batchBytes ?? DEFAULT_BATCH_BYTES;
    // Batches are bounded however many rows one call brings (a document of 400,000 steps, say).
    for (const row of rows) {
      let batch = this.pending.get(relation);
      if (!batch) this.pending.set(relation, (batch = { rows: [], bytes: 0, spaced: false }));
      batch.rows.push(row);
      batch.bytes += rowBytes(row);
      if (!batch.spaced && relation === 'steps' && needsSpacing(row)) batch.spaced = true;
      if (batch.rows.length >= maxRows || batch.bytes >= maxBytes) await this.write(relation);
    }
  }

  /** Sends a relation's queued rows to the storage thread: one row group, and the same rows into the index. */
  private async write(relation: Relation): Promise<void> {
    // Content values go first: the index reads them back while it indexes the rows that refer to them.
    if (relation !== 'contents') await this.write('contents');
    const batch = this.pending.get(relation);
    this.pending.delete(relation);
    if (!batch || batch.rows.length === 0) return;
    await this.storage.write(relation, batch.rows, batch.spaced).catch(this.failed);
  }

  /** Writes what is left, publishes the snapshot, puts the dataset in place and releases the lock. */
  async commit(): Promise<Snapshot> {
    return this.publish().catch(this.failed);
  }

  /** Throws a failure of writing the dataset, a full disk named by the dataset (diskFull). */
  private readonly failed = (error: unknown): never => {
    throw diskFull(error, this.options.shownAs ?? this.path);
  };

  private async publish(): Promise<Snapshot> {
    for (const relation of [...this.pending.keys()]) await this.write(relation);
    await this.storage.closeParts();
    this.options.signal?.throwIfAborted();
    const relations: Partial<Record<Relation, PartRef[]>> = {};
    const rows: Partial<Record<Relation, number>> = {};
    for (const relation of Object.keys(this.columns) as Relation[]) {
      const retired = this.retired.get(relation);
      const previous = (this.previous?.relations[relation] ?? []).map((part) => (retired ? withRetired(part, retired.keys) : part));
      relations[relation] = [...previous, ...(this.storage.written[relation] ?? [])];
      // What the parts hold: a content value the dataset held already was sent but not stored again.
      rows[relation] = (this.previous?.rows[relation] ?? 0) - (retired?.rows ?? 0) + (this.storage.written[relation] ?? []).reduce((n, part) => n + part.rows, 0);
    }
    const snapshot = await publishSnapshot(this.store, {
      kind: this.options.kind,
      layout_version: LAYOUT_VERSION,
      parent: this.previous?.id ?? null,
      created_at: new Date().toISOString(),
      relations,
      rows,
      ...(this.options.compact ? { compact: this.options.compact } : {}),
    });
    // An append has committed with its manifest swap: the new snapshot is the dataset's truth and
    // nothing may be undone; the index follows (a failure or a crash now only leaves it stale).
    if (this.buildPath === this.path) this.committed = true;
    await this.storage.finishIndex(snapshot.id);
    await this.storage.publishIndex();
    if (this.buildPath !== this.path) {
      this.options.signal?.throwIfAborted();
      this.moveIntoPlace();
    }
    this.committed = true;
    this.lock.release();
    return snapshot;
  }

  private moveIntoPlace(): void {
    if (this.options.mode === 'create') {
      if (existsSync(this.path)) {
        rmSync(this.buildPath, { recursive: true, force: true });
        throw new ConflictError(`${this.path}: appeared while importing; nothing was written`);
      }
      fsyncPath(this.buildPath);
      renameDurably(this.buildPath, this.path);
      return;
    }
    // The aside has a fixed name, so that the next command finds it after a crash between the renames.
    replaceDirectory(this.buildPath, this.path, asidePathOf(this.path));
  }

  /** Removes everything this writer made unless it has committed, and releases the lock; the destination is as it was. */
  async abort(): Promise<void> {
    try {
      await this.storage.abort();
      if (this.committed) return;
      if (this.buildPath !== this.path) rmSync(this.buildPath, { recursive: true, force: true });
      else for (const refs of Object.values(this.storage.written)) for (const ref of refs ?? []) await this.store.delete(ref.key);
    } finally {
      this.lock.release();
    }
  }
}
