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
 * - replace: built beside like create; then the old dataset is moved aside, the new one renamed in and
 *            the old one removed (spec/trajstore.md, "States and transitions").
 */
import { existsSync, mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { basename, dirname, join, resolve } from 'node:path';
import { ConflictError, InvalidInputError, NotFoundError } from '../../lib/errors.js';
import { INDEX_FILE, LAYOUT_VERSION, publishSnapshot, readManifest, readSnapshot, UnsupportedLayoutError, type CompactColumn, type DatasetKind, type PartRef, type Snapshot } from './layout.js';
import type { Row } from './parquet.js';
import type { Relation } from './relations.js';
import { openDatabase } from './sqlite.js';
import { StorageThread } from './storage/client.js';
import { indexSnapshotId } from './index-meta.js';
import { rebuildIndex, relationColumns, type RelationColumns } from './sqlite-index.js';
import { LocalObjectStore } from './store.js';
import { TEMP_MARKER, fsyncPath, renameDurably, replaceDirectory } from '../../lib/durable.js';
import { processAlive } from '../../lib/process.js';

export type WriteMode = 'create' | 'append' | 'replace';

export interface DatasetWriterOptions {
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
}

const DEFAULT_BATCH_ROWS = 5_000;
/**
 * 1 MiB: a batch passes through several stages (cloned to the storage thread, encoded, compressed,
 * inserted), and batches of 2 and 4 MiB were slower and raised the peak RSS of a 1 GB import (measured).
 */
const DEFAULT_BATCH_BYTES = 1024 * 1024;
const DEFAULT_PART_BYTES = 256 * 1024 * 1024;

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

export class DatasetWriter {
  private readonly store: LocalObjectStore;
  private readonly columns: RelationColumns;
  /**
   * Rows waiting per relation. Each relation fills batches of its own, so a small relation (`runs`,
   * `sources`) gets few large row groups rather than a sliver in every flush of `steps`: a part keeps
   * the metadata of its row groups in memory until it closes.
   */
  private readonly pending = new Map<Relation, { rows: Row[]; bytes: number }>();
  private readonly storage: StorageThread;
  private readonly rowCounts: Partial<Record<Relation, number>> = {};
  private finished = false;

  private constructor(
    private readonly options: DatasetWriterOptions,
    /** Where the dataset is being built: the final path (append) or a temporary sibling (create/replace). */
    private readonly buildPath: string,
    private readonly previous: Snapshot | undefined,
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
      partStamp: `${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`,
      partMetadata: options.compact ? [{ key: 'trajstore.compact', value: JSON.stringify(options.compact) }] : [],
      partBytes: options.partBytes ?? DEFAULT_PART_BYTES,
    }, options.storageHeapMb);
  }

  /** The dataset writer for a mode, after checking the destination (exit 4 on create over an existing path). */
  static async begin(options: DatasetWriterOptions): Promise<DatasetWriter> {
    const path = resolve(options.path);
    if (options.mode === 'append') {
      if (!existsSync(path)) throw new NotFoundError(`${path}: no dataset to append to`, { hint: 'use --mode create for a new dataset' });
      const store = new LocalObjectStore(path);
      const manifest = await readManifest(store);
      if (!manifest) throw new InvalidInputError(`${path}: not a trajstore dataset (no trajstore.json); --mode append needs an existing Storyline dataset`);
      if (manifest.kind !== options.kind) {
        throw new InvalidInputError(`${path}: is a ${manifest.kind} dataset; --mode append needs a ${options.kind} dataset`);
      }
      const previous = await readSnapshot(store, manifest.snapshot_id);
      sweepTemporaries(path);
      await sweepUnreferencedParts(store, Date.now());
      const indexPath = join(path, INDEX_FILE);
      if (indexSnapshotId(indexPath) !== previous.id) await rebuildIndex(store, previous, indexPath);
      return new DatasetWriter(options, path, previous);
    }
    if (options.mode === 'create' && existsSync(path)) {
      throw new ConflictError(`${path}: already exists`, { hint: 'choose a new destination, or use --mode append or --mode replace' });
    }
    if (options.mode === 'replace' && existsSync(path)) {
      // A dataset of an unsupported layout version is still a dataset: replace is how it is rewritten.
      const isDataset = await readManifest(new LocalObjectStore(path)).then(
        (manifest) => manifest !== undefined,
        (error: unknown) => error instanceof UnsupportedLayoutError,
      );
      const entries = statSync(path).isDirectory() ? readdirSync(path) : ['(a file)'];
      if (!isDataset && entries.length > 0) {
        throw new ConflictError(`${path}: exists and is not a trajstore dataset; refusing to replace it`);
      }
    }
    mkdirSync(dirname(path), { recursive: true });
    sweepDeadBuilds(path);
    // The builder's pid in the name lets a later import tell a dead build (kill -9) from a running one.
    const buildPath = join(dirname(path), `${buildPrefix(path)}${process.pid}-${randomBytes(6).toString('hex')}`);
    mkdirSync(buildPath);
    return new DatasetWriter(options, buildPath, undefined);
  }

  /** Document ids already in the dataset (append), for duplicate handling. */
  existingDocumentIds(): Set<string> {
    const ids = new Set<string>();
    if (!this.previous || this.options.kind !== 'storyline') return ids;
    // The published index describes the previous snapshot (begin() rebuilt it if it was stale).
    const db = openDatabase(join(this.buildPath, INDEX_FILE), { readonly: true, fileMustExist: true });
    try {
      for (const row of db.prepare('SELECT document_id FROM runs').iterate() as Iterable<{ document_id: string }>) ids.add(row.document_id);
    } finally {
      db.close();
    }
    return ids;
  }

  /** Queues rows; writes a batch when the bounds are reached (await it: that is the backpressure). */
  async add(relation: Relation, rows: readonly Row[]): Promise<void> {
    if (!this.columns[relation]) throw new Error(`a ${this.options.kind} dataset has no relation ${relation}`);
    const maxRows = this.options.batchRows ?? DEFAULT_BATCH_ROWS;
    const maxBytes = this.options.batchBytes ?? DEFAULT_BATCH_BYTES;
    // Batches are bounded however many rows one call brings (a document of 400,000 steps, say).
    for (const row of rows) {
      let batch = this.pending.get(relation);
      if (!batch) this.pending.set(relation, (batch = { rows: [], bytes: 0 }));
      batch.rows.push(row);
      batch.bytes += rowBytes(row);
      if (batch.rows.length >= maxRows || batch.bytes >= maxBytes) await this.write(relation);
    }
  }

  /** Sends a relation's queued rows to the storage thread: one row group, and the same rows into the index. */
  private async write(relation: Relation): Promise<void> {
    const batch = this.pending.get(relation);
    this.pending.delete(relation);
    if (!batch || batch.rows.length === 0) return;
    await this.storage.write(relation, batch.rows);
    this.rowCounts[relation] = (this.rowCounts[relation] ?? 0) + batch.rows.length;
  }

  /** Writes what is left, publishes the snapshot and puts the dataset in place. */
  async commit(): Promise<Snapshot> {
    for (const relation of [...this.pending.keys()]) await this.write(relation);
    await this.storage.closeParts();
    const relations: Partial<Record<Relation, PartRef[]>> = {};
    const rows: Partial<Record<Relation, number>> = {};
    for (const relation of Object.keys(this.columns) as Relation[]) {
      relations[relation] = [...(this.previous?.relations[relation] ?? []), ...(this.storage.written[relation] ?? [])];
      rows[relation] = (this.previous?.rows[relation] ?? 0) + (this.rowCounts[relation] ?? 0);
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
    // From here the new snapshot is the dataset's truth; the index follows (a crash now only makes it stale).
    await this.storage.finishIndex(snapshot.id);
    await this.storage.publishIndex();
    this.finished = true;
    if (this.buildPath !== resolve(this.options.path)) this.moveIntoPlace();
    return snapshot;
  }

  private moveIntoPlace(): void {
    const target = resolve(this.options.path);
    if (this.options.mode === 'create') {
      if (existsSync(target)) {
        rmSync(this.buildPath, { recursive: true, force: true });
        throw new ConflictError(`${target}: appeared while importing; nothing was written`);
      }
      fsyncPath(this.buildPath);
      renameDurably(this.buildPath, target);
      return;
    }
    replaceDirectory(this.buildPath, target);
  }

  /** Removes everything this writer made; the destination is as it was. */
  async abort(): Promise<void> {
    if (this.finished) return;
    this.finished = true;
    await this.storage.abort();
    if (this.buildPath !== resolve(this.options.path)) {
      rmSync(this.buildPath, { recursive: true, force: true });
      return;
    }
    for (const refs of Object.values(this.storage.written)) for (const ref of refs ?? []) await this.store.delete(ref.key);
  }
}

/** Removes temporary files (parts, index copies) that a crashed writer left inside a dataset. */
function sweepTemporaries(root: string): void {
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.includes(TEMP_MARKER)) rmSync(path, { force: true });
    }
  };
  walk(root);
}

/**
 * Removes Parquet parts that no snapshot lists and that are older than this import: parts a killed
 * append had finished before its manifest swap. Parts of every snapshot stay (older snapshots remain
 * readable); a part newer than `startedAt` may belong to another writer and stays too.
 */
async function sweepUnreferencedParts(store: LocalObjectStore, startedAt: number): Promise<void> {
  const referenced = new Set<string>();
  for (const key of await store.list('snapshots/')) {
    if (!key.endsWith('.json') || key.includes(TEMP_MARKER)) continue;
    const snapshot = await readSnapshot(store, key.slice('snapshots/'.length, -'.json'.length));
    for (const parts of Object.values(snapshot.relations)) for (const part of parts ?? []) referenced.add(part.key);
  }
  for (const key of await store.list('parts/')) {
    if (!key.endsWith('.parquet') || referenced.has(key)) continue;
    const path = join(store.root, ...key.split('/'));
    if (statSync(path).mtimeMs < startedAt) rmSync(path, { force: true });
  }
}

/** Hidden sibling directories in which a create or replace of `path` builds the dataset. */
const buildPrefix = (path: string): string => `.${basename(path)}${TEMP_MARKER}`;

/** Removes the build directories of creates and replaces of `path` whose process is gone (killed mid-import). */
function sweepDeadBuilds(path: string): void {
  const prefix = buildPrefix(path);
  for (const entry of readdirSync(dirname(path), { withFileTypes: true })) {
    if (!entry.isDirectory() || !entry.name.startsWith(prefix)) continue;
    const owner = /^(\d+)-[0-9a-f]+$/.exec(entry.name.slice(prefix.length));
    if (owner && !processAlive(Number(owner[1]))) rmSync(join(dirname(path), entry.name), { recursive: true, force: true });
  }
}
