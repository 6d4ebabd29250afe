/**
 * The SQL thread of `serve`: the statements of query and find run on one long-lived worker thread
 * (worker.ts), not on the event loop. better-sqlite3 is synchronous: a statement run on the event
 * loop held up every other request of the process (the API's, the event gateway's ingest) until
 * it ended, up to its timeout.
 *
 * - One statement at a time; the others wait their turn, in order. The watchdog that stops a
 *   statement (watchdog.c) can be armed once per process, and takes SIGINT/SIGTERM process-wide while armed.
 * - The wait counts against the statement's timeout, so no request waits past its own; one whose
 *   client goes away while it waits is dropped before it runs, and one whose client goes away while
 *   it runs is cancelled by its ticket (watchdog.ts), where it ran on to its timeout and held up
 *   every statement after it. A statement's ticket is also the id of its job.
 * - The thread starts once, with the server: a Node isolate and better-sqlite3 are loaded once, not per request.
 * - A signal reaches the running statement through its watchdog, as on the command line, and the
 *   statement fails with an InterruptedError. A signal stops the server, so no statement starts
 *   after that: its watchdog, armed after the signal, would not see it, and would hold up the exit until its timeout.
 * - `run` keeps the runner's contract (rows to `onRow`, integers as bigint, BLOBs as Buffer, the
 *   runner's errors of the same classes), only asynchronous.
 */
import { Worker } from 'node:worker_threads';
import { UnavailableError } from '../../../../lib/errors.js';
import { distPath } from '../../../../lib/install.js';
import { SqlTimeoutError, type SqlOutcome, type SqlRequest } from '../runner.js';
import { cancelSql, nextSqlTicket } from '../watchdog.js';
import { SQL_THREAD_ROLE, errorOf, type SqlJob, type SqlReply, type SqlThreadData } from './protocol.js';

const WORKER = distPath('pipelines', 'search', 'sql', 'thread', 'worker.js');

interface Job {
  request: SqlRequest;
  /** Aborts when the request's client goes away. */
  signal: AbortSignal | undefined;
  /** process.hrtime.bigint() when it was asked for: its timeout runs from then. */
  since: bigint;
  resolve(outcome: SqlOutcome): void;
  reject(error: Error): void;
  /** Ends its wait for a turn: clears its timer and stops listening for its client. */
  stopWaiting(): void;
}

/** A structured clone turns a Buffer into a Uint8Array; the runner's rows hold Buffers. */
const asBuffer = (cell: unknown): unknown => (cell instanceof Uint8Array ? Buffer.from(cell.buffer, cell.byteOffset, cell.byteLength) : cell);

const stopping = (): UnavailableError => new UnavailableError('serve is stopping: the statement was not run');

export class SqlThread {
  private worker: Worker | undefined;
  private readonly queue: Job[] = [];
  private running: { id: number; job: Job; stopCancelling(): void } | undefined;
  private stopped = false;
  /** Called once the running statement has answered: `close` waits for it. */
  private onIdle: (() => void) | undefined;
  private closed: Promise<void> | undefined;

  constructor() {
    this.worker = this.start();
  }

  /** Runs a statement once the ones before it have ended; `signal` aborts when its client goes away. */
  run(request: SqlRequest, signal?: AbortSignal): Promise<SqlOutcome> {
    return new Promise<SqlOutcome>((resolve, reject) => {
      if (this.stopped) return reject(stopping());
      if (signal?.aborted) return reject(new UnavailableError('the client went away before the statement ran'));
      const drop = (error: () => Error) => (): void => {
        const at = this.queue.indexOf(job);
        if (at < 0) return;
        this.queue.splice(at, 1);
        job.stopWaiting();
        reject(error());
      };
      const timer = setTimeout(
        drop(() => new SqlTimeoutError(request.timeoutMs, 0)),
        request.timeoutMs,
      );
      const gone = drop(() => new UnavailableError('the client went away before the statement ran'));
      signal?.addEventListener('abort', gone, { once: true });
      const job: Job = {
        request,
        signal,
        since: process.hrtime.bigint(),
        resolve,
        reject,
        stopWaiting: () => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', gone);
        },
      };
      this.queue.push(job);
      this.pump();
    });
  }

  /** Refuses statements from now on, waits for the running one to end, and ends the thread. */
  close(): Promise<void> {
    this.closed ??= (async () => {
      this.stop();
      if (this.running) await new Promise<void>((resolve) => (this.onIdle = resolve));
      await this.worker?.terminate();
    })();
    return this.closed;
  }

  /** Refuses statements from now on, and those waiting for their turn. */
  private stop(): void {
    this.stopped = true;
    for (const job of this.queue.splice(0)) {
      job.stopWaiting();
      job.reject(stopping());
    }
  }

  /** Sends the next statement to the thread when none is running, with what is left of its time. */
  private pump(): void {
    while (!this.running && !this.stopped) {
      const job = this.queue.shift();
      if (!job) {
        // Idle, the thread does not keep the process up.
        this.worker?.unref();
        return;
      }
      job.stopWaiting();
      const { mounts, sql, params, maxRows, maxBytes, maxMemoryBytes, timeoutMs } = job.request;
      // Whole milliseconds, as the watchdog takes them; rounded up, so that a wait shorter than a millisecond costs none.
      const left = Math.ceil(timeoutMs - Number(process.hrtime.bigint() - job.since) / 1e6);
      if (left <= 0) {
        job.reject(new SqlTimeoutError(timeoutMs, 0));
        continue;
      }
      let ticket: number;
      try {
        ticket = nextSqlTicket();
      } catch (error) {
        job.reject(error as Error);
        continue;
      }
      const worker = (this.worker ??= this.start());
      worker.ref();
      const cancel = (): void => cancelSql(ticket);
      job.signal?.addEventListener('abort', cancel, { once: true });
      this.running = { id: ticket, job, stopCancelling: () => job.signal?.removeEventListener('abort', cancel) };
      worker.postMessage({ id: ticket, statement: { mounts, sql, params, maxRows, maxBytes, maxMemoryBytes, timeoutMs: left, ticket } } satisfies SqlJob);
    }
  }

  private answer(reply: SqlReply): void {
    const running = this.running;
    if (running?.id !== reply.id) return;
    this.running = undefined;
    running.stopCancelling();
    const { request, resolve, reject } = running.job;
    try {
      if (reply.columns) request.onColumns?.(reply.columns);
      for (const row of reply.rows) request.onRow(row.map(asBuffer));
      if (reply.failure) reject(errorOf(reply.failure, request.timeoutMs));
      else if (reply.outcome) resolve(reply.outcome);
    } catch (error) {
      reject(error as Error);
    }
    if (reply.failure?.kind === 'interrupted') this.stop();
    this.settled();
  }

  private settled(): void {
    this.onIdle?.();
    this.pump();
  }

  private start(): Worker {
    const worker = new Worker(WORKER, { workerData: { role: SQL_THREAD_ROLE } satisfies SqlThreadData });
    worker.unref();
    let crash: Error | undefined;
    worker.on('message', (reply: SqlReply) => this.answer(reply));
    worker.on('error', (error: Error) => (crash = error));
    // A thread that ended by itself fails its statement; the next statement starts another.
    worker.on('exit', (code) => {
      if (this.worker === worker) this.worker = undefined;
      const running = this.running;
      this.running = undefined;
      running?.stopCancelling();
      running?.job.reject(crash ?? new Error(`the SQL thread exited (${code}) while a statement ran`));
      this.settled();
    });
    return worker;
  }
}
