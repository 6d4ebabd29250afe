/**
 * `list`: the run sources of a dataset, one row per source file and format: how many runs and steps
 * came from it and the first and last time in it. Compact record stores list their record files.
 * A place that is not a dataset but holds source files is listed as `import` would read it (raw.ts).
 */
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { NotFoundError } from '../../lib/errors.js';
import type { Logger } from '../../lib/log.js';
import type { ProgressFactory } from '../../lib/progress.js';
import type { Readable } from 'node:stream';
import { MANIFEST_KEY } from '../dataset/layout.js';
import { openDataset, type OpenDataset } from '../dataset/open.js';
import { catalogRoot, localPathOf, resolveDataset, type ResolveContext } from '../pins/resolve.js';
import type { SourceRow } from './raw.js';

export type SourceListing =
  | {
      /** `files`: the place is not a dataset; its files were read as an import would read them. */
      kind: 'storyline' | 'compact' | 'files';
      rows: SourceRow[];
      /** Files that could not be read (each was logged); only for `files`. */
      unreadable: number;
    }
  | {
      /** A directory-service pin (`@team`): the datasets granted to its key pair. */
      kind: 'catalog';
      rows: Array<{ name: string; dataset: string }>;
      unreadable: 0;
    };

export interface ListIO {
  stdin: Readable;
  log: Logger;
  signal: AbortSignal;
  progress?: ProgressFactory;
}

export async function listSources(rc: ResolveContext, arg: string | undefined, io: ListIO): Promise<SourceListing> {
  const catalog = await catalogRoot(rc, arg);
  if (catalog) {
    const { grantedDatasets } = await import('../catalog/client.js');
    return { kind: 'catalog', rows: (await grantedDatasets(catalog)).map((name) => ({ name, dataset: `${catalog.display}/${name}` })), unreadable: 0 };
  }
  const location = await resolveDataset(arg, { ...rc, purpose: 'read' });
  const path = location.kind === 'local' ? localPathOf(location) : undefined;
  // Not only a dataset could have been meant: list reads directories and files of trajectories too.
  if (path !== undefined && !existsSync(path)) throw new NotFoundError(`${path}: no such dataset, directory or file`);
  if (path !== undefined && !(statSync(path).isDirectory() && existsSync(join(path, MANIFEST_KEY)))) {
    // Loaded only here: reading source files takes every format's decoder.
    const { listRawSources } = await import('./raw.js');
    return { kind: 'files', ...(await listRawSources(path, io)) };
  }
  const dataset = await openDataset(location, rc.env, { ...(io.progress ? { progress: io.progress } : {}), ...(rc.signal ? { signal: rc.signal } : {}) });
  try {
    return { kind: dataset.kind, rows: datasetSources(dataset), unreadable: 0 };
  } finally {
    dataset.close();
  }
}

function datasetSources(dataset: OpenDataset): SourceRow[] {
  if (dataset.kind === 'compact') {
    return dataset.db
      .prepare(
        `SELECT filename AS source_path, 'compact-jsonl' AS format, count(*) AS records, min(timestamp) AS first_timestamp, max(timestamp) AS last_timestamp
         FROM records GROUP BY filename ORDER BY filename`,
      )
      .all() as SourceRow[];
  }
  return dataset.db
    .prepare(
      `SELECT source_path, source_format AS format, count(*) AS runs, sum(step_count) AS steps,
         min(coalesce(started_at, finished_at)) AS first_timestamp, max(coalesce(finished_at, started_at)) AS last_timestamp
       FROM runs GROUP BY source_path, source_format ORDER BY source_path, source_format`,
    )
    .all() as SourceRow[];
}
