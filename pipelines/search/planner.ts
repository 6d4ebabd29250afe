/**
 * Turns `find` requests into one parameterised SQL statement over a dataset's SQLite index.
 *
 * Mode and scope (reference §5.4): text terms -> `fts`/steps; JSON predicates only -> `json`/runs;
 * JSON only but with a step-level `#json.metrics(...)` -> `json`/steps; text and JSON -> `fts+json`/steps;
 * `--run-id`/`--document-id`/`--session-id` -> `identity` (steps when `--step-id` is given, else runs).
 *
 * Text: a term is an FTS5 phrase MATCH on `steps_fts` (its words in order, case- and accent-insensitive;
 * Chinese, Japanese and Korean character by character: dataset/fts-text.ts); a term without letters or
 * digits, or any term when the FTS index is unavailable, is a substring (LIKE) scan of the same columns.
 * JSON: `json_type` + `json_extract` with the comparison typed by the literal (a number compares only
 * with JSON numbers, a string only with JSON strings), so `$.n = "5"` does not match `5`.
 * Every user value is a bound parameter; the SQL text holds only names from relations.ts.
 */
import { ftsPhrase } from '../dataset/fts-text.js';
import { RUNS, STEPS } from '../dataset/relations.js';
import type { FindSort } from './limits.js';
import { leaves, type Expr, type JsonColumn, type JsonNode, type TextField, type TextNode } from './grammar/ast.js';

export type SearchMode = 'fts' | 'json' | 'fts+json' | 'identity';
export type SearchScope = 'steps' | 'runs';

export type Param = string | number | null;

export interface Identity {
  runId?: string;
  documentId?: string;
  sessionId?: string;
  stepId?: string;
}

export interface FindRequest {
  /** Parsed `--match` expressions; all must match. Empty in identity mode. */
  expressions: Expr[];
  identity?: Identity;
  /** `--source PATH`: only runs imported from this source file. */
  sourcePath?: string;
  /** Rows to fetch (the caller asks for one more than it shows, to know about truncation). */
  limit: number;
  ftsAvailable: boolean;
  /** `stored` when omitted. */
  sort?: FindSort;
}

export interface FindPlan {
  mode: SearchMode;
  scope: SearchScope;
  /** The order applied: `relevance` needs a text term every match contains, else it is `stored`. */
  sort: FindSort;
  sql: string;
  params: Param[];
  /** The words of the positive text terms, for placing previews. */
  highlight: string[];
}

/** Columns the output reads from each matched row, in order. */
export const MATCH_COLUMNS = [
  'source_path',
  'document_id',
  'run_id',
  'session_id',
  'step_id',
  'step_source',
  'effective_kind',
  'timestamp',
  'message_text',
  'reasoning_content',
  'observation_text',
  'run_preview',
] as const;

const FTS_COLUMNS = ['message_text', 'reasoning_content', 'observation_text'] as const;
type FtsColumn = (typeof FTS_COLUMNS)[number];

/** Which step text columns a field searches, and which step `source` it keeps. */
const TEXT_TARGETS: Record<Exclude<TextField, 'model'>, { columns: readonly FtsColumn[]; sources?: readonly string[]; model?: boolean }> = {
  content: { columns: FTS_COLUMNS },
  all: { columns: FTS_COLUMNS, model: true },
  message: { columns: ['message_text'] },
  user: { columns: ['message_text'], sources: ['user'] },
  assistant: { columns: ['message_text'], sources: ['agent'] },
  system: { columns: ['message_text'], sources: ['system'] },
  prompt: { columns: ['message_text'], sources: ['system', 'user'] },
  reasoning: { columns: ['reasoning_content'] },
  observation: { columns: ['observation_text'] },
};

/** Run-level JSON columns searched by an unscoped predicate in run scope, and step-level ones in step scope. */
const RUN_UNSCOPED: readonly JsonColumn[] = ['agent_extra', 'final_metrics', 'extra', 'meta', 'unknown_fields'];
const STEP_UNSCOPED: readonly JsonColumn[] = ['metrics', 'extra'];
const STEP_LEVEL: ReadonlySet<JsonColumn> = new Set(['metrics']);

const MODEL_EXPR = 'COALESCE(s.model_name, r.agent_model_name)';

/** SQLite's default SQLITE_MAX_LIKE_PATTERN_LENGTH (better-sqlite3 keeps it): the longest pattern LIKE takes, in bytes. */
const LIKE_PATTERN_LIMIT = 50_000;

// The names the SQL uses must exist in relations.ts; a rename there fails here at load, not at query time.
for (const [relation, names] of [
  [RUNS, ['document_id', 'run_id', 'session_id', 'source_path', 'started_at', 'agent_model_name', 'agent_name', 'notes', ...RUN_UNSCOPED.map((c) => `${c}_json`), 'task_json', 'prompt_json']],
  [STEPS, ['document_id', 'session_id', 'step_id', 'turn_ordinal', 'source', 'effective_kind', 'timestamp', 'model_name', 'metrics_json', 'extra_json', ...FTS_COLUMNS]],
] as const) {
  for (const name of names) if (!relation.some((c) => c.name === name)) throw new Error(`planner: column ${name} is not in relations.ts`);
}

export function searchMode(expressions: readonly Expr[]): { mode: SearchMode; scope: SearchScope } {
  const all = expressions.flatMap(leaves);
  const hasText = all.some((l) => l.type === 'text');
  const hasJson = all.some((l) => l.type === 'json');
  if (hasText && hasJson) return { mode: 'fts+json', scope: 'steps' };
  if (hasText) return { mode: 'fts', scope: 'steps' };
  const stepLevel = all.some((l) => l.type === 'json' && l.column !== null && STEP_LEVEL.has(l.column));
  return { mode: 'json', scope: stepLevel ? 'steps' : 'runs' };
}

class SqlBuilder {
  readonly params: Param[] = [];
  /**
   * The step's rowid as the query reaches it: from the FTS index when a term drives the query, so
   * that other terms' FTS tests run on the index's own rows, before the join to steps and runs.
   */
  stepRowid = 's.rowid';
  constructor(
    private readonly scope: SearchScope,
    private readonly ftsAvailable: boolean,
  ) {}

  bind(value: Param): string {
    this.params.push(value);
    return '?';
  }

  expr(node: Expr): string {
    switch (node.type) {
      case 'text':
        return this.text(node);
      case 'json':
        return this.json(node);
      case 'not':
        return `NOT ${this.expr(node.operand)}`;
      case 'and':
      case 'or':
        return `(${node.operands.map((o) => this.expr(o)).join(node.type === 'and' ? ' AND ' : ' OR ')})`;
    }
  }

  /** The FTS5 query for a text term, or null when the term cannot use the index (no words in it, no index, `#model`). */
  ftsQuery(node: TextNode): string | null {
    if (node.field === 'model' || !this.ftsAvailable) return null;
    const phrase = ftsPhrase(node.text);
    if (phrase === null) return null;
    const columns = TEXT_TARGETS[node.field].columns;
    // A filter naming every indexed column selects nothing away but still costs FTS5 a column check per hit.
    if (columns.length === FTS_COLUMNS.length) return phrase;
    return `${columns.length === 1 ? columns[0] : `{${columns.join(' ')}}`} : ${phrase}`;
  }

  /** `s.source IN (...)` for fields that keep one side of the conversation, else null. */
  sourceFilter(node: TextNode): string | null {
    const sources = node.field === 'model' ? undefined : TEXT_TARGETS[node.field].sources;
    return sources ? `s.source IN (${sources.map((v) => this.bind(v)).join(', ')})` : null;
  }

  private text(node: TextNode): string {
    if (node.field === 'model') return this.like([MODEL_EXPR], node.text);
    const target = TEXT_TARGETS[node.field];
    const parts: string[] = [];
    const query = this.ftsQuery(node);
    if (query !== null) parts.push(`${this.stepRowid} IN (SELECT rowid FROM steps_fts WHERE steps_fts MATCH ${this.bind(query)})`);
    else parts.push(this.like(target.columns.map((c) => `s.${c}`), node.text));
    if (target.model) parts.push(this.like([MODEL_EXPR], node.text));
    const matched = parts.length === 1 ? (parts[0] as string) : `(${parts.join(' OR ')})`;
    const source = this.sourceFilter(node);
    return source ? `(${matched} AND ${source})` : matched;
  }

  /** Case-insensitive (ASCII) substring test with `%`, `_` and `\` in the term taken literally. */
  private like(columns: readonly string[], text: string): string {
    const pattern = `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
    // LIKE reads its pattern as C text: a NUL would end it there, and `%a\0b%` would become `%a`
    // (a NUL alone: `%`, every row); and it refuses patterns past SQLITE_MAX_LIKE_PATTERN_LENGTH
    // as "too complex". instr compares whole values byte for byte; lower() folds ASCII only, as LIKE does.
    if (text.includes('\0') || Buffer.byteLength(pattern) > LIKE_PATTERN_LIMIT) {
      return `(${columns.map((c) => `instr(lower(COALESCE(${c}, '')), lower(${this.bind(text)})) > 0`).join(' OR ')})`;
    }
    // COALESCE: a NULL column "does not contain" the term, so that NOT of it holds.
    return `(${columns.map((c) => `COALESCE(${c}, '') LIKE ${this.bind(pattern)} ESCAPE '\\'`).join(' OR ')})`;
  }

  private json(node: JsonNode): string {
    const columns = node.column === null ? (this.scope === 'runs' ? RUN_UNSCOPED : STEP_UNSCOPED) : [node.column];
    const sql = columns.map((c) => this.jsonTest(this.jsonColumn(c), node));
    return sql.length === 1 ? (sql[0] as string) : `(${sql.join(' OR ')})`;
  }

  /** In step scope, the turn's own `metrics`/`extra`; every other column is the run's. */
  private jsonColumn(column: JsonColumn): string {
    if (this.scope === 'steps' && STEP_UNSCOPED.includes(column)) return `s.${column}_json`;
    return `r.${column}_json`;
  }

  /** Never NULL: a missing path or a NULL column is "does not match", so NOT of it matches. */
  private jsonTest(column: string, node: JsonNode): string {
    return `COALESCE(${this.typedCompare(column, node)}, 0)`;
  }

  private typedCompare(column: string, node: JsonNode): string {
    const type = `json_type(${column}, ${this.bind(node.path)})`;
    const { value, op } = node;
    if (value === null || typeof value === 'boolean') {
      const name = value === null ? 'null' : String(value);
      return `(${type} ${op === '=' ? '=' : '!='} ${this.bind(name)})`;
    }
    const types = typeof value === 'number' ? `IN ('integer', 'real')` : `= 'text'`;
    const extract = `json_extract(${column}, ${this.bind(node.path)})`;
    if (op === '!=') {
      // The path exists and holds something other than this value (another type counts as different).
      const again = `json_type(${column}, ${this.bind(node.path)})`;
      return `(${type} IS NOT NULL AND NOT (${again} ${types} AND ${extract} = ${this.bind(value)}))`;
    }
    return `(${type} ${types} AND ${extract} ${op} ${this.bind(value)})`;
  }
}

/**
 * The text of a matched step is taken as stored (a long text is a reference to the content store):
 * find puts back only what its preview shows, not three texts per match.
 */
const STEP_SELECT = `SELECT r.source_path, s.document_id, r.run_id, s.session_id, s.step_id, s.source AS step_source, s.effective_kind, s.timestamp,
  st.message_text, st.reasoning_content, st.observation_text, NULL AS run_preview
FROM steps s JOIN runs r ON r.document_id = s.document_id JOIN steps_stored st ON st.rowid = s.rowid`;

const STEP_SELECT_FROM_FTS = STEP_SELECT.replace('FROM steps s', 'FROM steps_fts JOIN steps s ON s.rowid = steps_fts.rowid');

/** Fields whose terms also match the model name, so the FTS index alone cannot say which rows match. */
const TEXT_TARGETS_WITH_MODEL: ReadonlySet<TextField> = new Set(['model', 'all']);

const RUN_SELECT = `SELECT r.source_path, r.document_id, r.run_id, r.session_id, NULL AS step_id, NULL AS step_source, NULL AS effective_kind, r.started_at AS timestamp,
  NULL AS message_text, NULL AS reasoning_content, NULL AS observation_text,
  COALESCE(r.notes, (SELECT p.message_text FROM steps p WHERE p.document_id = r.document_id AND p.message_text != '' ORDER BY p.turn_ordinal LIMIT 1)) AS run_preview
FROM runs r`;

export function planFind(request: FindRequest): FindPlan {
  const identity = request.identity;
  const { mode, scope } = identity
    ? { mode: 'identity' as const, scope: identity.stepId !== undefined ? ('steps' as const) : ('runs' as const) }
    : searchMode(request.expressions);
  const b = new SqlBuilder(scope, request.ftsAvailable);
  const where: string[] = [];
  if (identity) {
    if (identity.runId !== undefined) where.push(`r.run_id = ${b.bind(identity.runId)}`);
    if (identity.documentId !== undefined) where.push(`r.document_id = ${b.bind(identity.documentId)}`);
    // The run's session (equal to its steps'): found through the runs_session index, then its steps by document.
    if (identity.sessionId !== undefined) where.push(`r.session_id = ${b.bind(identity.sessionId)}`);
    if (identity.stepId !== undefined) where.push(`s.step_id = ${b.bind(identity.stepId)}`);
  }
  // A term every match must contain drives the query from the FTS index in rowid order, so the
  // LIMIT stops the search early instead of collecting every hit first.
  const conjuncts = request.expressions.flatMap((e) => (e.type === 'and' ? e.operands : [e]));
  const driver = scope === 'steps' ? conjuncts.find((c): c is TextNode => c.type === 'text' && !TEXT_TARGETS_WITH_MODEL.has(c.field) && b.ftsQuery(c) !== null) : undefined;
  if (driver) {
    b.stepRowid = '+steps_fts.rowid';
    where.push(`steps_fts MATCH ${b.bind(b.ftsQuery(driver))}`);
    const source = b.sourceFilter(driver);
    if (source) where.push(source);
  }
  for (const conjunct of conjuncts) if (conjunct !== driver) where.push(b.expr(conjunct));
  if (request.sourcePath !== undefined) where.push(`r.source_path = ${b.bind(request.sourcePath)}`);
  const select = scope === 'runs' ? RUN_SELECT : driver ? STEP_SELECT_FROM_FTS : STEP_SELECT;
  const stored = scope === 'runs' ? 'r.rowid' : driver ? 'steps_fts.rowid' : 's.rowid';
  // BM25 scores the term that drives the query from the index (lower is better); without one
  // there is nothing to rank by, and the stored order stands.
  const sort: FindSort = request.sort === 'relevance' && !driver ? 'stored' : (request.sort ?? 'stored');
  const time = scope === 'runs' ? 'r.started_at' : 's.timestamp';
  const order = sort === 'relevance' ? `bm25(steps_fts), ${stored}` : sort === 'time' ? `${time} IS NULL, ${time}, ${stored}` : stored;
  const sql = `${select}\nWHERE ${where.length > 0 ? where.join('\n  AND ') : '1'}\nORDER BY ${order}\nLIMIT ${b.bind(request.limit)}`;
  const highlight = request.expressions.flatMap((e) => positiveTerms(e));
  return { mode, scope, sort, sql, params: b.params, highlight };
}

/** Text terms that are not under a NOT: what a preview should show. */
export function positiveTerms(expr: Expr): string[] {
  switch (expr.type) {
    case 'text':
      return [expr.text];
    case 'json':
    case 'not':
      return [];
    case 'and':
    case 'or':
      return expr.operands.flatMap(positiveTerms);
  }
}
