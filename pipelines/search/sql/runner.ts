/**
 * Runs one SQL statement over read-only dataset indexes, in the calling thread (the command's own,
 * or the SQL thread of `serve`: thread/), and hands its rows over one at a time. Used by `query` for
 * user SQL and by `find` for the SQL its planner generates, so both honour `--timeout`: the
 * connection's watchdog (watchdog.c) interrupts the statement at the deadline or on SIGINT/SIGTERM.
 *
 * Read-only is enforced by SQLite, never by reading the SQL text: the connection is opened
 * read-only, `PRAGMA query_only` is set after the mounts are attached, and a statement is run
 * only when it prepares as exactly one statement that returns rows (`reader`) and does not
 * write (`readonly`). That refuses INSERT...RETURNING, ATTACH, VACUUM INTO, temp tables and
 * pragma assignments (reference/dependencies.md); the assignments SQLite counts as read-only
 * (`PRAGMA mmap_size = N`) are refused by the connection's PRAGMA guard (connection.ts).
 */
import { type SqliteDatabase, type SqliteStatement } from '../../dataset/sqlite.js';
import { InterruptedError, InvalidInputError, UnavailableError } from '../../../lib/errors.js';
import { openReadOnly, type SqlMount } from './connection.js';

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
  timeoutMs: number;
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

export function runReadOnlySql(request: SqlRequest): SqlOutcome {
  const db = openReadOnly(request.mounts);
  let delivered = 0;
  // process.hrtime, not performance.now(): the latter loads perf_hooks on every query.
  const deadline = process.hrtime.bigint() + BigInt(request.timeoutMs) * 1_000_000n;
  try {
    db.prepare('SELECT trajstore_watchdog(?)').run(request.timeoutMs);
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
    if ((error as { code?: string }).code === 'SQLITE_INTERRUPT') {
      if (process.hrtime.bigint() >= deadline) throw new SqlTimeoutError(request.timeoutMs, delivered);
      throw new InterruptedError(); // the watchdog stops a statement early only for SIGINT or SIGTERM; the program says which
    }
    if (error instanceof InvalidInputError) throw error;
    // Errors while stepping (a bad argument to a function, say) are the statement's fault, like prepare errors.
    if ((error as { code?: string }).code?.startsWith('SQLITE_')) throw new InvalidInputError(`SQL error: ${(error as Error).message}`);
    throw error;
  } finally {
    db.close();
  }
}
