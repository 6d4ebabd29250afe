/**
 * Runs one SQL statement over read-only dataset indexes, in the calling thread (the command's own,
 * or the SQL thread of `serve`: thread/), and hands its rows over one at a time. Used by `query` for
 * user SQL and by `find` for the SQL its planner generates, so both honour `--timeout` and the
 * memory limit: the connection's watchdog (watchdog.c) interrupts the statement at the deadline, on
 * SIGINT/SIGTERM, when the process has grown by more than `maxMemoryBytes`, or when another thread
 * cancels it by its ticket, and SQLite refuses to make a value larger than a quarter of that memory.
 *
 * Read-only is enforced by SQLite, never by reading the SQL text: the connection is opened
 * read-only, `PRAGMA query_only` is set after the mounts are attached, and a statement is run
 * only when it prepares as exactly one statement that returns rows (`reader`) and does not
 * write (`readonly`). That refuses INSERT...RETURNING, ATTACH, VACUUM INTO, temp tables and
 * pragma assignments (reference/dependencies.md); the assignments SQLite counts as read-only
 * (`PRAGMA mmap_size = N`) are refused by the connection's PRAGMA guard (connection.ts).
 */
import { type SqliteDatabase, type SqliteStatement } from '../../dataset/sqlite.js';
import { InterruptedError, InvalidInputError, ResourceLimitError, UnavailableError } from '../../../lib/errors.js';
import { formatBytes } from '../../../lib/progress.js';
import { constants as bufferConstants } from 'node:buffer';
import { openReadOnly, type SqlMount } from './connection.js';
import { stopReason } from './watchdog.js';

/** A statement and its limits: the part of a request that can cross to another thread (sql/thread/). */
export interface SqlStatement {
  mounts: SqlMount[];
  sql: string;
  /** Bound positionally; user values always travel here, never inside `sql`. */
  params: Array<string | number | bigint | null>;
  /** Rows to return at most; one more is read to tell whether there were more. */
  maxRows: number;
  /** Bytes of row data (as JSON) to return at most. */
  maxBytes: number;
  /** Bytes the process's resident memory may grow by while the statement runs (maxValueBytes says what a value may take). */
  maxMemoryBytes: number;
  timeoutMs: number;
  /** From nextSqlTicket (watchdog.ts): cancelSql(ticket), from any thread, stops the statement. */
  ticket?: number;
}

export interface SqlRequest extends SqlStatement {
  /** Called once with the column names, before any rows. */
  onColumns?(columns: string[]): void;
  /** Called with each row, as an array of cells (integers as bigint, BLOBs as Buffer). */
  onRow(row: unknown[]): void;
}

export interface SqlOutcome {
  columns: string[];
  rowCount: number;
  truncated: 'rows' | 'bytes' | null;
}

/** Thrown when the statement ran out of time; rows handed over before it stay delivered. */
export class SqlTimeoutError extends UnavailableError {
  constructor(
    readonly timeoutMs: number,
    readonly rowsDelivered: number,
  ) {
    super(`the statement did not finish within ${timeoutMs / 1000} s and was stopped (${rowsDelivered} rows delivered before that)`, {
      hint: 'narrow the statement, or give more time with --timeout',
    });
  }
}

const MEMORY_HINT = 'make less at once (fewer or shorter values, a LIMIT, substr() of long text); `trajstore query --max-memory` allows more';
const STRING_HINT = 'make less at once (fewer or shorter values, a LIMIT, substr() of long text)';

/** better-sqlite3 caps SQLite's value length at the longest string V8 holds; no memory limit raises it. */
const RUNTIME_MAX_VALUE_BYTES = bufferConstants.MAX_STRING_LENGTH;

/**
 * The largest string or BLOB a statement may make: a quarter of its memory allowance. The
 * watchdog's memory check cannot stop a single step of SQLite, which makes a whole value, or every
 * value of a row, at once; this bounds that step. At the default (1 GiB) it is 256 MiB, as large as
 * the largest document import takes, so `find` reads any stored value. What a value costs after
 * that step the memory check counts: printed, a value is held several times over (SQLite's copy,
 * JavaScript's, its base64 or JSON text, the output's: a 100 MB BLOB printed as JSON took 700 MB).
 */
const maxValueBytes = (maxMemoryBytes: number): number => Math.min(Math.floor(maxMemoryBytes / 4), RUNTIME_MAX_VALUE_BYTES);

/** Thrown when the statement was cancelled by its ticket (`serve`: its client went away). */
export class SqlCancelledError extends UnavailableError {
  constructor() {
    super('the statement was cancelled');
  }
}

/** Thrown when the statement made the process grow past its allowance; rows handed over before it stay delivered. */
export class SqlMemoryError extends ResourceLimitError {
  constructor(
    readonly maxMemoryBytes: number,
    readonly rowsDelivered: number,
  ) {
    super(`the statement made the process grow by more than ${formatBytes(maxMemoryBytes)} and was stopped (${rowsDelivered} rows delivered before that)`, { hint: MEMORY_HINT });
  }
}

function valueTooLarge(maxMemoryBytes: number): ResourceLimitError {
  const limit = maxValueBytes(maxMemoryBytes);
  const why = limit === RUNTIME_MAX_VALUE_BYTES ? 'the longest string this runtime holds' : `a quarter of the memory limit of ${formatBytes(maxMemoryBytes)}`;
  return new ResourceLimitError(`a value the statement made is larger than ${formatBytes(limit)}, the most one value may take (${why})`, {
    hint: limit === RUNTIME_MAX_VALUE_BYTES ? STRING_HINT : MEMORY_HINT,
  });
}

const NOT_READ_ONLY_HINT =
  'query runs exactly one read-only statement that returns rows (SELECT, WITH, VALUES, EXPLAIN, a PRAGMA that reads or names a table to report on); writes, ATTACH, VACUUM INTO, temp tables and PRAGMA assignments are refused';

/** The size of a row as JSON text, near enough to bound what is printed. */
function rowBytes(row: readonly unknown[]): number {
  let bytes = 2;
  for (const value of row) {
    if (value === null || value === undefined) bytes += 5;
    else if (typeof value === 'string') bytes += Buffer.byteLength(value) + 3;
    else if (Buffer.isBuffer(value)) bytes += Math.ceil(value.length / 3) * 4 + 3;
    else bytes += String(value).length + 1;
  }
  return bytes;
}

function prepare(db: SqliteDatabase, sql: string): SqliteStatement {
  let statement: SqliteStatement;
  try {
    statement = db.prepare(sql);
  } catch (error) {
    // The watchdog can fire while a statement is still being prepared (a tiny --timeout on a busy machine).
    if ((error as { code?: string }).code === 'SQLITE_INTERRUPT') throw error;
    // SQLITE_AUTH comes only from the PRAGMA guard (pragma-guard.c), whose refusal SQLite words as "not authorized".
    if ((error as { code?: string }).code === 'SQLITE_AUTH') {
      throw new InvalidInputError('refused: the statement is not a read-only query (it sets a PRAGMA)', { hint: NOT_READ_ONLY_HINT });
    }
    throw new InvalidInputError(`SQL error: ${(error as Error).message}`);
  }
  if (!statement.reader || !statement.readonly) {
    const why = !statement.readonly ? 'it would modify a database' : 'it returns no rows';
    throw new InvalidInputError(`refused: SQLite reports that the statement is not a read-only query (${why})`, { hint: NOT_READ_ONLY_HINT });
  }
  return statement;
}

/**
 * The statement's rows with `params` bound. better-sqlite3 refuses values that do not fit the
 * statement's parameters when binding (a RangeError for a count, a TypeError for a missing name):
 * the statement's fault (a user's `?` or `:name`, which query and --where have no values for).
 */
function bound(statement: SqliteStatement, params: SqlRequest['params']): Iterable<unknown[]> {
  try {
    return statement.iterate(...params) as Iterable<unknown[]>;
  } catch (error) {
    if (error instanceof RangeError || error instanceof TypeError) throw new InvalidInputError(`SQL error: ${error.message} (a statement here can take no parameters: write values into it, not ?, :name, @name or $name)`);
    throw error;
  }
}

/** The error of a statement the watchdog stopped, by why it did. */
function stoppedError(request: SqlRequest, delivered: number): Error {
  switch (stopReason()) {
    case 'timeout':
      return new SqlTimeoutError(request.timeoutMs, delivered);
    case 'memory':
      return new SqlMemoryError(request.maxMemoryBytes, delivered);
    case 'cancel':
      return new SqlCancelledError();
    default:
      return new InterruptedError(); // by SIGINT or SIGTERM; the program says which
  }
}

export function runReadOnlySql(request: SqlRequest): SqlOutcome {
  const db = openReadOnly(request.mounts);
  let delivered = 0;
  try {
    db.prepare('SELECT trajstore_watchdog(?, ?, ?, ?)').run(request.timeoutMs, request.maxMemoryBytes, maxValueBytes(request.maxMemoryBytes), request.ticket ?? 0);
    const statement = prepare(db, request.sql);
    statement.raw(true).safeIntegers(true);
    const columns = statement.columns().map((c) => c.name);
    request.onColumns?.(columns);
    let bytes = 0;
    let truncated: SqlOutcome['truncated'] = null;
    for (const row of bound(statement, request.params)) {
      if (delivered >= request.maxRows) {
        truncated = 'rows';
        break;
      }
      bytes += rowBytes(row);
      if (bytes > request.maxBytes) {
        truncated = 'bytes';
        break;
      }
      request.onRow(row);
      delivered++;
    }
    return { columns, rowCount: delivered, truncated };
  } catch (error) {
    const code = (error as { code?: string }).code;
    // Asked before the connection closes: the watchdog that knows why is disarmed then.
    if (code === 'SQLITE_INTERRUPT') throw stoppedError(request, delivered);
    if (code === 'SQLITE_TOOBIG') throw valueTooLarge(request.maxMemoryBytes);
    if (error instanceof InvalidInputError) throw error;
    // Errors while stepping (a bad argument to a function, say) are the statement's fault, like prepare errors.
    if (code?.startsWith('SQLITE_')) throw new InvalidInputError(`SQL error: ${(error as Error).message}`);
    throw error;
  } finally {
    db.close();
  }
}
