/**
 * `find`: parses the `--match` expressions (or takes an identity), plans one SQL statement, runs it
 * against the dataset's index under the SQL watchdog and shapes the reference's JSON document
 * (reference/trajectory-formats.md §5.4) with bounded previews.
 */
import { InvalidInputError } from '../../lib/errors.js';
import type { ProgressFactory } from '../../lib/progress.js';
import { ftsInfo } from '../dataset/index-meta.js';
import { openDatasetArg, type OpenDataset } from '../dataset/open.js';
import type { ResolveContext } from '../pins/resolve.js';
import type { Expr } from './grammar/ast.js';
import { ExpressionError } from './grammar/errors.js';
import { parseExpression } from './grammar/parser.js';
import { FIND_DEFAULTS, type FindSort } from './limits.js';
import { MATCH_COLUMNS, planFind, positiveTerms, type FindPlan, type Identity, type SearchMode, type SearchScope } from './planner.js';
import { buildPreview } from './preview.js';
import { resolveText } from '../dataset/contents.js';
import { indexLookup } from '../dataset/content-lookup.js';
import { runReadOnlySql, type SqlStatement } from './sql/runner.js';

export interface FindOptions {
  /** `--match` expressions, all of which must match; or an identity. */
  matches: string[];
  identity?: Identity;
  /** Only runs imported from this source file. */
  sourcePath?: string;
  /** The order of the matches (`stored` when omitted); never which rows match. */
  sort?: FindSort;
  maxResults: number;
  maxPreviewBytes: number;
  maxTotalBytes: number;
  timeoutMs: number;
}

export interface FindRequest extends FindOptions {
  /** A DATASET argument: a path, a pin, or undefined for the default dataset. */
  dataset: string | undefined;
  progress?: ProgressFactory;
}

export interface FindMatch {
  source_path: string;
  document_id: string;
  run_id: string | null;
  session_id: string;
  step_id: string | null;
  step_source: string | null;
  effective_kind: string | null;
  timestamp: string | null;
  preview: string;
}

export interface FindDocument {
  dataset_uri: string;
  snapshot_id: string;
  query: { matches: string[]; expression: string | null };
  /** `sort`: the order applied (a `relevance` request without a full-text term to rank by is `stored`). */
  search: { mode: SearchMode; scope: SearchScope; sort: FindSort; fts_available: boolean; tokenizer: string | null };
  truncated: boolean;
  matches: FindMatch[];
}

/** Parses every `--match`; an error names which one when there are several. */
export function parseMatches(matches: readonly string[]): Expr[] {
  return matches.map((text, i) => {
    try {
      return parseExpression(text);
    } catch (error) {
      if (error instanceof ExpressionError && matches.length > 1) throw error.numbered(i + 1);
      throw error;
    }
  });
}

/** The words and phrases a match's preview shows (the positive terms of the expressions), for highlighting. */
export function highlightTerms(matches: readonly string[]): string[] {
  return parseMatches(matches).flatMap((e) => positiveTerms(e));
}

/** Opens the dataset, searches it, closes it. */
export async function findInDataset(rc: ResolveContext, request: FindRequest): Promise<FindDocument> {
  const dataset = await openDatasetArg(rc, request.dataset, request.progress ? { progress: request.progress } : {});
  try {
    return runFind(dataset, request);
  } finally {
    dataset.close();
  }
}

/**
 * A find in two halves around its one statement: the statement, and the document its rows make.
 * `serve` runs the statement on its SQL thread (sql/thread/); the command line runs it in place (runFind).
 */
export interface PreparedFind {
  statement: SqlStatement;
  document(rows: readonly unknown[][]): FindDocument;
}

export function runFind(dataset: OpenDataset, options: FindOptions): FindDocument {
  const find = prepareFind(dataset, options);
  const rows: unknown[][] = [];
  runReadOnlySql({ ...find.statement, onRow: (row) => rows.push(row) });
  return find.document(rows);
}

export function prepareFind(dataset: OpenDataset, options: FindOptions): PreparedFind {
  if (dataset.kind !== 'storyline') {
    throw new InvalidInputError(`${dataset.uri}: find searches Storyline datasets; this one is a compact record store`, {
      hint: 'use `trajstore query` with SQL over dataset.records',
    });
  }
  const expressions = parseMatches(options.matches);
  const fts = ftsInfo(dataset.db);
  const plan = planFind({
    expressions,
    ...(options.identity ? { identity: options.identity } : {}),
    ...(options.sourcePath !== undefined ? { sourcePath: options.sourcePath } : {}),
    limit: options.maxResults + 1,
    ftsAvailable: fts.available,
    ...(options.sort ? { sort: options.sort } : {}),
  });
  return {
    statement: {
      mounts: [{ name: 'dataset', path: dataset.db.name }],
      sql: plan.sql,
      params: plan.params,
      maxRows: options.maxResults + 1,
      maxBytes: Number.MAX_SAFE_INTEGER,
      maxMemoryBytes: FIND_DEFAULTS.maxMemoryBytes,
      timeoutMs: options.timeoutMs,
    },
    document: (rows) => findDocument(dataset, options, plan, fts, rows),
  };
}

/** The document of a find from the rows of its statement, with bounded previews. */
function findDocument(dataset: OpenDataset, options: FindOptions, plan: FindPlan, fts: ReturnType<typeof ftsInfo>, rows: readonly unknown[][]): FindDocument {
  let truncated = rows.length > options.maxResults;
  const lookup = indexLookup(dataset.db, dataset.uri);
  const stored = (text: string): string => resolveText(text, lookup) as string;
  const matches: FindMatch[] = [];
  let total = 0;
  for (const values of rows.slice(0, options.maxResults)) {
    const row = Object.fromEntries(MATCH_COLUMNS.map((name, i) => [name, values[i] ?? null])) as Record<(typeof MATCH_COLUMNS)[number], string | null>;
    const candidates = plan.scope === 'runs' ? [row.run_preview] : [row.message_text, row.reasoning_content, row.observation_text];
    const match: FindMatch = {
      source_path: row.source_path ?? '',
      document_id: row.document_id ?? '',
      run_id: row.run_id,
      session_id: row.session_id ?? '',
      step_id: row.step_id,
      step_source: row.step_source,
      effective_kind: row.effective_kind,
      timestamp: row.timestamp,
      preview: buildPreview(candidates, plan.highlight, options.maxPreviewBytes, plan.scope === 'runs' ? undefined : stored),
    };
    total += Buffer.byteLength(JSON.stringify(match));
    if (total > options.maxTotalBytes) {
      truncated = true;
      break;
    }
    matches.push(match);
  }
  return {
    dataset_uri: dataset.uri,
    snapshot_id: dataset.snapshotId,
    query: { matches: [...options.matches], expression: expressionText(options.matches) },
    search: { mode: plan.mode, scope: plan.scope, sort: plan.sort, fts_available: fts.available, tokenizer: fts.tokenizer },
    truncated,
    matches,
  };
}

/** Several `--match` are ANDed: shown as one expression with each part parenthesised. */
function expressionText(matches: readonly string[]): string | null {
  if (matches.length === 0) return null;
  if (matches.length === 1) return matches[0] ?? null;
  return matches.map((m) => `(${m})`).join(' AND ');
}
