/** Messages between `serve` and its SQL thread (client.ts, worker.ts), and errors as data for the way back. */
import { InterruptedError, ToolError, type ExitCode, type StopSignal } from '../../../../lib/errors.js';
import { SqlTimeoutError, type SqlOutcome, type SqlStatement } from '../runner.js';

/** `workerData.role` of the SQL thread, so the thread's module knows what it was started for. */
export const SQL_THREAD_ROLE = 'trajstore-sql';

export interface SqlThreadData {
  role: typeof SQL_THREAD_ROLE;
}

export interface SqlJob {
  id: number;
  statement: SqlStatement;
}

/**
 * What a statement delivered: its columns once it was prepared, the rows handed over (a BLOB
 * arrives as a Uint8Array: structured clone does not keep Buffers), then its outcome or its failure.
 * Rows handed over before a failure are delivered too, as the runner delivers them.
 */
export interface SqlReply {
  id: number;
  columns: string[] | undefined;
  rows: unknown[][];
  outcome?: SqlOutcome;
  failure?: SqlFailure;
}

/**
 * An error as data: structured clone keeps an error's message, not its class, exit code or hint,
 * on which the exit code and the HTTP status of the answer depend.
 */
export type SqlFailure =
  | { kind: 'timeout'; rowsDelivered: number }
  | { kind: 'interrupted'; signal: StopSignal }
  | { kind: 'tool'; exitCode: ExitCode; message: string; hint: string | undefined }
  | { kind: 'internal'; message: string; stack: string | undefined };

export function failureOf(error: unknown): SqlFailure {
  if (error instanceof SqlTimeoutError) return { kind: 'timeout', rowsDelivered: error.rowsDelivered };
  if (error instanceof InterruptedError) return { kind: 'interrupted', signal: error.signal };
  if (error instanceof ToolError) return { kind: 'tool', exitCode: error.exitCode, message: error.message, hint: error.hint };
  return { kind: 'internal', message: error instanceof Error ? error.message : String(error), stack: error instanceof Error ? error.stack : undefined };
}

/**
 * The error a failure was on the SQL thread: the timeout and interruption classes the routes catch,
 * else a ToolError of its exit code, by which serve's answer takes its status (serve/errors.ts). A
 * timeout names `timeoutMs`, the request's own: the thread was given what was left of it after the wait.
 */
export function errorOf(failure: SqlFailure, timeoutMs: number): Error {
  switch (failure.kind) {
    case 'timeout':
      return new SqlTimeoutError(timeoutMs, failure.rowsDelivered);
    case 'interrupted':
      return new InterruptedError(failure.signal);
    case 'tool': {
      return new ToolError(failure.exitCode, failure.message, failure.hint === undefined ? {} : { hint: failure.hint });
    }
    case 'internal':
      return Object.assign(new Error(failure.message), { stack: failure.stack });
  }
}
