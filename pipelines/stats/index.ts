/**
 * `stats`: the health of a dataset (kind, snapshot, rows/parts/bytes per relation, index state,
 * full-text availability) and the built-in reports `overview`, `agents`, `models` and `tools`.
 * Everything is read from the dataset's snapshot descriptor and its read-only SQLite index with
 * fixed SQL of ours, so it runs in-process.
 */
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { InvalidInputError } from '../../lib/errors.js';
import type { Row } from '../../lib/output.js';
import type { ReportName } from './reports.js';
import { INDEX_FILE, readManifest } from '../dataset/layout.js';
import { localRootOf, openDatasetArg, openLocalRoot, type OpenDataset } from '../dataset/open.js';
import type { ProgressFactory } from '../../lib/progress.js';
import { resolveDataset, type ResolveContext } from '../pins/resolve.js';
import { ftsInfo, indexSnapshotId } from '../dataset/index-meta.js';
import { LocalObjectStore } from '../dataset/store.js';
import { storedTable, type Relation } from '../dataset/relations.js';

export interface RelationHealth {
  relation: Relation;
  rows: number;
  /** Rows the index holds; equal to `rows` unless the index is damaged. */
  index_rows: number;
  parts: number;
  /** Bytes of its Parquet parts. */
  bytes: number;
  /** Bytes of its table and that table's indexes in the SQLite index. */
  index_bytes: number;
}

export interface DatasetHealth {
  dataset_uri: string;
  kind: string;
  snapshot_id: string;
  snapshot_created_at: string;
  /** What was found before opening: `present` (matched the snapshot), `stale` (another snapshot's) or `missing`. */
  index_state: IndexState;
  /** The index was rebuilt from the parts to answer (it was stale or missing, or in a cache). */
  index_rebuilt: boolean;
  index_path: string;
  /** The dataset's bytes by component: Parquet parts (all relations), the SQLite index file, and of these the content store (its parts and table) and the full-text index. */
  parts_bytes: number;
  index_bytes: number;
  content_store_bytes: number;
  full_text_bytes: number;
  index_built_at: string | null;
  fts_available: boolean;
  tokenizer: string | null;
  relations: RelationHealth[];
}

export type IndexState = 'present' | 'stale' | 'missing';

/** The state of a local dataset's index before anything rebuilds it. */
async function indexStateOf(path: string): Promise<IndexState> {
  const manifest = await readManifest(new LocalObjectStore(path)).catch(() => undefined);
  const index = join(path, INDEX_FILE);
  const indexed = indexSnapshotId(index);
  // A file that describes no snapshot (unreadable, or of an older index format) is stale, not missing.
  if (indexed === undefined) return existsSync(index) ? 'stale' : 'missing';
  return manifest && indexed === manifest.snapshot_id ? 'present' : 'stale';
}

/** The health of a dataset; a missing or stale index is rebuilt to answer (and `index_state` says which it was). */
export async function datasetHealth(rc: ResolveContext, arg: string | undefined, progress?: ProgressFactory): Promise<DatasetHealth> {
  const location = await resolveDataset(arg, { ...rc, purpose: 'read' });
  // Looked at before opening, because opening rebuilds a stale or missing index.
  const local = await localRootOf(location, rc.env, rc.signal);
  const before = await indexStateOf(local.root);
  const dataset = await openLocalRoot(local, rc.env, progress ? { progress } : {});
  try {
    return healthOf(dataset, before);
  } finally {
    dataset.close();
  }
}

/**
 * Bytes of each table of the index with its indexes (SQLite's dbstat, one pass that reads page
 * headers only: about 50 ms for a 150 MB index), keyed by table name.
 */
function tableBytes(db: OpenDataset['db']): Map<string, number> {
  const tableOf = new Map((db.prepare("SELECT name, tbl_name FROM sqlite_master WHERE type IN ('table', 'index')").all() as Array<{ name: string; tbl_name: string }>).map((o) => [o.name, o.tbl_name]));
  const bytes = new Map<string, number>();
  for (const { name, pgsize } of db.prepare('SELECT name, pgsize FROM dbstat WHERE aggregate = TRUE').all() as Array<{ name: string; pgsize: number }>) {
    const table = tableOf.get(name) ?? name;
    bytes.set(table, (bytes.get(table) ?? 0) + pgsize);
  }
  return bytes;
}

export function healthOf(dataset: OpenDataset, before: IndexState): DatasetHealth {
  const meta = new Map((dataset.db.prepare('SELECT key, value FROM index_meta').all() as Array<{ key: string; value: string }>).map((r) => [r.key, r.value]));
  const fts = ftsInfo(dataset.db);
  const relations = Object.keys(dataset.snapshot.rows).length > 0 ? (Object.keys(dataset.snapshot.rows) as Relation[]) : (Object.keys(dataset.snapshot.relations) as Relation[]);
  const inIndex = tableBytes(dataset.db);
  const partBytes = (relation: Relation): number => (dataset.snapshot.relations[relation] ?? []).reduce((n, p) => n + p.bytes, 0);
  const indexBytesOf = (relation: Relation): number => (inIndex.get(relation) ?? 0) + (relation === storedTable(relation) ? 0 : (inIndex.get(storedTable(relation)) ?? 0));
  const allParts = (Object.keys(dataset.snapshot.relations) as Relation[]).reduce((n, r) => n + partBytes(r), 0);
  const fullText = [...inIndex].filter(([name]) => name.startsWith('steps_fts')).reduce((n, [, b]) => n + b, 0);
  return {
    dataset_uri: dataset.uri,
    kind: dataset.kind,
    snapshot_id: dataset.snapshotId,
    snapshot_created_at: dataset.snapshot.created_at,
    index_state: before,
    index_rebuilt: dataset.indexState === 'rebuilt',
    index_path: dataset.db.name,
    parts_bytes: allParts,
    index_bytes: statSync(dataset.db.name).size,
    content_store_bytes: partBytes('contents') + indexBytesOf('contents'),
    full_text_bytes: fullText,
    index_built_at: meta.get('built_at') ?? null,
    fts_available: fts.available,
    tokenizer: fts.tokenizer,
    relations: relations.map((relation) => {
      const parts = dataset.snapshot.relations[relation] ?? [];
      // The relation name comes from the snapshot; it is checked against the index's own tables before use.
      const known = dataset.db.prepare("SELECT 1 FROM sqlite_master WHERE type IN ('table', 'view') AND name = ?").get(relation) !== undefined;
      const indexRows = known ? Number((dataset.db.prepare(`SELECT count(*) AS n FROM "${relation}"`).get() as { n: number }).n) : 0;
      return {
        relation,
        rows: dataset.snapshot.rows[relation] ?? parts.reduce((n, p) => n + p.rows, 0),
        index_rows: indexRows,
        parts: parts.length,
        bytes: parts.reduce((n, p) => n + p.bytes, 0),
        index_bytes: indexBytesOf(relation),
      };
    }),
  };
}

/** A row of a report: named figures (counts, tokens, cost, times). */
export type ReportRow = Row;

// Whole milliseconds: julianday's floating point would otherwise show 9000 ms as 8999.99.
const DURATION_MS = `round((julianday(finished_at) - julianday(started_at)) * 86400000.0)`;

function median(sorted: readonly number[]): number | null {
  if (sorted.length === 0) return null;
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

const round = (value: number | null, digits = 2): number | null => (value === null ? null : Math.round(value * 10 ** digits) / 10 ** digits);

/** Rows of `sql` grouped by their first column `key`, with the median of the second column `value`. */
function groupMedians(dataset: OpenDataset, sql: string): Map<string, number | null> {
  const medians = new Map<string, number | null>();
  let key: string | undefined;
  let values: number[] = [];
  const flush = (): void => {
    if (key !== undefined) medians.set(key, median(values));
  };
  for (const row of dataset.db.prepare(sql).iterate() as Iterable<{ key: string; value: number }>) {
    if (row.key !== key) {
      flush();
      key = row.key;
      values = [];
    }
    values.push(Number(row.value));
  }
  flush();
  return medians;
}

/**
 * Usage counts each API response once across the whole dataset: resumed and forked sessions and
 * subagent files repeat earlier responses (same `response_id`), and only the first copy counts.
 * Steps without a response identity count each. Per run, `runs` keeps every step's own sums.
 *
 * `input_tokens` are the prompt tokens neither read from nor written to the cache.
 */
const USAGE = `
  WITH counted AS (
    SELECT s.*, coalesce(s.model_name, r.agent_model_name, '(unknown)') AS model, coalesce(r.agent_name, r.agent_id, '(unknown)') AS agent
    FROM steps s JOIN runs r ON r.document_id = s.document_id
    WHERE s.response_id IS NULL OR s.rowid IN (SELECT min(rowid) FROM steps WHERE response_id IS NOT NULL GROUP BY response_id)
  )`;
const USAGE_COLUMNS = `
  count(DISTINCT response_id) AS responses,
  sum(max(coalesce(prompt_tokens, 0) - coalesce(cached_tokens, 0) - coalesce(cache_write_tokens, 0), 0)) AS input_tokens,
  sum(completion_tokens) AS output_tokens, sum(cache_write_tokens) AS cache_write_tokens, sum(cached_tokens) AS cache_read_tokens,
  sum(cost_usd) AS cost_usd`;

/** Models whose counted steps have tokens but no cost (no price is known for them). */
function unpriced(dataset: OpenDataset): string[] {
  return dataset.db
    .prepare(`${USAGE} SELECT DISTINCT model FROM counted WHERE cost_usd IS NULL AND (prompt_tokens > 0 OR completion_tokens > 0) ORDER BY 1`)
    .pluck()
    .all() as string[];
}

function overview(dataset: OpenDataset): Row[] {
  const runs = dataset.db
    .prepare(
      `SELECT count(*) AS runs, coalesce(sum(step_count), 0) AS steps, coalesce(sum(tool_call_count), 0) AS tool_calls,
         avg(${DURATION_MS}) AS mean_duration_ms, avg(step_count) AS mean_steps_per_run,
         max(step_count) AS max_steps_per_run, min(started_at) AS first_started_at, max(finished_at) AS last_finished_at
       FROM runs`,
    )
    .get() as Record<string, number | string | null>;
  const usage = dataset.db.prepare(`${USAGE} SELECT ${USAGE_COLUMNS} FROM counted`).get() as Row;
  const durations = (dataset.db.prepare(`SELECT ${DURATION_MS} AS d FROM runs WHERE started_at IS NOT NULL AND finished_at IS NOT NULL ORDER BY d`).pluck().all() as number[]).map(Number);
  const steps = (dataset.db.prepare('SELECT step_count FROM runs ORDER BY step_count').pluck().all() as number[]).map(Number);
  return [
    {
      runs: runs.runs,
      steps: runs.steps,
      tool_calls: runs.tool_calls,
      ...usage,
      mean_duration_ms: round(runs.mean_duration_ms as number | null),
      median_duration_ms: round(median(durations)),
      mean_steps_per_run: round(runs.mean_steps_per_run as number | null),
      median_steps_per_run: median(steps),
      max_steps_per_run: runs.max_steps_per_run,
      first_started_at: runs.first_started_at,
      last_finished_at: runs.last_finished_at,
    },
  ];
}

function agents(dataset: OpenDataset): Row[] {
  const usage = new Map((dataset.db.prepare(`${USAGE} SELECT agent, ${USAGE_COLUMNS} FROM counted GROUP BY agent`).all() as Row[]).map((row) => [row.agent, row]));
  const rows = dataset.db
    .prepare(
      `SELECT coalesce(agent_name, agent_id, '(unknown)') AS agent, count(*) AS runs, coalesce(sum(step_count), 0) AS steps, coalesce(sum(tool_call_count), 0) AS tool_calls,
         avg(${DURATION_MS}) AS mean_duration_ms, avg(step_count) AS mean_steps_per_run
       FROM runs GROUP BY 1 ORDER BY runs DESC, 1`,
    )
    .all() as Row[];
  return rows.map(({ mean_duration_ms, mean_steps_per_run, ...r }) => {
    const { agent: _agent, ...counted } = usage.get(r.agent) ?? {};
    return { ...r, ...counted, mean_duration_ms: round(mean_duration_ms as number | null), mean_steps_per_run: round(mean_steps_per_run as number | null) };
  });
}

function models(dataset: OpenDataset): Row[] {
  // Agent steps only; a turn without its own model ran on the agent's model.
  return dataset.db
    .prepare(
      `${USAGE} SELECT model, count(DISTINCT document_id) AS runs, count(*) AS steps, ${USAGE_COLUMNS}, sum(tool_call_count) AS tool_calls
       FROM counted WHERE source = 'agent'
       GROUP BY 1 ORDER BY steps DESC, 1`,
    )
    .all() as Row[];
}

function tools(dataset: OpenDataset): Row[] {
  const medians = groupMedians(dataset, 'SELECT function_name AS key, result_bytes AS value FROM tool_calls WHERE result_bytes IS NOT NULL ORDER BY function_name, result_bytes');
  const rows = dataset.db
    .prepare(
      `SELECT function_name AS tool, count(*) AS calls, coalesce(sum(is_error), 0) AS errors, count(DISTINCT document_id) AS runs
       FROM tool_calls GROUP BY 1 ORDER BY calls DESC, 1`,
    )
    .all() as Array<{ tool: string; calls: number; errors: number; runs: number }>;
  return rows.map((r) => ({ ...r, error_rate: round(r.errors / r.calls, 4), median_result_bytes: medians.get(r.tool) ?? null }));
}

export interface Report {
  rows: ReportRow[];
  /** Models whose steps have tokens but no cost: no price is known for them. */
  unpriced: string[];
}

/** One of the built-in reports of a Storyline dataset. */
export async function statsReport(rc: ResolveContext, arg: string | undefined, name: ReportName, progress?: ProgressFactory): Promise<Report> {
  const dataset = await openDatasetArg(rc, arg, progress ? { progress } : {});
  try {
    return reportOf(dataset, name);
  } finally {
    dataset.close();
  }
}

/** One of the built-in reports of an open Storyline dataset. */
export function reportOf(dataset: OpenDataset, name: ReportName): Report {
  requireStoryline(dataset, `stats ${name}`);
  return { rows: report(dataset, name), unpriced: name === 'tools' ? [] : unpriced(dataset) };
}

function requireStoryline(dataset: OpenDataset, what: string): void {
  if (dataset.kind !== 'storyline') {
    throw new InvalidInputError(`${dataset.uri}: \`${what}\` reports on Storyline datasets; this one is a compact record store`, {
      hint: '`trajstore stats` shows its health; `trajstore query` runs SQL over dataset.records',
    });
  }
}

/**
 * Usage per model and day (UTC, from the step's time, else its run's start): what the web
 * interface charts as tokens and cost by model over time. Counted as the other reports count
 * usage (each API response once).
 */
export function usageTimeline(dataset: OpenDataset): Report {
  requireStoryline(dataset, 'usage timeline');
  const rows = dataset.db
    .prepare(
      `${USAGE} SELECT substr(coalesce(timestamp, (SELECT started_at FROM runs_stored r WHERE r.document_id = counted.document_id)), 1, 10) AS day, model, count(*) AS steps, ${USAGE_COLUMNS}
       FROM counted WHERE source = 'agent'
       GROUP BY 1, 2 ORDER BY 1, 2`,
    )
    .all() as Row[];
  return { rows, unpriced: unpriced(dataset) };
}

function report(dataset: OpenDataset, name: ReportName): Row[] {
  switch (name) {
    case 'overview':
      return overview(dataset);
    case 'agents':
      return agents(dataset);
    case 'models':
      return models(dataset);
    case 'tools':
      return tools(dataset);
  }
}
