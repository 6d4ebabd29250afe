/**
 * What the API reads of runs, with fixed SQL over the index (user values always bound): a page of
 * runs by keyset, one run with its parent and subagent runs, and a page of one run's steps with
 * their tool calls. Each page reads through an index or stops at its LIMIT, except where noted.
 */
import { InvalidInputError, NotFoundError } from '../../lib/errors.js';
import type { OpenDataset } from '../dataset/open.js';

export const RUN_SORTS = ['started_at', 'cost_usd', 'step_count', 'tool_call_count'] as const;
export type RunSort = (typeof RUN_SORTS)[number];

export interface RunFilters {
  agent?: string;
  model?: string;
  /** started_at >= since (RFC 3339 text, compared as text like the stored timestamps). */
  since?: string;
  /** started_at < until. */
  until?: string;
  /** source_path equal to this, or under it (a directory prefix). */
  source?: string;
  minCost?: number;
  maxCost?: number;
  sort: RunSort;
  order: 'asc' | 'desc';
  limit: number;
  cursor?: string;
}

type Row = Record<string, unknown>;

/** The run columns of a list row: short ones only, so no value is fetched from the content store. */
const LIST_COLUMNS = [
  'document_id', 'run_id', 'session_id', 'agent_id', 'agent_name', 'agent_model_name', 'source_path', 'source_format',
  'parent_session_id', 'parent_tool_call_id', 'started_at', 'finished_at', 'step_count', 'tool_call_count',
  'prompt_tokens', 'completion_tokens', 'cached_tokens', 'cache_write_tokens', 'cost_usd',
];

/** The sort key with NULLs made comparable, so that a keyset cursor can step over them. */
const SORT_KEY: Record<RunSort, string> = {
  started_at: "ifnull(started_at, '')",
  cost_usd: 'ifnull(cost_usd, -1)',
  step_count: 'step_count',
  tool_call_count: 'tool_call_count',
};

const encodeCursor = (key: unknown, rowid: number): string => Buffer.from(JSON.stringify([key, rowid])).toString('base64url');

function decodeCursor(cursor: string): [string | number, number] {
  try {
    const value = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as unknown;
    if (Array.isArray(value) && value.length === 2 && (typeof value[0] === 'string' || typeof value[0] === 'number') && Number.isInteger(value[1])) return value as [string | number, number];
  } catch {
    // Reported below.
  }
  throw new InvalidInputError('invalid cursor: pass back the next_cursor of the previous page unchanged');
}

/**
 * A page of runs in the order asked for. The runs are read in sort order from the start of the
 * keyset, so a page costs a pass over the runs relation (not the steps) when the filters are rare.
 */
export function listRuns(dataset: OpenDataset, f: RunFilters): { runs: Row[]; next_cursor: string | null } {
  const where: string[] = [];
  const params: Array<string | number> = [];
  const when = (given: unknown, condition: string, ...values: Array<string | number>): void => {
    if (given === undefined) return;
    where.push(condition);
    params.push(...values);
  };
  const prefix = f.source?.replace(/\/+$/, '') ?? '';
  when(f.agent, '(agent_name = ? OR agent_id = ?)', f.agent ?? '', f.agent ?? '');
  when(f.model, 'agent_model_name = ?', f.model ?? '');
  when(f.since, 'started_at >= ?', f.since ?? '');
  when(f.until, 'started_at < ?', f.until ?? '');
  when(f.source, '(source_path = ? OR substr(source_path, 1, ?) = ?)', prefix, prefix.length + 1, `${prefix}/`);
  when(f.minCost, 'cost_usd >= ?', f.minCost ?? 0);
  when(f.maxCost, 'cost_usd <= ?', f.maxCost ?? 0);
  const key = SORT_KEY[f.sort];
  const cmp = f.order === 'desc' ? '<' : '>';
  if (f.cursor !== undefined) {
    const [after, rowid] = decodeCursor(f.cursor);
    where.push(`(${key} ${cmp} ? OR (${key} = ? AND rowid ${cmp} ?))`);
    params.push(after, after, rowid);
  }
  const dir = f.order === 'desc' ? 'DESC' : 'ASC';
  const sql = `SELECT rowid AS _rowid, ${key} AS _key, ${LIST_COLUMNS.join(', ')} FROM runs ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY ${key} ${dir}, rowid ${dir} LIMIT ?`;
  const rows = dataset.db.prepare(sql).all(...params, f.limit + 1) as Row[];
  const more = rows.length > f.limit;
  const page = rows.slice(0, f.limit);
  const last = page[page.length - 1];
  return {
    runs: page.map(({ _rowid, _key, ...run }) => run),
    next_cursor: more && last ? encodeCursor(last._key, Number(last._rowid)) : null,
  };
}

/** A JSON column's value parsed; text that is not JSON stays text. */
function parsed(value: unknown): unknown {
  if (typeof value !== 'string') return value ?? null;
  try {
    return JSON.parse(value) as unknown;
  } catch {
    return value;
  }
}

/** Columns named `*_json` parsed and renamed without the suffix. */
function withJson(row: Row): Row {
  const out: Row = {};
  for (const [name, value] of Object.entries(row)) {
    if (name.endsWith('_json')) out[name.slice(0, -5)] = parsed(value);
    else out[name] = typeof value === 'number' && /^is_/.test(name) ? value !== 0 : value;
  }
  return out;
}

/**
 * One run: every indexed column, its parent run (by the parent session) and its subagent runs.
 * The subagent runs are found by a pass over the runs relation (there is no index on
 * parent_session_id); the runs are a small part of a dataset beside its steps.
 */
export function runDetail(dataset: OpenDataset, documentId: string): Row {
  const run = dataset.db.prepare('SELECT * FROM runs WHERE document_id = ?').get(documentId) as Row | undefined;
  if (!run) throw new NotFoundError(`no run with document id ${JSON.stringify(documentId)} in ${dataset.uri}`);
  const parent =
    run.parent_session_id === null
      ? null
      : ((dataset.db.prepare('SELECT document_id, session_id, agent_name FROM runs WHERE session_id = ? ORDER BY rowid LIMIT 1').get(run.parent_session_id) as Row | undefined) ?? null);
  const children = dataset.db
    .prepare('SELECT document_id, session_id, agent_name, agent_model_name, parent_tool_call_id, step_count, cost_usd FROM runs WHERE parent_session_id = ? ORDER BY started_at, rowid')
    .all(run.session_id) as Row[];
  return { ...withJson(run), parent, children };
}

const STEP_COLUMNS = [
  'step_id', 'turn_ordinal', 'source', 'effective_kind', 'timestamp', 'model_name', 'reasoning_effort', 'message_text', 'message_json',
  'reasoning_content', 'observation_text', 'prompt_tokens', 'completion_tokens', 'cached_tokens', 'cache_write_tokens', 'cost_usd',
  'response_id', 'llm_call_count', 'is_copied_context', 'latency_ms', 'tool_call_count', 'metrics_json', 'extra_json',
];
const CALL_COLUMNS = ['turn_ordinal', 'call_index', 'tool_call_id', 'function_name', 'kind', 'arguments_json', 'result_json', 'result_bytes', 'is_error', 'status', 'exit_code', 'duration_ms', 'extra_json'];

/** Steps `offset` to `offset + limit` of a run (by position), each with its tool calls; both read through the (document_id, turn_ordinal) indexes. */
export function runSteps(dataset: OpenDataset, documentId: string, offset: number, limit: number): { steps: Row[]; total: number } {
  const run = dataset.db.prepare('SELECT step_count FROM runs WHERE document_id = ?').get(documentId) as { step_count: number } | undefined;
  if (!run) throw new NotFoundError(`no run with document id ${JSON.stringify(documentId)} in ${dataset.uri}`);
  const steps = (
    dataset.db.prepare(`SELECT ${STEP_COLUMNS.join(', ')} FROM steps WHERE document_id = ? AND turn_ordinal >= ? AND turn_ordinal < ? ORDER BY turn_ordinal`).all(documentId, offset, offset + limit) as Row[]
  ).map(withJson);
  const calls = dataset.db
    .prepare(`SELECT ${CALL_COLUMNS.join(', ')} FROM tool_calls WHERE document_id = ? AND turn_ordinal >= ? AND turn_ordinal < ? ORDER BY turn_ordinal, call_index`)
    .all(documentId, offset, offset + limit) as Row[];
  const byTurn = new Map<number, Row[]>();
  for (const call of calls) {
    const { turn_ordinal, ...rest } = withJson(call);
    const list = byTurn.get(Number(turn_ordinal)) ?? [];
    list.push(rest);
    byTurn.set(Number(turn_ordinal), list);
  }
  return { steps: steps.map((s) => ({ ...s, tool_calls: byTurn.get(Number(s.turn_ordinal)) ?? [] })), total: Number(run.step_count) };
}
