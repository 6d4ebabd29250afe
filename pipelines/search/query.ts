/**
 * `query`: one read-only SQL statement over the SQLite indexes of one or more datasets, each attached
 * under a mount name (`dataset` when a single dataset is given, so `dataset.runs` works). The statement
 * runs in the killable SQL worker (sql/worker.ts); read-only is enforced by SQLite there.
 *
 * Limits: at most `maxOutputRows` rows and `maxOutputBytes` bytes of row data (measured as JSON text)
 * are written; past either, the output ends with a notice and the command exits 5. At the timeout the
 * worker is killed, the rows received so far are written, and the command exits 6.
 */
import { InvalidInputError, ResourceLimitError } from '../../cli/kit/errors.js';
import { createRowWriter, type Column, type OutputFormat, type Row, type TextSink } from '../../cli/kit/output.js';
import { MOUNT_NAME, RESERVED_MOUNT_NAMES, type SqlMount } from './sql/protocol.js';
import { SqlTimeoutError, runReadOnlySql, type SqlWorker } from './sql/runner.js';

export const QUERY_DEFAULTS = {
  maxOutputRows: 10_000,
  maxOutputBytes: 64 * 1024 * 1024,
  timeoutMs: 30_000,
} as const;

/** The mount name of a dataset given without `--mount`. */
export const DEFAULT_MOUNT = 'dataset';

/** `NAME=DATASET` of `--mount`. */
export function parseMount(text: string): { name: string; dataset: string } {
  const eq = text.indexOf('=');
  const name = eq < 0 ? '' : text.slice(0, eq);
  const dataset = eq < 0 ? '' : text.slice(eq + 1);
  if (eq < 0 || dataset === '') throw new InvalidInputError(`invalid --mount ${JSON.stringify(text)}: expected NAME=DATASET`, { hint: 'e.g. --mount prod=./datasets/prod' });
  if (!MOUNT_NAME.test(name) || RESERVED_MOUNT_NAMES.has(name.toLowerCase())) {
    throw new InvalidInputError(`invalid --mount name ${JSON.stringify(name)}`, {
      hint: 'a mount name is a letter or _ then letters, digits or _ (at most 64), and not main or temp',
    });
  }
  return { name, dataset };
}

export interface QueryOptions {
  mounts: SqlMount[];
  sql: string;
  format: OutputFormat;
  maxOutputRows: number;
  maxOutputBytes: number;
  timeoutMs: number;
  signal?: AbortSignal;
  /** A SQL child started earlier by the caller (sql/runner.ts), used up by this query. */
  sqlWorker?: SqlWorker;
  /** Results go here; the cut notice of table output too. */
  out: TextSink;
  /** Notices that must not end up inside machine-readable output. */
  notice(message: string): void;
}

/** Cells as the row writers take them: BLOBs become base64 text. */
function cell(value: unknown): Row[string] {
  if (Buffer.isBuffer(value) || value instanceof Uint8Array) return Buffer.from(value).toString('base64');
  return value as Row[string];
}

/** Distinct keys for the row objects, so `SELECT 1 AS a, 2 AS a` keeps both columns. */
function columnsFor(names: readonly string[]): Column[] {
  const seen = new Map<string, number>();
  return names.map((name) => {
    const n = (seen.get(name) ?? 0) + 1;
    seen.set(name, n);
    return { key: n === 1 ? name : `${name}_${n}`, title: name };
  });
}

export async function runQuery(options: QueryOptions): Promise<{ rows: number }> {
  if (options.sql.trim() === '') throw new InvalidInputError('the SQL statement is empty');
  let columns: Column[] = [];
  let writer: ReturnType<typeof createRowWriter> | undefined;
  let rows = 0;
  const cut = (why: string): void => {
    if (options.format === 'table') options.out.write(`(${why})\n`);
    else options.notice(why);
  };
  try {
    const outcome = await runReadOnlySql(
      { mounts: options.mounts, sql: options.sql, params: [], maxRows: options.maxOutputRows, maxBytes: options.maxOutputBytes },
      {
        timeoutMs: options.timeoutMs,
        ...(options.signal ? { signal: options.signal } : {}),
        onColumns(names) {
          columns = columnsFor(names);
          writer = createRowWriter(options.format, columns, options.out);
        },
        onRows(batch) {
          for (const values of batch) {
            const row: Row = {};
            columns.forEach((c, i) => (row[c.key] = cell(values[i])));
            writer?.write(row);
            rows++;
          }
        },
      },
      options.sqlWorker,
    );
    writer?.end();
    if (options.format === 'table' && rows === 0) options.out.write('(0 rows)\n');
    if (outcome.truncated === 'rows') {
      cut(`truncated: output cut at ${options.maxOutputRows} rows (--max-output-rows)`);
      throw new ResourceLimitError(`the result has more than ${options.maxOutputRows} rows; output cut (--max-output-rows)`, {
        hint: 'raise --max-output-rows, or add LIMIT / aggregate in the statement',
      });
    }
    if (outcome.truncated === 'bytes') {
      cut(`truncated: output cut after ${rows} rows at ${options.maxOutputBytes} bytes (--max-output-bytes)`);
      throw new ResourceLimitError(`the result is larger than ${options.maxOutputBytes} bytes; output cut after ${rows} rows (--max-output-bytes)`, {
        hint: 'raise --max-output-bytes, or select fewer columns or rows',
      });
    }
    return { rows };
  } catch (error) {
    if (error instanceof SqlTimeoutError && writer) {
      writer.end();
      cut(`truncated: timed out after ${options.timeoutMs / 1000} s (--timeout)`);
    }
    throw error;
  }
}
