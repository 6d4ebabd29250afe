/**
 * Projection: the gateway's traces decoded into the Storyline dataset (runs, steps, tool calls, the
 * `events` relation and a `sources` row per trace), in the background. An RxJS pipeline
 * (ARCHITECTURE.md: RxJS owns time and concurrency):
 *
 *   merge(traces not yet projected at start, every durable append)
 *   groupBy(trace, { duration: idle timer })   one group per trace while it is active; every event
 *                                              restarts its idle timer (debounceTime)
 *   mergeMap(group => last())                  the trace has been idle for `idleMs`: into the pending set
 *   mergeMap(batch, PROJECTION_CONCURRENCY)    a batch projects every pending trace in one append
 *     retry(backoff)                           a failed batch keeps the set and runs again after
 *                                              1 s, 2 s, 4 s ... at most 60 s
 *   takeUntil(stop)
 *
 * Concurrency is bounded at one batch at a time: a batch holds the dataset's writer lock (an
 * `import --mode append` of the same dataset waits for it, or it for the import), so more would
 * only queue on the lock; instead, every trace that went idle meanwhile joins the next batch.
 * Capture never waits for projection: appends touch only the event log. A trace projected again
 * (it had more events since) replaces its earlier rows: its source path is retired first.
 *
 * What was projected is kept in `<state>/gateway/projected.json` (events per trace), written after
 * the commit; a crash in between only projects those traces again, which replaces them.
 */
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { setImmediate } from 'node:timers/promises';
import { EMPTY, Subject, defer, debounceTime, from, fromEvent, groupBy, last, lastValueFrom, merge, mergeMap, retry, takeUntil, tap, timer } from 'rxjs';
import { chunks } from '../../../lib/chunks.js';
import { writeFileDurably } from '../../../lib/durable.js';
import type { Logger } from '../../../lib/log.js';
import { ContentRefs } from '../../dataset/content-refs.js';
import { documentIdOf, storylineRows } from '../../dataset/rows.js';
import type { DatasetSink } from '../../dataset/writer.js';
import type { PriceList } from '../../pricing/cost.js';
import { storylineProblems } from '../../storyline/validate.js';
import { PendingSet, retryDelayMs } from '../../sync/worker.js';
import { eventRows, GATEWAY_FORMAT, inTraceOrder, storylineOf, tracePath } from './decode.js';
import type { EventLog, StoredEvent, Trace } from './event-log.js';

/** Events made into rows between two turns of the event loop. */
const EVENT_ROWS_SLICE = 10_000;
/** One batch at a time: see the module comment. */
export const PROJECTION_CONCURRENCY = 1;

export interface ProjectionOptions {
  idleMs: number;
  /** The projected-events file (`<state>/gateway/projected.json`). */
  statePath: string;
  /** Opens the dataset's writer for an append (it takes the writer lock). */
  beginAppend: (signal: AbortSignal) => Promise<DatasetSink>;
  /** After a committed batch: compaction and reclamation of a local dataset. */
  maintain?: (signal: AbortSignal) => Promise<void>;
  prices: PriceList;
  log: Logger;
  retryFirstMs?: number;
  retryMaxMs?: number;
}

export interface ProjectionStatus {
  /** Traces waiting for their batch (idle, not yet written). */
  pending: number;
  batches: number;
  failures: number;
  last_error: string | null;
  last_batch_at: string | null;
}

/** Writes a small state file crash-safely, under a temporary name without lib/durable's marker (writers of a dataset sweep those). */
export function writeStateFile(path: string, data: string): void {
  const temp = `${path}.partial`;
  rmSync(temp, { force: true });
  writeFileDurably(path, data, { temp, createDirectory: true });
}

export class Projection {
  private readonly projected: Map<string, number>;
  private readonly pending = new PendingSet();
  private readonly stop = new AbortController();
  private done: Promise<void> = Promise.resolve();
  private underWay: Promise<unknown> = Promise.resolve();
  readonly status: ProjectionStatus = { pending: 0, batches: 0, failures: 0, last_error: null, last_batch_at: null };
  /** Each committed batch (the read-only API opens the dataset again: an object-store mount reads a local copy of one snapshot). */
  readonly committed = new Subject<void>();

  constructor(
    private readonly events: EventLog,
    private readonly options: ProjectionOptions,
  ) {
    this.projected = new Map(existsSync(options.statePath) ? Object.entries((JSON.parse(readFileSync(options.statePath, 'utf8')) as { traces: Record<string, number> }).traces) : []);
  }

  /** Events of a trace already in the dataset. */
  projectedEvents(trace: Trace): number {
    return this.projected.get(trace.id) ?? 0;
  }

  start(): void {
    const { idleMs } = this.options;
    const first = this.options.retryFirstMs ?? 1_000;
    const max = this.options.retryMaxMs ?? 60_000;
    const unprojected = this.events.list().filter((t) => this.projectedEvents(t) < t.events);
    const stop$ = fromEvent(this.stop.signal, 'abort');
    const idle$ = merge(from(unprojected), this.events.appended).pipe(
      groupBy((trace) => trace.id, { duration: (group) => group.pipe(debounceTime(idleMs)) }),
      mergeMap((group) => group.pipe(last())),
    );
    const batches$ = idle$.pipe(
      tap((trace) => {
        this.pending.add([trace.id]);
        this.status.pending = this.pending.size;
      }),
      mergeMap(
        () =>
          defer(() => (this.underWay = this.batch())).pipe(
            retry({ count: Infinity, delay: (_error, attempt) => (this.stop.signal.aborted ? EMPTY : timer(retryDelayMs(attempt, first, max))) }),
          ),
        PROJECTION_CONCURRENCY,
      ),
      takeUntil(stop$),
    );
    this.done = lastValueFrom(batches$, { defaultValue: undefined }).then(() => undefined);
  }

  /** Projects every pending trace that has events the dataset lacks, in one append. */
  private async batch(): Promise<void> {
    const taken = this.pending.take();
    const traces = [...taken.keys()].map((id) => this.events.get(id)).filter((t): t is Trace => t !== undefined && this.projectedEvents(t) < t.events);
    if (traces.length === 0) {
      this.pending.clear(taken);
      this.status.pending = this.pending.size;
      return;
    }
    const signal = this.stop.signal;
    try {
      const counts = await this.write(traces, signal);
      for (const [id, n] of counts) this.projected.set(id, n);
      writeStateFile(this.options.statePath, `${JSON.stringify({ traces: Object.fromEntries(this.projected) })}\n`);
      this.pending.clear(taken);
      this.status.pending = this.pending.size;
      this.status.batches += 1;
      this.status.last_batch_at = new Date().toISOString();
      this.committed.next();
      this.options.log.info(`gateway: projected ${traces.length} trace(s) into the dataset`);
      await this.options.maintain?.(signal).catch((error: unknown) => this.options.log.warn(`gateway: compaction after projection failed (it runs again after the next batch): ${(error as Error).message}`));
    } catch (error) {
      this.status.failures += 1;
      this.status.last_error = (error as Error).message;
      if (!signal.aborted) this.options.log.warn(`gateway: projecting ${traces.length} trace(s) failed; retrying: ${(error as Error).message}`);
      throw error;
    }
  }

  /** One append holding the traces' rows (their earlier rows retired); returns the events written per trace. */
  private async write(traces: readonly Trace[], signal: AbortSignal): Promise<Map<string, number>> {
    const sink = await this.options.beginAppend(signal);
    const counts = new Map<string, number>();
    try {
      await sink.retireSources(traces.map(tracePath));
      const taken = sink.existingDocumentIds();
      const importedAt = new Date().toISOString();
      for (const trace of traces) {
        signal.throwIfAborted();
        const stored = await this.events.events(trace);
        const doc = storylineOf(trace, stored);
        const [problem] = storylineProblems(doc, 1);
        if (problem) {
          // A decoder fault, not the client's: the trace stays in the log and its live endpoints.
          this.options.log.error(`gateway: trace ${trace.id} does not decode to a valid Storyline (${problem.pointer}: ${problem.message}); left out of the dataset`);
          counts.set(trace.id, stored.length);
          continue;
        }
        let documentId = documentIdOf(doc);
        if (taken.has(documentId)) {
          let n = 2;
          while (taken.has(`${documentId}#${n}`)) n += 1;
          documentId = `${documentId}#${n}`;
        }
        taken.add(documentId);
        const refs = new ContentRefs();
        const sourcePath = tracePath(trace);
        const rows = storylineRows(doc, { documentId, sourcePath, sourceFormat: GATEWAY_FORMAT, sourceDocument: 0 }, this.options.prices, refs);
        await sink.add('contents', refs.take());
        await sink.add('runs', [rows.run]);
        await sink.add('steps', rows.steps);
        await sink.add('tool_calls', rows.toolCalls);
        await this.addEventRows(sink, trace, stored, documentId);
        await sink.add('sources', [{ source_path: sourcePath, source_document: 0, format: GATEWAY_FORMAT, run_count: 1, byte_size: trace.bytes, sha256: null, raw: null, imported_at: importedAt }]);
        counts.set(trace.id, stored.length);
      }
      await sink.commit();
      return counts;
    } catch (error) {
      await sink.abort();
      throw error;
    }
  }

  /** The `events` rows of a trace, a slice at a time with a turn of the event loop between, so a big trace does not hold up the gateway's requests. */
  private async addEventRows(sink: DatasetSink, trace: Trace, stored: readonly StoredEvent[], documentId: string): Promise<void> {
    let ordinal = 0;
    for (const slice of chunks(inTraceOrder(stored), EVENT_ROWS_SLICE)) {
      await sink.add('events', eventRows(trace, slice, documentId, ordinal));
      ordinal += slice.length;
      await setImmediate();
    }
  }

  /** Stops the pipeline: a batch under way is abandoned (its writer aborts, the dataset stays at its last snapshot) unless past its commit. */
  async close(): Promise<void> {
    this.stop.abort();
    await this.done.catch(() => {});
    await this.underWay.catch(() => {});
    this.committed.complete();
  }
}

/** `<state>/gateway/projected.json`. */
export const projectedStatePath = (gatewayDir: string): string => join(gatewayDir, 'projected.json');
