/**
 * `query`: one read-only SQL statement over the SQLite indexes of one or more datasets, each attached
 * under a mount name (`dataset` when a single dataset is given, so `dataset.runs` works). The statement
 * runs under the SQL watchdog (sql/runner.ts); read-only is enforced by SQLite there.
 *
 * Limits: at most `maxOutputRows` rows and `maxOutputBytes` bytes of row data (measured as JSON text)
 * are handed over; past either, or at the timeout, the rows handed over so far stay delivered and
 * the outcome says why the result was cut. A statement that makes the process grow by more than
 * `maxMemoryBytes` fails (a ResourceLimitError), the rows handed over before it too.
 */
import { InvalidInputError } from '../../lib/errors.js';
import type { ProgressFactory } from '../../lib/progress.js';
import { openDatasetArg, type OpenDataset } from '../dataset/open.js';
import type { ResolveContext } from '../pins/resolve.js';
import { MOUNT_NAME, RESERVED_MOUNT_NAMES } from './sql/connection.js';
import { SqlTimeoutError, runReadOnlySql } from './sql/runner.js';

export interface QueryMount {
  name: string;
  /** A DATASET argument: a path, a pin, or undefined for the default dataset. */
  dataset: string | undefined;
}

export interface QueryRequest {
  mounts: QueryMount[];
  sql: string;
  maxOutputRows: number;
  maxOutputBytes: number;
  maxMemoryBytes: number;
  timeoutMs: number;
  progress?: ProgressFactory;
  /** Called once with the column names, before any rows. */
  onColumns(names: string[]): void;
  /** Called with each row's cells (integers as bigint, BLOBs as Buffer). */
  onRow(cells: unknown[]): void;
}

export interface QueryOutcome {
  rows: number;
  /** Why the rows stopped before the result did: `--max-output-rows`, `--max-output-bytes` or `--timeout`. */
  truncated: 'rows' | 'bytes' | 'timeout' | null;
}

function checkMountNames(mounts: readonly QueryMount[]): void {
  const seen = new Set<string>();
  for (const { name } of mounts) {
    if (!MOUNT_NAME.test(name) || RESERVED_MOUNT_NAMES.has(name.toLowerCase())) {
      throw new InvalidInputError(`invalid --mount name ${JSON.stringify(name)}`, {
        hint: 'a mount name is a letter or _ then letters, digits or _ (at most 64), and not main or temp',
      });
    }
    if (seen.has(name.toLowerCase())) throw new InvalidInputError(`--mount name ${JSON.stringify(name)} is given twice`);
    seen.add(name.toLowerCase());
  }
}

export async function runQuery(rc: ResolveContext, request: QueryRequest): Promise<QueryOutcome> {
  if (request.sql.trim() === '') throw new InvalidInputError('the SQL statement is empty');
  checkMountNames(request.mounts);
  const opened: OpenDataset[] = [];
  let delivered = 0;
  try {
    for (const mount of request.mounts) opened.push(await openDatasetArg(rc, mount.dataset, request.progress ? { progress: request.progress } : {}));
    const outcome = runReadOnlySql({
      mounts: request.mounts.map((m, i) => ({ name: m.name, path: (opened[i] as OpenDataset).db.name })),
      sql: request.sql,
      params: [],
      maxRows: request.maxOutputRows,
      maxBytes: request.maxOutputBytes,
      maxMemoryBytes: request.maxMemoryBytes,
      timeoutMs: request.timeoutMs,
      onColumns: request.onColumns,
      onRow: (cells) => {
        delivered++;
        request.onRow(cells);
      },
    });
    return { rows: outcome.rowCount, truncated: outcome.truncated };
  } catch (error) {
    if (error instanceof SqlTimeoutError) return { rows: delivered, truncated: 'timeout' };
    throw error;
  } finally {
    for (const dataset of opened) dataset.close();
  }
}
