/**
 * The resident sync worker, an RxJS pipeline (ARCHITECTURE.md: RxJS owns time and concurrency):
 *
 *   timer(0, interval)              a tick now and then each interval (one tick with --once)
 *   map(scan the tree)              what changed since the previous scan (scan.ts), or everything
 *                                   when the dataset was dropped since; a directory
 *                                   it cannot read (the source itself too, once started), or a
 *                                   file or directory named in bytes that are not UTF-8, is
 *                                   warned of once and keeps what was seen under it
 *   scan(into the pending set)      changes accumulate; a batch clears only what it committed
 *   filter(something pending, due)
 *   exhaustMap(batch)               one batch at a time; ticks during a batch only add to the set
 *     retry(backoff)                a failed batch keeps the set and runs again after
 *                                   1 s, 2 s, 4 s ... at most 60 s (resident mode; --once fails)
 *   takeUntil(stop)                 SIGINT/SIGTERM: the batch under way is abandoned whole (its
 *                                   writer aborts and leaves the dataset at its last snapshot),
 *                                   or finishes if it is past its commit; the worker then ends
 *
 * A file that a batch cannot read (no permission, over 2 GiB, or a `.json` caught half-rewritten
 * that does not parse) does not fail it: the batch commits the other files, and that one stays
 * pending, held back for the same backoff of its own and warned of once for each change. Both
 * outputs then still hold what they had of it. --once exits with its error after committing the rest.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ToolError } from '../../lib/errors.js';
import { defer, exhaustMap, filter, fromEvent, lastValueFrom, map, of, retry, scan, takeUntil, throwError, timer, type Observable } from 'rxjs';
import { runBatch, type BatchOutcome, type HeldFile, type SyncTarget } from './batch.js';
import { claimMirror } from './mirror.js';
import { changesBetween, keepUnread, scanTree, type TreeStamps } from './scan.js';
import { OtherSourceError, readState } from './state.js';
import { MANIFEST_KEY } from '../dataset/layout.js';
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
  /** Files the batch could not read, left pending for a retry of their own. */
  held: number;
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

/** A pending file that batches could not read: retried after a backoff of its own, apart from the files that go on. */
interface HeldBack {
  failures: number;
  dueAt: number;
  /** The pending set's generation for it when it was last warned of: one warning for each change. */
  warned: number;
}

/** A --once run that left out what it could not read: the first one's error, counting the rest (warned of before). */
function notSynced(errors: readonly ToolError[]): ToolError {
  const first = errors[0]!;
  const more = errors.length > 1 ? ` (and ${errors.length - 1} more, warned of above)` : '';
  return new ToolError(first.exitCode, `sync: ${first.message}${more}`, { hint: 'every other change was synced; what was left out stays pending for a later run' });
}

/**
 * Runs the worker until it is stopped (or, with --once, after one batch), holding the mirror from
 * start to end (mirror.ts); a --once batch that fails throws, and so does one that left a file or
 * directory out as unreadable (after committing the rest).
 */
export async function runSyncWorker(run: SyncRun): Promise<void> {
  run.signal.throwIfAborted();
  // A compact-jsonl sync does not write the mirror (spec: sync rules), so it leaves it to others.
  const mirror = run.inputFormat === 'compact-jsonl' ? undefined : await claimMirror(run);
  try {
    await runBatches(run);
  } finally {
    mirror?.release();
  }
}

/** The worker's pipeline (see the module comment), with the mirror held. */
async function runBatches(run: SyncRun): Promise<void> {
  let seen: TreeStamps = readState(run.convert, run.from) ?? new Map();
  let hadDataset = existsSync(join(run.convert, MANIFEST_KEY));
  let number = 0;
  let attempt = 0;
  /** The batch under way, awaited before the worker ends so that it never stops half-done. */
  let underWay: Promise<unknown> = Promise.resolve();
  const first = run.retryFirstMs ?? SYNC_DEFAULTS.retryFirstMs;
  const max = run.retryMaxMs ?? SYNC_DEFAULTS.retryMaxMs;
  const heldBack = new Map<string, HeldBack>();
  /** Directories (or files) the last scan could not read, by path: warned of when they became so. */
  let unread = new Map<string, ToolError>();

  /** The pending files a batch takes now: all but those held back whose retry is not due. */
  const due = (pending: PendingSet): Map<string, number> => new Map([...pending.take()].filter(([rel]) => (heldBack.get(rel)?.dueAt ?? 0) <= Date.now()));

  /**
   * After a batch: each file it took is held back again (warned of once for each change) or
   * released. A batch that rebuilt a dropped dataset read files that were not pending: those it
   * could not read become pending, for their retries.
   */
  const settle = (pending: PendingSet, batchTook: ReadonlyMap<string, number>, held: readonly HeldFile[]): void => {
    const extra = held.map((file) => file.path).filter((rel) => !batchTook.has(rel));
    const taken = new Map([...batchTook, ...[...pending.add(extra).take()].filter(([rel]) => extra.includes(rel))]);
    const before = new Map(heldBack);
    for (const rel of taken.keys()) heldBack.delete(rel);
    for (const { path, error } of held) {
      const last = before.get(path);
      const generation = taken.get(path)!;
      const failures = (last?.failures ?? 0) + 1;
      heldBack.set(path, { failures, dueAt: Date.now() + retryDelayMs(failures, first, max), warned: generation });
      if (last?.warned !== generation) run.log.warn(`sync: ${error.message}; held back and retried with backoff, while the other files go on`);
    }
  };

  const batch = (pending: PendingSet): Observable<BatchOutcome> =>
    defer(() => {
      if (attempt === 0) number += 1;
      attempt += 1;
      const taken = due(pending);
      const started = performance.now();
      const work = runBatch(run, [...taken.keys()], run.signal).then(
        (outcome) => {
          const held = new Set(outcome.held.map((file) => file.path));
          pending.clear(new Map([...taken].filter(([rel]) => !held.has(rel))));
          settle(pending, taken, outcome.held);
          run.onBatch({ batch: number, attempt, files: outcome.files, records: outcome.records, held: held.size, durationMs: performance.now() - started });
          attempt = 0;
          const left = [...unread.values(), ...outcome.held.map((file) => file.error)];
          if (run.once && left.length > 0) throw notSynced(left);
          return outcome;
        },
        (error: unknown) => {
          const retryInMs = run.once || run.signal.aborted ? undefined : retryDelayMs(attempt, first, max);
          run.onBatch({ batch: number, attempt, files: taken.size, records: 0, held: 0, durationMs: performance.now() - started, error: error as Error, ...(retryInMs !== undefined ? { retryInMs } : {}) });
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
      // A dataset dropped under the worker is rebuilt whole at once, not when a file next changes.
      const present = existsSync(join(run.convert, MANIFEST_KEY));
      if (hadDataset && !present) seen = new Map();
      hadDataset = present;
      const unreadNow = new Map<string, ToolError>();
      const scanned = scanTree(run.from, (rel, error) => unreadNow.set(rel, error));
      for (const [rel, error] of unreadNow) if (!unread.has(rel)) run.log.warn(`sync: ${error.message}; skipped until that changes (what was synced of it stays)`);
      unread = unreadNow;
      const now = keepUnread(scanned, seen, [...unread.keys()]);
      const { changed, removed } = changesBetween(seen, now);
      seen = now;
      return [...changed, ...removed];
    }),
    scan((pending, changes) => pending.add(changes), new PendingSet()),
    // --once always runs its batch (it creates the dataset when there is none, even from nothing).
    filter((pending) => run.once || due(pending).size > 0),
    exhaustMap((pending) =>
      batch(pending).pipe(
        retry({
          count: run.once ? 0 : Infinity,
          // Another source's dataset stays another's: that batch would fail the same way for good.
          delay: (error, count) => (error instanceof OtherSourceError ? throwError(() => error) : run.signal.aborted ? of() : timer(retryDelayMs(count, first, max))),
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
