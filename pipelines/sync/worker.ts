/**
 * The resident sync worker, an RxJS pipeline (ARCHITECTURE.md: RxJS owns time and concurrency):
 *
 *   timer(0, interval)              a tick now and then each interval (one tick with --once)
 *   map(scan the tree)              what changed since the previous scan (scan.ts)
 *   scan(into the pending set)      changes accumulate; a batch clears only what it committed
 *   filter(something pending)
 *   exhaustMap(batch)               one batch at a time; ticks during a batch only add to the set
 *     retry(backoff)                a failed batch keeps the set and runs again after
 *                                   1 s, 2 s, 4 s ... at most 60 s (resident mode; --once fails)
 *   takeUntil(stop)                 SIGINT/SIGTERM: the batch under way is abandoned whole (its
 *                                   writer aborts and leaves the dataset at its last snapshot),
 *                                   or finishes if it is past its commit; the worker then ends
 */
import { rmSync, statSync } from 'node:fs';
import { isRandomSuffix, TEMP_MARKER } from '../../lib/durable.js';
import { walkFiles } from '../../lib/walk.js';
import { defer, exhaustMap, filter, fromEvent, lastValueFrom, map, of, retry, scan, takeUntil, timer, type Observable } from 'rxjs';
import { runBatch, type BatchOutcome, type SyncTarget } from './batch.js';
import { changesBetween, scanTree, type TreeStamps } from './scan.js';
import { readState } from './state.js';
import { SYNC_DEFAULTS } from './defaults.js';


export interface SyncRun extends SyncTarget {
  intervalMs: number;
  once: boolean;
  retryFirstMs?: number;
  retryMaxMs?: number;
  signal: AbortSignal;
  /** Told of every batch attempt: the command prints one line for each. */
  onBatch: (report: BatchReport) => void;
}

export interface BatchReport {
  batch: number;
  attempt: number;
  files: number;
  records: number;
  durationMs: number;
  error?: Error;
  /** After a failure: when the batch runs again (undefined with --once). */
  retryInMs?: number;
}

/**
 * Keys waiting for a batch (sync: files; the gateway's projection: traces). Each entry carries the
 * number of the addition that last named it, so a batch that took a key before a later change
 * clears it only if nothing named it since.
 */
export class PendingSet {
  private readonly entries = new Map<string, number>();
  private generation = 0;

  add(paths: readonly string[]): this {
    this.generation += 1;
    for (const path of paths) this.entries.set(path, this.generation);
    return this;
  }

  get size(): number {
    return this.entries.size;
  }

  has(path: string): boolean {
    return this.entries.has(path);
  }

  take(): Map<string, number> {
    return new Map(this.entries);
  }

  clear(taken: ReadonlyMap<string, number>): void {
    for (const [path, generation] of taken) if (this.entries.get(path) === generation) this.entries.delete(path);
  }
}

export const retryDelayMs = (attempt: number, first: number, max: number): number => Math.min(max, first * 2 ** Math.max(0, attempt - 1));

/** A mirror's temporary older than this was left by a sync that was killed (a live one renames its own within a batch). */
const STALE_TEMPORARY_MS = 10 * 60_000;

/** Removes what killed syncs left in the mirror: `<file>.tmp-<random>` files no batch will rename. */
function sweepMirror(to: string): void {
  const now = Date.now();
  walkFiles(to, (_rel, entry, path) => {
    const at = entry.name.lastIndexOf(TEMP_MARKER);
    if (at < 0 || !isRandomSuffix(entry.name.slice(at + TEMP_MARKER.length))) return;
    const stat = statSync(path, { throwIfNoEntry: false });
    if (stat && now - stat.mtimeMs > STALE_TEMPORARY_MS) rmSync(path, { force: true });
  });
}

/** Runs the worker until it is stopped (or, with --once, after one batch); a --once batch that fails throws. */
export async function runSyncWorker(run: SyncRun): Promise<void> {
  run.signal.throwIfAborted();
  sweepMirror(run.to);
  let seen: TreeStamps = readState(run.convert, run.from);
  let number = 0;
  let attempt = 0;
  /** The batch under way, awaited before the worker ends so that it never stops half-done. */
  let underWay: Promise<unknown> = Promise.resolve();
  const first = run.retryFirstMs ?? SYNC_DEFAULTS.retryFirstMs;
  const max = run.retryMaxMs ?? SYNC_DEFAULTS.retryMaxMs;

  const batch = (pending: PendingSet): Observable<BatchOutcome> =>
    defer(() => {
      if (attempt === 0) number += 1;
      attempt += 1;
      const taken = pending.take();
      const started = performance.now();
      const work = runBatch(run, [...taken.keys()], run.signal).then(
        (outcome) => {
          pending.clear(taken);
          run.onBatch({ batch: number, attempt, ...outcome, durationMs: performance.now() - started });
          attempt = 0;
          return outcome;
        },
        (error: unknown) => {
          const retryInMs = run.once || run.signal.aborted ? undefined : retryDelayMs(attempt, first, max);
          run.onBatch({ batch: number, attempt, files: taken.size, records: 0, durationMs: performance.now() - started, error: error as Error, ...(retryInMs !== undefined ? { retryInMs } : {}) });
          throw error;
        },
      );
      underWay = work.catch(() => {});
      return work;
    });

  const stop$ = fromEvent(run.signal, 'abort');
  const ticks$ = run.once ? of(0) : timer(0, run.intervalMs);
  const batches$ = ticks$.pipe(
    map(() => {
      const now = scanTree(run.from);
      const { changed, removed } = changesBetween(seen, now);
      seen = now;
      return [...changed, ...removed];
    }),
    scan((pending, changes) => pending.add(changes), new PendingSet()),
    // --once always runs its batch (it creates the dataset when there is none, even from nothing).
    filter((pending) => run.once || pending.size > 0),
    exhaustMap((pending) =>
      batch(pending).pipe(
        retry({
          count: run.once ? 0 : Infinity,
          delay: (_error, count) => (run.signal.aborted ? of() : timer(retryDelayMs(count, first, max))),
        }),
      ),
    ),
    takeUntil(stop$),
  );
  try {
    await lastValueFrom(batches$, { defaultValue: undefined });
  } finally {
    await underWay;
  }
  run.signal.throwIfAborted();
}
