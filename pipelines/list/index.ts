/**
 * `list`: the run sources of a dataset, one row per source file and format: how many runs and steps
 * came from it and the first and last time in it. Compact record stores list their record files.
 */
import type { Column, Row } from '../../cli/kit/output.js';
import type { OpenDataset } from '../dataset/open.js';

export const LIST_COLUMNS: Record<'storyline' | 'compact', Column[]> = {
  storyline: [{ key: 'source_path' }, { key: 'format' }, { key: 'runs' }, { key: 'steps' }, { key: 'first_timestamp' }, { key: 'last_timestamp' }],
  compact: [{ key: 'source_path' }, { key: 'format' }, { key: 'records' }, { key: 'first_timestamp' }, { key: 'last_timestamp' }],
};

export function listSources(dataset: OpenDataset): { columns: Column[]; rows: Row[] } {
  if (dataset.kind === 'compact') {
    const rows = dataset.db
      .prepare(
        `SELECT filename AS source_path, 'compact-jsonl' AS format, count(*) AS records, min(timestamp) AS first_timestamp, max(timestamp) AS last_timestamp
         FROM records GROUP BY filename ORDER BY filename`,
      )
      .all() as Row[];
    return { columns: LIST_COLUMNS.compact, rows };
  }
  const rows = dataset.db
    .prepare(
      `SELECT source_path, source_format AS format, count(*) AS runs, sum(step_count) AS steps,
         min(coalesce(started_at, finished_at)) AS first_timestamp, max(coalesce(finished_at, started_at)) AS last_timestamp
       FROM runs GROUP BY source_path, source_format ORDER BY source_path, source_format`,
    )
    .all() as Row[];
  return { columns: LIST_COLUMNS.storyline, rows };
}
