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
import { dirname } from 'node:path';
import { InvalidInputError } from '../../lib/errors.js';
import { isInsideOrSame } from '../../lib/real-path.js';
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
  /** The file the rows go to (`--output`), which must lie outside every mounted dataset. */
  writesTo?: string;
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

/**
 * Written into, a dataset would lose its own files (`--output ds/trajstore.json --overwrite` left it
 * without a manifest) or gain foreign ones, which drop then refuses to remove. The directory that
 * holds a mount's index is the dataset's own (a local dataset's root, an object-store one's cached copy).
 */
function checkOutsideMounts(output: string, mounts: readonly QueryMount[], opened: readonly OpenDataset[]): void {
  opened.forEach((dataset, i) => {
    if (isInsideOrSame(output, dirname(dataset.db.name))) {
      throw new InvalidInputError(`--output ${output}: inside the dataset mounted as ${(mounts[i] as QueryMount).name} (${dataset.uri}); query writes outside it`);
    }
  });
}

export async function runQuery(rc: ResolveContext, request: QueryRequest): Promise<QueryOutcome> {
  if (request.sql.trim() === '') throw new InvalidInputError('the SQL statement is empty');
  checkMountNames(request.mounts);
  const opened: OpenDataset[] = [];
  let delivered = 0;
  try {
    for (const mount of request.mounts) opened.push(await openDatasetArg(rc, mount.dataset, request.progress ? { progress: request.progress } : {}));
    if (request.writesTo !== undefined) checkOutsideMounts(request.writesTo, request.mounts, opened);
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
