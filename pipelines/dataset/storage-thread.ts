/**
 * The storage side of a dataset being written, on a worker thread: each batch of rows becomes a row
 * group of its relation's current Parquet part and is added to the SQLite index being built beside
 * the parts. Parquet encoding and the index (inserts, FTS5 tokenising) cost about as much as
 * decoding does, so on a machine of two cores they run beside it instead of after it (issue 3).
 *
 * Batches cross as flat arrays of cells (`flatCells`): cloning an array of values costs far less than
 * cloning objects with their keys. A bounded number of batches is in flight; `write` waits for the
 * oldest one beyond it, so a slow disk or index slows the import (backpressure) and memory stays bounded.
 */
import { closeSync, fdatasync, openSync } from 'node:fs';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import type { DatasetKind, PartRef } from './layout.js';
import { PartWriter, flatCells, type Row } from './parquet.js';
import type { Relation } from './relations.js';
import { IndexBuilder, type RelationColumns } from './sqlite-index.js';
import { LocalObjectStore } from './store.js';
import { tempSiblingOf } from '../../lib/durable.js';

const ROLE = 'trajstore-storage';
/**
 * Batches queued for the thread before `write` waits: enough to keep it busy while the next one is
 * decoded; more only raised the peak RSS of a 1 GB import (measured).
 */
const MAX_IN_FLIGHT = 3;
/**
 * A part is also closed after this many row groups: the writer keeps the metadata of each until the
 * part closes (statistics, page locations), so this bounds the thread's memory whatever the input size.
 */
const MAX_ROW_GROUPS_PER_PART = 256;
/** Batches between background writebacks of the index file (see `Writeback`). */
const WRITEBACK_BATCHES = 32;

export interface StorageSetup {
  /** Root of the dataset being written (parts go under `parts/<relation>/`). */
  root: string;
  /** The index file the new index will replace (a copy of it is extended when `freshIndex` is false). */
  indexPath: string;
  freshIndex: boolean;
  kind: DatasetKind;
  columns: RelationColumns;
  /** Part names are `<partStamp>-<sequence>`. */
  partStamp: string;
  /** Key-value metadata of every part besides `trajstore.relation`. */
  partMetadata: Array<{ key: string; value: string }>;
  /** A part is closed and a new one started past this size. */
  partBytes: number;
}

type Body =
  | { op: 'write'; relation: Relation; cells: unknown[] }
  | { op: 'closeParts' }
  | { op: 'finishIndex'; snapshotId: string }
  | { op: 'publishIndex' }
  | { op: 'abort' };
type Request = Body & { id: number };
/** `closed`: parts finished by the request (a write past `partBytes`, or `closeParts`). */
type Reply = { id: number; closed?: Array<{ relation: Relation; ref: PartRef }>; error?: string };

export class StorageThread {
  private readonly worker: Worker;
  private next = 0;
  private readonly waiting = new Map<number, { resolve: () => void; reject: (error: Error) => void }>();
  private readonly inFlight: Array<Promise<void>> = [];
  private failure: Error | undefined;
  /** Parts the thread has finished, by relation, in the order written. */
  readonly written: Partial<Record<Relation, PartRef[]>> = {};

  constructor(private readonly setup: StorageSetup) {
    // A small heap: queued batches wait serialized in the port and the thread decodes one at a time;
    // a tight limit keeps its garbage collected (Parquet pages and SQLite pages live outside it).
    this.worker = new Worker(new URL(import.meta.url), {
      workerData: { role: ROLE, setup },
      resourceLimits: { maxOldGenerationSizeMb: 64, maxYoungGenerationSizeMb: 8 },
    });
    this.worker.on('message', (reply: Reply) => {
      for (const { relation, ref } of reply.closed ?? []) (this.written[relation] ??= []).push(ref);
      const waiter = this.waiting.get(reply.id);
      this.waiting.delete(reply.id);
      if (reply.error !== undefined) waiter?.reject(new Error(reply.error));
      else waiter?.resolve();
    });
    const fail = (error: Error): void => {
      this.failure ??= error;
      for (const waiter of this.waiting.values()) waiter.reject(error);
      this.waiting.clear();
    };
    this.worker.on('error', fail);
    this.worker.on('exit', (code) => {
      if (this.waiting.size > 0) fail(new Error(`storage thread exited (${code})`));
    });
  }

  private send(request: Body): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    const id = this.next++;
    const done = new Promise<void>((resolve, reject) => this.waiting.set(id, { resolve, reject }));
    this.worker.postMessage({ ...request, id });
    return done;
  }

  /** Queues rows of a relation as its next row group and index batch; waits when too many are in flight. */
  async write(relation: Relation, rows: readonly Row[]): Promise<void> {
    const columns = this.setup.columns[relation];
    if (!columns) throw new Error(`a ${this.setup.kind} dataset has no relation ${relation}`);
    const done = this.send({ op: 'write', relation, cells: flatCells(columns, rows) });
    done.catch(() => {}); // awaited below or by closeParts(); a failure surfaces there
    this.inFlight.push(done);
    while (this.inFlight.length > MAX_IN_FLIGHT) await this.inFlight.shift();
  }

  /** Waits for every batch and closes the open parts; `written` then lists every part of this write. */
  async closeParts(): Promise<void> {
    for (const pending of this.inFlight.splice(0)) await pending;
    await this.send({ op: 'closeParts' });
  }

  /** Records the snapshot id, closes and fsyncs the index (still under its temporary name). */
  async finishIndex(snapshotId: string): Promise<void> {
    await this.send({ op: 'finishIndex', snapshotId });
  }

  /** Renames the finished index into place and ends the thread. */
  async publishIndex(): Promise<void> {
    await this.send({ op: 'publishIndex' });
    await this.worker.terminate();
  }

  /** Removes the open parts and the index being built, and ends the thread; finished parts are the caller's. */
  async abort(): Promise<void> {
    if (!this.failure) await this.send({ op: 'abort' }).catch(() => {});
    await this.worker.terminate();
  }
}

/**
 * Early writeback of the index file. It is written through the page cache and fsynced once finished,
 * and that fsync waited for all of it at the end of the import (about 0.1 s for 200 MB of input); an
 * fdatasync started in the background now and then lets the disk take it while the import goes on.
 * Failures are left to the final fsync, which reports them.
 */
class Writeback {
  private fd: number | undefined;
  private running: Promise<void> | undefined;
  private batches = 0;

  constructor(private readonly path: string) {}

  afterBatch(): void {
    if (++this.batches % WRITEBACK_BATCHES !== 0 || this.running) return;
    const fd = (this.fd ??= openSync(this.path, 'r'));
    this.running = new Promise((resolve) =>
      fdatasync(fd, () => {
        this.running = undefined;
        resolve();
      }),
    );
  }

  /** Waits for a writeback under way (its descriptor must not close under it) and closes the file. */
  async close(): Promise<void> {
    await this.running;
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}

/** The thread's side: one part writer per relation, rotated past `partBytes`, and the index builder. */
class Storage {
  private readonly store: LocalObjectStore;
  private readonly open = new Map<Relation, PartWriter>();
  private sequence = 0;
  private readonly index: IndexBuilder;
  private readonly writeback: Writeback;

  constructor(private readonly setup: StorageSetup) {
    this.store = new LocalObjectStore(setup.root);
    const tempPath = tempSiblingOf(setup.indexPath);
    this.index = IndexBuilder.at(setup.indexPath, tempPath, setup.kind, setup.columns, setup.freshIndex);
    this.writeback = new Writeback(tempPath);
  }

  async write(relation: Relation, cells: unknown[]): Promise<Reply['closed']> {
    const part = this.partFor(relation);
    await part.writeCells(cells);
    this.index.insertCells(relation, cells);
    this.writeback.afterBatch();
    if (part.size < this.setup.partBytes && part.rowGroups < MAX_ROW_GROUPS_PER_PART) return undefined;
    this.open.delete(relation);
    return [{ relation, ref: await part.close() }];
  }

  private partFor(relation: Relation): PartWriter {
    let part = this.open.get(relation);
    if (!part) {
      const name = `${this.setup.partStamp}-${String(this.sequence++).padStart(4, '0')}`;
      const metadata = [{ key: 'trajstore.relation', value: relation }, ...this.setup.partMetadata];
      part = new PartWriter(this.store, `parts/${relation}/${name}.parquet`, this.setup.columns[relation] ?? [], metadata);
      this.open.set(relation, part);
    }
    return part;
  }

  async closeParts(): Promise<Reply['closed']> {
    const closed: NonNullable<Reply['closed']> = [];
    for (const [relation, part] of this.open) closed.push({ relation, ref: await part.close() });
    this.open.clear();
    return closed;
  }

  async finishIndex(snapshotId: string): Promise<void> {
    await this.writeback.close();
    this.index.finish(snapshotId);
  }

  publishIndex(): void {
    this.index.publish();
  }

  async abort(): Promise<void> {
    for (const part of this.open.values()) part.abort();
    this.open.clear();
    await this.writeback.close();
    this.index.abort();
  }
}

if (!isMainThread && (workerData as { role?: string } | undefined)?.role === ROLE && parentPort) {
  const port = parentPort;
  let storage: Storage | undefined;
  let setupError: string | undefined;
  try {
    storage = new Storage((workerData as { setup: StorageSetup }).setup);
  } catch (error) {
    setupError = (error as Error).message;
  }
  const handle = async (request: Request): Promise<Reply['closed']> => {
    if (!storage) throw new Error(setupError ?? 'storage not open');
    switch (request.op) {
      case 'write':
        return storage.write(request.relation, request.cells);
      case 'closeParts':
        return storage.closeParts();
      case 'finishIndex':
        return void (await storage.finishIndex(request.snapshotId));
      case 'publishIndex':
        return void storage.publishIndex();
      case 'abort':
        return void (await storage.abort());
    }
  };
  // Requests run one after another: a part's row groups must be written in order.
  let queue: Promise<void> = Promise.resolve();
  port.on('message', (request: Request) => {
    queue = queue.then(async () => {
      try {
        const closed = await handle(request);
        port.postMessage({ id: request.id, ...(closed ? { closed } : {}) } satisfies Reply);
      } catch (error) {
        port.postMessage({ id: request.id, error: (error as Error).message } satisfies Reply);
      }
    });
  });
}
