/**
 * The storage side of a dataset being written runs on a worker thread (worker.ts): each batch of rows
 * becomes a row group of its relation's current Parquet part and is added to the SQLite index being
 * built beside the parts. Parquet encoding and the index (inserts, FTS5 tokenising) cost about as
 * much as decoding does, so on a machine of two cores they run beside it instead of after it (issue 3).
 *
 * Batches cross as flat arrays of cells (`flatCells`): cloning an array of values costs far less than
 * cloning objects with their keys. A bounded number of batches is in flight; `write` waits for the
 * oldest one beyond it, so a slow disk or index slows the import (backpressure) and memory stays bounded.
 */
import { Worker } from 'node:worker_threads';
import { ResourceLimitError } from '../../../lib/errors.js';
import { distPath } from '../../../lib/install.js';
import type { PartRef } from '../layout.js';
import { flatCells, type Row } from '../parquet.js';
import type { Relation } from '../relations.js';
import { failureError, STORAGE_THREAD_ROLE, type StorageBody, type StorageReply, type StorageSetup, type StorageThreadData } from './protocol.js';

const WORKER = distPath('pipelines', 'dataset', 'storage', 'worker.js');
/**
 * Batches queued for the thread before `write` waits: enough to keep it busy while the next one is
 * decoded; more only raised the peak RSS of a 1 GB import (measured).
 */
const MAX_IN_FLIGHT = 3;
const DEFAULT_HEAP_MB = 64;

export class StorageThread {
  private readonly worker: Worker;
  private next = 0;
  private readonly waiting = new Map<number, { resolve: () => void; reject: (error: Error) => void }>();
  private readonly inFlight: Array<Promise<void>> = [];
  private failure: Error | undefined;
  private ended = false;
  /** Parts the thread has finished, by relation, in the order written. */
  readonly written: Partial<Record<Relation, PartRef[]>> = {};

  /**
   * A small heap by default: queued batches wait serialized in the port and the thread decodes one at
   * a time; a tight limit keeps its garbage collected (Parquet pages and SQLite pages live outside
   * it). An import of big documents asks for room for its largest row.
   */
  constructor(
    private readonly setup: StorageSetup,
    heapMb = DEFAULT_HEAP_MB,
  ) {
    const data: StorageThreadData = { role: STORAGE_THREAD_ROLE, setup };
    const limitMb = Math.max(heapMb, DEFAULT_HEAP_MB);
    this.worker = new Worker(WORKER, {
      workerData: data,
      resourceLimits: { maxOldGenerationSizeMb: limitMb, maxYoungGenerationSizeMb: 8 },
    });
    this.worker.on('message', (reply: StorageReply) => {
      for (const { relation, ref } of reply.closed ?? []) (this.written[relation] ??= []).push(ref);
      const waiter = this.waiting.get(reply.id);
      this.waiting.delete(reply.id);
      if (reply.error !== undefined) waiter?.reject(failureError(reply.error));
      else waiter?.resolve();
    });
    const fail = (error: Error): void => {
      this.failure ??= error;
      for (const waiter of this.waiting.values()) waiter.reject(error);
      this.waiting.clear();
    };
    this.worker.on('error', (error: Error & { code?: string }) =>
      fail(error.code === 'ERR_WORKER_OUT_OF_MEMORY' ? new ResourceLimitError(`the storage thread ran out of memory (heap limit ${limitMb} MB)`, { hint: 'a single row is too large; split the document' }) : error),
    );
    this.worker.on('exit', (code) => {
      if (this.waiting.size > 0) fail(new Error(`storage thread exited (${code})`));
    });
  }

  private send(request: StorageBody): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    const id = this.next++;
    const done = new Promise<void>((resolve, reject) => this.waiting.set(id, { resolve, reject }));
    this.worker.postMessage({ ...request, id });
    return done;
  }

  /**
   * Queues rows of a relation as its next row group and index batch; waits when too many are in
   * flight. `spaced`: some row's text needs spacing for the full-text index (rows.ts NEEDS_SPACING).
   */
  async write(relation: Relation, rows: readonly Row[], spaced: boolean): Promise<void> {
    const columns = this.setup.columns[relation];
    if (!columns) throw new Error(`a ${this.setup.kind} dataset has no relation ${relation}`);
    const done = this.send({ op: 'write', relation, cells: flatCells(columns, rows), spaced });
    done.catch(() => {}); // awaited below or by closeParts(); a failure surfaces there
    this.inFlight.push(done);
    while (this.inFlight.length > MAX_IN_FLIGHT) await this.inFlight.shift();
  }

  /** Deletes rows of a relation from the index being built, by their RETIRE_KEY (before any row of this write is added). */
  async retire(relation: Relation, keys: string[]): Promise<void> {
    await this.send({ op: 'retire', relation, keys });
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
    this.ended = true;
    await this.worker.terminate();
  }

  /** Removes the open parts and the index being built, and ends the thread; finished parts are the caller's. Does nothing once the thread has ended. */
  async abort(): Promise<void> {
    if (this.ended) return;
    this.ended = true;
    if (!this.failure) await this.send({ op: 'abort' }).catch(() => {});
    await this.worker.terminate();
  }
}
