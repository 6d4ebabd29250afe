/**
 * Which runs an export takes (`--document-id`, `--run-id`, `--session-id`, `--match`, `--where`):
 * one read-only statement over the dataset's index, run under the SQL watchdog like `query`'s
 * (read-only connection, `query_only`, one statement, SQLite's own read-only verdict, timeout).
 * Each flag narrows the runs; the values of one repeated flag are alternatives.
 */
import { InvalidInputError } from '../../lib/errors.js';
import { ftsInfo } from '../dataset/index-meta.js';
import type { OpenDataset } from '../dataset/open.js';
import { parseMatches } from '../search/find.js';
import { planFind, type Param } from '../search/planner.js';
import { checkPredicate } from '../search/sql/predicate.js';
import { QUERY_DEFAULTS } from '../search/limits.js';
import { runReadOnlySql } from '../search/sql/runner.js';

export interface ExportFilter {
  documentIds?: string[];
  runIds?: string[];
  sessionIds?: string[];
  /** `find` expressions; a run is taken when any of its steps (or the run itself) matches all of them. */
  matches?: string[];
  /** An SQL predicate over the columns of `runs`. */
  where?: string;
  /** Stops the selecting statement (not the export) after this long. */
  timeoutMs: number;
}

/** Whether a filter selects anything at all (an export without one takes every run). */
export function filters(filter: ExportFilter | undefined): filter is ExportFilter {
  if (!filter) return false;
  return [filter.documentIds, filter.runIds, filter.sessionIds, filter.matches].some((list) => (list?.length ?? 0) > 0) || filter.where !== undefined;
}

/** The document ids of the runs the filter selects. */
export function selectDocuments(dataset: OpenDataset, filter: ExportFilter): Set<string> {
  const where: string[] = [];
  const params: Param[] = [];
  const anyOf = (column: string, values: readonly string[] | undefined): void => {
    if (!values?.length) return;
    where.push(`r.${column} IN (${values.map(() => '?').join(', ')})`);
    params.push(...values);
  };
  anyOf('document_id', filter.documentIds);
  anyOf('run_id', filter.runIds);
  anyOf('session_id', filter.sessionIds);
  if (filter.matches?.length) {
    // find's own plan, unlimited (LIMIT -1): the same match set as `find`, by document.
    const plan = planFind({ expressions: parseMatches(filter.matches), limit: -1, ftsAvailable: ftsInfo(dataset.db).available });
    where.push(`r.document_id IN (SELECT document_id FROM (${plan.sql}))`);
    params.push(...plan.params);
  }
  if (filter.where !== undefined) {
    checkPredicate(filter.where, '--where');
    // On lines of its own, so that a trailing `--` comment ends before the closing parenthesis.
    where.push(`(\n${filter.where}\n)`);
  }
  const selected = new Set<string>();
  try {
    runReadOnlySql({
      mounts: [{ name: 'dataset', path: dataset.db.name }],
      sql: `SELECT r.document_id FROM runs r WHERE ${where.join(' AND ')}`,
      params,
      maxRows: Number.MAX_SAFE_INTEGER,
      maxBytes: Number.MAX_SAFE_INTEGER,
      maxMemoryBytes: QUERY_DEFAULTS.maxMemoryBytes,
      timeoutMs: filter.timeoutMs,
      onRow: (row) => selected.add(String(row[0])),
    });
  } catch (error) {
    if (error instanceof InvalidInputError && filter.where !== undefined && /^(SQL error|refused)/.test(error.message)) {
      throw new InvalidInputError(`--where ${JSON.stringify(filter.where)}: ${error.message}`, error.hint === undefined ? {} : { hint: error.hint });
    }
    throw error;
  }
  return selected;
}
