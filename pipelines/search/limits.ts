/** Default limits of `find` and `query` (named in --help, so kept apart from the search code). */

/**
 * How much a statement of `query` or `find` may make the process grow (its resident memory) before
 * the SQL watchdog stops it; a single value it makes may take a quarter of it (sql/runner.ts).
 * Far above what an analytic statement over a large dataset holds (SQLite pages through tables
 * in a cache of 16 MB per mount and sorts beyond that in temporary files: a GROUP BY, join, window
 * or ORDER BY over every step of bench/find-query's corpus of 200,000 steps grew the process by at
 * most 31 MB), and far below what takes a machine down: what passes it builds huge values, as
 * `randomblob(500000000)` or a group_concat over every step does.
 */
const SQL_MAX_MEMORY_BYTES = 1024 * 1024 * 1024;

export const FIND_DEFAULTS = {
  maxResults: 100,
  maxPreviewBytes: 4096,
  maxTotalBytes: 8 * 1024 * 1024,
  maxMemoryBytes: SQL_MAX_MEMORY_BYTES,
  timeoutMs: 30_000,
} as const;

/**
 * How far a `find --match` expression may nest (parentheses and NOTs) and how many search terms it
 * may hold. Both keep the parser's recursion and the SQL the expression becomes (SQLite refuses
 * expression trees deeper than 1000) well inside their bounds, and are far beyond what people type.
 */
export const EXPRESSION_LIMITS = { maxDepth: 64, maxTerms: 256 } as const;

export const QUERY_DEFAULTS = {
  maxOutputRows: 10_000,
  maxOutputBytes: 64 * 1024 * 1024,
  maxMemoryBytes: SQL_MAX_MEMORY_BYTES,
  timeoutMs: 30_000,
} as const;

/** The mount name of a dataset given without a name. */
export const DEFAULT_MOUNT = 'dataset';

/**
 * The order of matches: `stored` (the order runs and steps were written, the default: the search
 * stops as soon as it has enough), `time` (oldest first by step time, or run start in run scope;
 * undated last), `relevance` (BM25 over the full-text index, best first). Ordering never changes
 * which rows match, only which come first and so which survive `--max-results`.
 */
export const FIND_SORTS = ['stored', 'time', 'relevance'] as const;
export type FindSort = (typeof FIND_SORTS)[number];
