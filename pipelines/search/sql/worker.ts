/**
 * Child process that runs one SQL statement against read-only dataset indexes and sends the
 * rows back. It lives in its own process because SQLite cannot be interrupted from JavaScript
 * (reference/dependencies.md): the parent kills it at the timeout.
 *
 * Read-only is enforced by SQLite, never by reading the SQL text: the connection is opened
 * read-only, `PRAGMA query_only` is set after the mounts are attached, and a statement is run
 * only when it prepares as exactly one statement that returns rows (`reader`) and does not
 * write (`readonly`). That refuses INSERT...RETURNING, ATTACH, VACUUM INTO, temp tables and
 * pragma assignments.
 */
import type Database from 'better-sqlite3';
import { openReadOnly } from './connection.js';
import type { SqlRequest, WorkerMessage } from './protocol.js';

const BATCH_ROWS = 256;

function send(message: WorkerMessage): Promise<void> {
  return new Promise((resolve, reject) => process.send?.(message, undefined, {}, (error) => (error ? reject(error) : resolve())));
}

function rowBytes(row: unknown[]): number {
  let bytes = 2;
  for (const value of row) {
    if (value === null || value === undefined) bytes += 5;
    else if (typeof value === 'string') bytes += Buffer.byteLength(value) + 3;
    else if (Buffer.isBuffer(value)) bytes += Math.ceil(value.length / 3) * 4 + 3;
    else bytes += String(value).length + 1;
  }
  return bytes;
}

async function run(request: SqlRequest): Promise<void> {
  let db: Database.Database;
  try {
    db = openReadOnly(request.mounts);
  } catch (error) {
    await send({ type: 'error', kind: 'internal', message: `cannot open the dataset index: ${(error as Error).message}` });
    return;
  }
  let statement: Database.Statement;
  try {
    statement = db.prepare(request.sql);
  } catch (error) {
    await send({ type: 'error', kind: 'invalid', message: (error as Error).message });
    return;
  }
  if (!statement.reader || !statement.readonly) {
    const why = !statement.readonly ? 'it would modify a database' : 'it returns no rows';
    await send({ type: 'error', kind: 'not-read-only', message: `SQLite reports that the statement is not a read-only query (${why})` });
    return;
  }
  try {
    statement.raw(true).safeIntegers(true);
    await send({ type: 'columns', columns: statement.columns().map((c) => c.name) });
    let batch: unknown[][] = [];
    let rowCount = 0;
    let bytes = 0;
    let truncated: 'rows' | 'bytes' | null = null;
    for (const row of statement.iterate(...request.params) as Iterable<unknown[]>) {
      if (rowCount >= request.maxRows) {
        truncated = 'rows';
        break;
      }
      bytes += rowBytes(row);
      if (bytes > request.maxBytes) {
        truncated = 'bytes';
        break;
      }
      batch.push(row);
      rowCount++;
      if (batch.length >= BATCH_ROWS) {
        await send({ type: 'rows', rows: batch });
        batch = [];
      }
    }
    if (batch.length > 0) await send({ type: 'rows', rows: batch });
    await send({ type: 'end', truncated, rowCount });
  } catch (error) {
    const kind = (error as { code?: unknown }).code?.toString().startsWith('SQLITE_') ? 'invalid' : 'internal';
    await send({ type: 'error', kind, message: (error as Error).message });
  }
}

process.once('message', (request: SqlRequest) => {
  run(request).then(
    () => process.disconnect(),
    (error: unknown) => {
      process.stderr.write(`sql worker: ${String(error)}\n`);
      process.exit(1);
    },
  );
});
