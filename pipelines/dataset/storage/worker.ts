/**
 * The storage thread: one Parquet part writer per relation, rotated past `partBytes`, and the
 * SQLite index being built (client.ts says why it runs on a thread of its own).
 */
import { closeSync, fdatasync, openSync } from 'node:fs';
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import { tempSiblingOf } from '../../../lib/durable.js';
import { CONTENT_REFS_METADATA, PartWriter } from '../parquet.js';
import type { Relation } from '../relations.js';
import { IndexBuilder } from '../sqlite-index.js';
import { LocalObjectStore } from '../store.js';
import { STORAGE_THREAD_ROLE, storageFailure, type StorageReply, type StorageRequest, type StorageSetup, type StorageThreadData } from './protocol.js';

/**
 * A part is also closed after this many row groups: the writer keeps the metadata of each until the
 * part closes (statistics, page locations), so this bounds the thread's memory whatever the input size.
 */
const MAX_ROW_GROUPS_PER_PART = 256;
/** Batches between background writebacks of the index file (see `Writeback`). */
const WRITEBACK_BATCHES = 32;

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

/** One part writer per relation, rotated past `partBytes`, and the index builder. */
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

  async write(relation: Relation, cells: unknown[], spaced: boolean): Promise<StorageReply['closed']> {
    // The index first: it says which content values are new, and only those go to a part.
    const stored = this.index.insertCells(relation, cells, spaced);
    this.writeback.afterBatch();
    if (stored.length === 0) return undefined;
    const part = this.partFor(relation);
    await part.writeCells(stored);
    if (part.size < this.setup.partBytes && part.rowGroups < MAX_ROW_GROUPS_PER_PART) return undefined;
    this.open.delete(relation);
    return [{ relation, ref: await part.close() }];
  }

  /** Retired rows leave the index being built (the snapshot marks them in the parts, writer.ts). */
  retire(relation: Relation, keys: string[]): void {
    this.index.retire(relation, keys);
  }

  private partFor(relation: Relation): PartWriter {
    let part = this.open.get(relation);
    if (!part) {
      const name = `${this.setup.partStamp}-${String(this.sequence++).padStart(4, '0')}`;
      const metadata = [{ key: 'trajstore.relation', value: relation }, CONTENT_REFS_METADATA, ...this.setup.partMetadata];
      part = new PartWriter(this.store, `parts/${relation}/${name}.parquet`, this.setup.columns[relation] ?? [], metadata);
      this.open.set(relation, part);
    }
    return part;
  }

  async closeParts(): Promise<StorageReply['closed']> {
    const closed: NonNullable<StorageReply['closed']> = [];
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

if (!isMainThread && (workerData as Partial<StorageThreadData> | undefined)?.role === STORAGE_THREAD_ROLE && parentPort) {
  const port = parentPort;
  let storage: Storage | undefined;
  let setupError: unknown;
  try {
    storage = new Storage((workerData as StorageThreadData).setup);
  } catch (error) {
    setupError = error;
  }
  const handle = async (request: StorageRequest): Promise<StorageReply['closed']> => {
    if (!storage) throw setupError ?? new Error('storage not open');
    switch (request.op) {
      case 'write':
        return storage.write(request.relation, request.cells, request.spaced);
      case 'retire':
        return void storage.retire(request.relation, request.keys);
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
  port.on('message', (request: StorageRequest) => {
    queue = queue.then(async () => {
      try {
        const closed = await handle(request);
        port.postMessage({ id: request.id, ...(closed ? { closed } : {}) } satisfies StorageReply);
      } catch (error) {
        port.postMessage({ id: request.id, error: storageFailure(error) } satisfies StorageReply);
      }
    });
  });
}
