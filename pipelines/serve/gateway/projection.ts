/**
 * Projection: the gateway's traces decoded into the Storyline dataset (runs, steps, tool calls, the
 * `events` relation and a `sources` row per trace), in the background. An RxJS pipeline
 * (ARCHITECTURE.md: RxJS owns time and concurrency):
 *
 *   merge(traces not yet projected at start, every durable append)
 *   groupBy(trace, { duration: idle timer })   one group per trace while it is active; every event
 *                                              restarts its idle timer (debounceTime)
 *   mergeMap(group => last())                  the trace has been idle for `idleMs`: into the pending set
 *   merge(retry timers)                        a failed batch's traces are due again (below)
 *   mergeMap(batches, PROJECTION_CONCURRENCY)  every batch that is due: the pending traces in one
 *                                              append, each retry group in one of its own
 *   takeUntil(stop)
 *
 * Concurrency is bounded at one batch at a time: a batch holds the dataset's writer lock (an
 * `import --mode append` of the same dataset waits for it, or it for the import), so more would
 * only queue on the lock; instead, every trace that went idle meanwhile joins the next batch.
 * Capture never waits for projection: appends touch only the event log. A trace projected again
 * (it had more events since) replaces its earlier rows: its source path is retired first.
 *
 * A failed batch holds back no other trace. Its traces leave the pending set as two retry groups
 * (its halves), each due after 1 s, 2 s, 4 s ... at most 60 s by its failures so far, and a group
 * that fails again splits again: a trace that cannot be projected ends up retried alone, while every
 * other trace, those that go idle later included, is projected as usual. A failure that came after
 * another one may be the store's (down, or its lock held by an import), not the batch's: the groups
 * it made are joined again into one batch as soon as a batch commits, so a store that was away
 * costs one more append, not one per trace.
 *
 * What was projected is kept in `<state>/gateway/projected.json` (events per trace), written after
 * the commit; a crash in between only projects those traces again, which replaces them. Then the
 * event log lets go of the traces written whole (event-log.ts `settle`): the dataset holds their
 * events, which a later projection of the trace (more events came) reads back from it. A trace let
 * go of leaves projected.json (and memory) with the next batch or start: its summary in the log
 * counts its projected events (`archived`), so the file, rewritten whole per batch, holds only the
 * traces not let go of (and those that decode to no valid Storyline), not every trace ever seen.
 */
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { setImmediate } from 'node:timers/promises';
import { Subject, defer, debounceTime, from, fromEvent, groupBy, last, lastValueFrom, merge, mergeMap, takeUntil, tap, timer } from 'rxjs';
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
  /** Traces waiting for their batch (idle, not yet written), those in `retrying` included. */
  pending: number;
  /** Traces whose batch failed, waiting for a batch of their own group. */
  retrying: number;
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

/**
 * The events of each trace already projected, as the state file says. A file that cannot be read
 * as such (damaged, or edited by hand) stops nothing: it is taken as empty, so the traces the log
 * holds are projected again, which replaces their rows; those it let go of count by their summary.
 */
function readProjected(path: string, log: Logger): Map<string, number> {
  if (!existsSync(path)) return new Map();
  try {
    const traces = (JSON.parse(readFileSync(path, 'utf8')) as { traces?: unknown } | null)?.traces;
    const counts = typeof traces === 'object' && traces !== null && !Array.isArray(traces) ? Object.entries(traces) : undefined;
    if (counts?.every(([, n]) => Number.isSafeInteger(n) && (n as number) >= 0)) return new Map(counts as Array<[string, number]>);
    throw new Error('it is not {"traces": {<trace>: <events>}}');
  } catch (error) {
    log.warn(`${path}: unreadable (${(error as Error).message}); the traces the event log holds are projected again`);
    return new Map();
  }
}

/** Traces of a failed batch that are retried together, apart from every other trace. */
interface RetryGroup {
  ids: readonly string[];
  /** Failed batches the group's traces were in, one after another. */
  failures: number;
  /** Its delay has passed (its timer fired: no clock is compared, so it cannot be missed by a millisecond). */
  due: boolean;
  /** Made by a failure that followed another: joined with the others like it once a batch commits. */
  suspectStore: boolean;
}

/** The traces one append projects: a retry group's, or the pending set's (`taken`: the entries to clear). */
interface Batch {
  ids: readonly string[];
  failures: number;
  taken?: Map<string, number>;
}

export class Projection {
  private readonly projected: Map<string, number>;
  private readonly pending = new PendingSet();
  private readonly stop = new AbortController();
  private done: Promise<void> = Promise.resolve();
  private underWay: Promise<unknown> = Promise.resolve();
  /** Traces of failed batches, in groups that are retried apart from the rest and from each other. */
  private readonly retrying: RetryGroup[] = [];
  /** Retry groups with their delay: the group is due, and a turn of the pipeline comes, after it. */
  private readonly retryTimers = new Subject<{ group: RetryGroup; delayMs: number }>();
  /** Batches failed since the last commit. */
  private failuresSinceCommit = 0;
  /** The traces of the retry group whose batch is running (out of `retrying` meanwhile). */
  private inFlight: readonly string[] = [];
  private readonly outcomes: Omit<ProjectionStatus, 'pending' | 'retrying'> = { batches: 0, failures: 0, last_error: null, last_batch_at: null };
  /** Each committed batch (the read-only API opens the dataset again: an object-store mount reads a local copy of one snapshot). */
  readonly committed = new Subject<void>();

  constructor(
    private readonly events: EventLog,
    private readonly options: ProjectionOptions,
  ) {
    this.projected = readProjected(options.statePath, options.log);
    this.forgetSettled(this.projected);
  }

  /** Drops the traces whose summary in the log (`archived`) counts what was projected of them. */
  private forgetSettled(counts: Iterable<readonly [string, number]>): void {
    for (const [id, events] of counts) if ((this.events.get(id)?.archived ?? 0) >= events) this.projected.delete(id);
  }

  /** Events of a trace already in the dataset: those the log let go of (`archived`) at least. */
  projectedEvents(trace: Trace): number {
    return Math.max(this.projected.get(trace.id) ?? 0, trace.archived);
  }

  start(): void {
    const { idleMs } = this.options;
    const unprojected = this.events.list().filter((t) => this.projectedEvents(t) < t.events);
    const stop$ = fromEvent(this.stop.signal, 'abort');
    const idle$ = merge(from(unprojected), this.events.appended).pipe(
      groupBy((trace) => trace.id, { duration: (group) => group.pipe(debounceTime(idleMs)) }),
      mergeMap((group) => group.pipe(last())),
      tap((trace) => this.pending.add([trace.id])),
    );
    const retriesDue$ = this.retryTimers.pipe(mergeMap(({ group, delayMs }) => timer(delayMs).pipe(tap(() => (group.due = true)))));
    const batches$ = merge(idle$, retriesDue$).pipe(
      mergeMap(() => defer(() => (this.underWay = this.projectDue())), PROJECTION_CONCURRENCY),
      takeUntil(stop$),
    );
    this.done = lastValueFrom(batches$, { defaultValue: undefined }).then(() => undefined);
  }

  /** Runs every batch that is due: retry groups whose time has come, one batch each, then the pending traces together. */
  private async projectDue(): Promise<void> {
    for (let batch = this.nextBatch(); batch && !this.stop.signal.aborted; batch = this.nextBatch()) await this.project(batch);
  }

  private nextBatch(): Batch | undefined {
    const due = this.retrying.findIndex((group) => group.due);
    if (due >= 0) {
      const [group] = this.retrying.splice(due, 1);
      this.inFlight = group!.ids;
      return { ids: group!.ids, failures: group!.failures };
    }
    // A trace in a retry group stays pending (more events may have come since its group was read) but waits for its group.
    const inGroups = new Set(this.retrying.flatMap((group) => group.ids));
    const taken = new Map([...this.pending.take()].filter(([id]) => !inGroups.has(id)));
    return taken.size ? { ids: [...taken.keys()], failures: 0, taken } : undefined;
  }

  /** Projects a batch's traces that have events the dataset lacks, in one append; when that fails, they become retry groups. */
  private async project(batch: Batch): Promise<void> {
    const traces = batch.ids.map((id) => this.events.get(id)).filter((t): t is Trace => t !== undefined && this.projectedEvents(t) < t.events);
    const signal = this.stop.signal;
    try {
      if (traces.length === 0) return;
      const written = await this.write(traces, signal);
      for (const { trace, events } of written) this.projected.set(trace.id, events);
      writeStateFile(this.options.statePath, `${JSON.stringify({ traces: Object.fromEntries(this.projected) })}\n`);
      await this.events.settle(written.filter((w) => w.inDataset).map((w) => [w.trace, w.events] as const));
      // A settled trace's summary (settled.log, `archived`) now stands for what was projected of it: the state file keeps only the others.
      this.forgetSettled(written.map((w) => [w.trace.id, w.events] as const));
      this.outcomes.batches += 1;
      this.outcomes.last_batch_at = new Date().toISOString();
      this.failuresSinceCommit = 0;
      this.joinSuspectGroups();
      this.committed.next();
      this.options.log.info(`gateway: projected ${traces.length} trace(s) into the dataset`);
      await this.options.maintain?.(signal).catch((error: unknown) => this.options.log.warn(`gateway: compaction after projection failed (it runs again after the next batch): ${(error as Error).message}`));
    } catch (error) {
      // Stopping abandons the batch: its traces are projected after the next start.
      if (signal.aborted) return;
      this.outcomes.failures += 1;
      this.outcomes.last_error = (error as Error).message;
      const delayMs = this.retryLater(traces.map((t) => t.id), batch.failures + 1, this.failuresSinceCommit > 0);
      this.failuresSinceCommit += 1;
      this.options.log.warn(`gateway: projecting ${traces.length} trace(s) failed; retrying them in ${delayMs / 1000} s, apart from other traces: ${(error as Error).message}`);
    } finally {
      if (batch.taken) this.pending.clear(batch.taken);
      this.inFlight = [];
    }
  }

  /** The traces of a failed batch as retry groups: its halves, or itself when it is one trace. Returns their delay. */
  private retryLater(ids: readonly string[], failures: number, suspectStore: boolean): number {
    const delayMs = retryDelayMs(failures, this.options.retryFirstMs ?? 1_000, this.options.retryMaxMs ?? 60_000);
    const half = Math.ceil(ids.length / 2);
    for (const part of ids.length > 1 ? [ids.slice(0, half), ids.slice(half)] : [ids]) {
      const group = { ids: part, failures, due: false, suspectStore };
      this.retrying.push(group);
      this.retryTimers.next({ group, delayMs });
    }
    return delayMs;
  }

  /** After a commit: the groups that failures of the store may have made become one batch, due now. */
  private joinSuspectGroups(): void {
    const suspect = this.retrying.filter((group) => group.suspectStore);
    if (suspect.length < 2) return;
    for (const group of suspect) this.retrying.splice(this.retrying.indexOf(group), 1);
    const failures = Math.max(...suspect.map((group) => group.failures));
    this.retrying.push({ ids: suspect.flatMap((group) => group.ids), failures, due: true, suspectStore: false });
  }

  get status(): ProjectionStatus {
    const inGroups = [...this.retrying.flatMap((group) => group.ids), ...this.inFlight];
    const onlyInGroups = inGroups.filter((id) => !this.pending.has(id)).length;
    return { pending: this.pending.size + onlyInGroups, retrying: inGroups.length, ...this.outcomes };
  }

  /** One append holding the traces' rows (their earlier rows retired); returns the events projected per trace, and whether they are in the dataset. */
  private async write(traces: readonly Trace[], signal: AbortSignal): Promise<Array<{ trace: Trace; events: number; inDataset: boolean }>> {
    const sink = await this.options.beginAppend(signal);
    const written: Array<{ trace: Trace; events: number; inDataset: boolean }> = [];
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
          written.push({ trace, events: stored.length, inDataset: false });
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
        written.push({ trace, events: stored.length, inDataset: true });
      }
      await sink.commit();
      return written;
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
    this.retryTimers.complete();
  }
}

/** `<state>/gateway/projected.json`. */
export const projectedStatePath = (gatewayDir: string): string => join(gatewayDir, 'projected.json');
