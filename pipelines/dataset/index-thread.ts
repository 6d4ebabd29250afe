/**
 * The index being built during an import, on a worker thread: SQLite inserts and FTS5 tokenising
 * cost about half as much as everything else an import does, so they run beside the decoding and
 * Parquet encoding instead of after it. A bounded number of batches is in flight; `insert` waits for the
 * oldest one beyond it, so a slow index slows the import (backpressure) and memory stays bounded.
 */
import { rmSync, renameSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { dirname } from 'node:path';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import type { DatasetKind } from './layout.js';
import type { Row } from './parquet.js';
import type { ColumnDef, Relation } from './relations.js';
import { IndexBuilder, flatCells } from './sqlite-index.js';
import { TEMP_MARKER, fsyncDir } from './store.js';

const ROLE = 'trajstore-index-builder';
/**
 * Relation batches queued for the thread before `insert` waits: a writer flush sends one per relation
 * (four), so this keeps about two flushes queued and the thread busy while the next one is decoded.
 */
const MAX_IN_FLIGHT = 8;

interface Setup {
  role: typeof ROLE;
  path: string;
  tempPath: string;
  kind: DatasetKind;
  columns: Partial<Record<Relation, readonly ColumnDef[]>>;
  fresh: boolean;
}

type Body = { op: 'insert'; relation: Relation; cells: unknown[] } | { op: 'finish'; snapshotId: string };
type Request = Body & { id: number };
type Reply = { id: number; error?: string };

export class ThreadedIndex {
  private readonly worker: Worker;
  private next = 0;
  private readonly waiting = new Map<number, { resolve: () => void; reject: (error: Error) => void }>();
  private readonly inFlight: Array<Promise<void>> = [];
  private failure: Error | undefined;
  readonly tempPath: string;

  /** Starts building an index that will replace `path` (a copy of it when `fresh` is false). */
  constructor(
    private readonly path: string,
    kind: DatasetKind,
    private readonly columns: Partial<Record<Relation, readonly ColumnDef[]>>,
    fresh: boolean,
  ) {
    this.tempPath = `${path}${TEMP_MARKER}${randomBytes(6).toString('hex')}`;
    const setup: Setup = { role: ROLE, path, tempPath: this.tempPath, kind, columns, fresh };
    // A small heap: queued batches wait serialized in the port, the thread decodes one at a time, and a
    // tight limit keeps its garbage collected.
    this.worker = new Worker(new URL(import.meta.url), { workerData: setup, resourceLimits: { maxOldGenerationSizeMb: 48, maxYoungGenerationSizeMb: 8 } });
    this.worker.on('message', (reply: Reply) => {
      const waiter = this.waiting.get(reply.id);
      this.waiting.delete(reply.id);
      if (reply.error !== undefined) waiter?.reject(new Error(`index: ${reply.error}`));
      else waiter?.resolve();
    });
    const fail = (error: Error): void => {
      this.failure ??= error;
      for (const waiter of this.waiting.values()) waiter.reject(error);
      this.waiting.clear();
    };
    this.worker.on('error', fail);
    this.worker.on('exit', (code) => {
      if (this.waiting.size > 0) fail(new Error(`index builder thread exited (${code})`));
    });
  }

  private send(request: Body): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    const id = this.next++;
    const done = new Promise<void>((resolve, reject) => this.waiting.set(id, { resolve, reject }));
    this.worker.postMessage({ ...request, id });
    return done;
  }

  async insert(relation: Relation, rows: readonly Row[]): Promise<void> {
    const columns = this.columns[relation];
    if (!columns) throw new Error(`index has no relation ${relation}`);
    const done = this.send({ op: 'insert', relation, cells: flatCells(columns, rows) });
    done.catch(() => {}); // awaited below or by finish(); a failure surfaces there
    this.inFlight.push(done);
    while (this.inFlight.length > MAX_IN_FLIGHT) await this.inFlight.shift();
  }

  /** Waits for every batch, records the snapshot id, closes and fsyncs the index (still under its temporary name). */
  async finish(snapshotId: string): Promise<void> {
    for (const pending of this.inFlight.splice(0)) await pending;
    await this.send({ op: 'finish', snapshotId });
    await this.worker.terminate();
  }

  publish(): void {
    renameSync(this.tempPath, this.path);
    fsyncDir(dirname(this.path));
  }

  async abort(): Promise<void> {
    await this.worker.terminate();
    rmSync(this.tempPath, { force: true });
  }
}

if (!isMainThread && (workerData as Setup | undefined)?.role === ROLE && parentPort) {
  const setup = workerData as Setup;
  const port = parentPort;
  let builder: IndexBuilder | undefined;
  let setupError: string | undefined;
  try {
    builder = IndexBuilder.at(setup.path, setup.tempPath, setup.kind, setup.columns, setup.fresh);
  } catch (error) {
    setupError = (error as Error).message;
  }
  port.on('message', (request: Request) => {
    try {
      if (!builder) throw new Error(setupError ?? 'not open');
      if (request.op === 'insert') builder.insertCells(request.relation, request.cells);
      else builder.finish(request.snapshotId);
      port.postMessage({ id: request.id } satisfies Reply);
    } catch (error) {
      port.postMessage({ id: request.id, error: (error as Error).message } satisfies Reply);
    }
  });
}
