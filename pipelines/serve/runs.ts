/**
 * What the API reads of runs, with fixed SQL over the index (user values always bound): a page of
 * runs, one run with its parent and subagent runs, and a page of one run's steps with their tool
 * calls. Each reads its rows through an index (rowid, document, session).
 */
import { NotFoundError } from '../../lib/errors.js';
import type { OpenDataset } from '../dataset/open.js';
import { runCatalog, type PageRequest } from './run-catalog.js';

type Row = Record<string, unknown>;

/** The run columns of a list row: short ones only, so no value is fetched from the content store. */
const LIST_COLUMNS = [
  'document_id', 'run_id', 'session_id', 'agent_id', 'agent_name', 'agent_model_name', 'source_path', 'source_format',
  'parent_session_id', 'parent_tool_call_id', 'started_at', 'finished_at', 'step_count', 'tool_call_count',
  'prompt_tokens', 'completion_tokens', 'cached_tokens', 'cache_write_tokens', 'cost_usd',
];

/**
 * Rows of the runs with these rowids, read one by one in the order given (so a reader may stop
 * early): CROSS JOIN makes the list the outer loop, and json_each walks it in order. Each row comes
 * with its rowid.
 */
function* runsByRowid(dataset: OpenDataset, rowids: readonly number[], columns: readonly string[]): Generator<{ rowid: number; run: Row }> {
  if (rowids.length === 0) return;
  const rows = dataset.db
    .prepare(`SELECT p.key AS _at, p.value AS _rowid, ${columns.map((c) => `r.${c}`).join(', ')} FROM json_each(?) AS p CROSS JOIN runs AS r ON r.rowid = p.value`)
    .iterate(JSON.stringify(rowids)) as IterableIterator<Row>;
  let at = -1;
  for (const { _at, _rowid, ...run } of rows) {
    if (Number(_at) <= at) throw new Error('the runs of a page came out of order');
    at = Number(_at);
    yield { rowid: Number(_rowid), run };
  }
}

/**
 * A page of runs in the order asked for, chosen in the snapshot's run catalog (run-catalog.ts). Ids
 * and paths can be any length: the page ends early once its JSON passes maxBytes (its first run
 * always comes), with the cursor that goes on after its last run.
 */
export function listRuns(dataset: OpenDataset, request: PageRequest, maxBytes: number): { runs: Row[]; next_cursor: string | null } {
  const page = runCatalog(dataset).page(request);
  const runs: Row[] = [];
  let bytes = 0;
  let last = -1;
  for (const { rowid, run } of runsByRowid(dataset, page.rowids, LIST_COLUMNS)) {
    // Most runs are counted at a bound of their size, without writing them out.
    const atMost = jsonBytesAtMost(run);
    bytes += atMost <= 16 * 1024 ? atMost : Buffer.byteLength(JSON.stringify(run));
    if (runs.length > 0 && bytes > maxBytes) return { runs, next_cursor: page.cursorAfter(last) };
    runs.push(run);
    last = rowid;
  }
  return { runs, next_cursor: page.next_cursor };
}

/** At least the bytes of a row's JSON: each UTF-16 unit of text takes at most 6 bytes (a `\\u` escape), a number at most 24. */
function jsonBytesAtMost(row: Row): number {
  let bytes = 2;
  for (const key in row) {
    const value = row[key];
    bytes += key.length + 4 + (typeof value === 'string' ? 6 * value.length + 2 : 24);
  }
  return bytes;
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
 * One run: every indexed column, its parent run (by the parent session, through its index) and
 * its subagent runs (from the snapshot's run catalog).
 */
export function runDetail(dataset: OpenDataset, documentId: string): Row {
  const run = dataset.db.prepare('SELECT * FROM runs WHERE document_id = ?').get(documentId) as Row | undefined;
  if (!run) throw new NotFoundError(`no run with document id ${JSON.stringify(documentId)} in ${dataset.uri}`);
  const parent =
    run.parent_session_id === null
      ? null
      : ((dataset.db.prepare('SELECT document_id, session_id, agent_name FROM runs WHERE session_id = ? ORDER BY rowid LIMIT 1').get(run.parent_session_id) as Row | undefined) ?? null);
  const childColumns = ['document_id', 'session_id', 'agent_name', 'agent_model_name', 'parent_tool_call_id', 'step_count', 'cost_usd'];
  const children = [...runsByRowid(dataset, runCatalog(dataset).childrenOf(String(run.session_id)), childColumns)].map((child) => child.run);
  return { ...withJson(run), parent, children };
}

const STEP_COLUMNS = [
  'step_id', 'turn_ordinal', 'source', 'effective_kind', 'timestamp', 'model_name', 'reasoning_effort', 'message_text', 'message_json',
  'reasoning_content', 'observation_text', 'prompt_tokens', 'completion_tokens', 'cached_tokens', 'cache_write_tokens', 'cost_usd',
  'response_id', 'llm_call_count', 'is_copied_context', 'latency_ms', 'tool_call_count', 'metrics_json', 'extra_json',
];
const CALL_COLUMNS = ['turn_ordinal', 'call_index', 'tool_call_id', 'function_name', 'kind', 'arguments_json', 'result_json', 'result_bytes', 'is_error', 'status', 'exit_code', 'duration_ms', 'extra_json'];

/**
 * Steps `offset` to `offset + limit` of a run (by position), each with its tool calls, both read
 * through the (document_id, turn_ordinal) indexes, one step at a time: the page ends early once its
 * steps' JSON passes `maxBytes` (a step never comes in part, so a page holds at least one), because
 * a tool's output can be megabytes and a hundred of them would be held in memory at once.
 * `next_offset` is where the next page starts, null after the last step.
 */
export function runSteps(dataset: OpenDataset, documentId: string, offset: number, limit: number, maxBytes: number): { steps: Row[]; total: number; next_offset: number | null } {
  const run = dataset.db.prepare('SELECT step_count FROM runs WHERE document_id = ?').get(documentId) as { step_count: number } | undefined;
  if (!run) throw new NotFoundError(`no run with document id ${JSON.stringify(documentId)} in ${dataset.uri}`);
  const callsOf = dataset.db.prepare(`SELECT ${CALL_COLUMNS.join(', ')} FROM tool_calls WHERE document_id = ? AND turn_ordinal = ? ORDER BY call_index`);
  const steps: Row[] = [];
  let bytes = 0;
  for (const row of dataset.db.prepare(`SELECT ${STEP_COLUMNS.join(', ')} FROM steps WHERE document_id = ? AND turn_ordinal >= ? AND turn_ordinal < ? ORDER BY turn_ordinal`).iterate(documentId, offset, offset + limit)) {
    const step = withJson(row as Row);
    step.tool_calls = (callsOf.all(documentId, step.turn_ordinal) as Row[]).map((call) => {
      const { turn_ordinal: _, ...rest } = withJson(call);
      return rest;
    });
    bytes += Buffer.byteLength(JSON.stringify(step));
    if (steps.length > 0 && bytes > maxBytes) break;
    steps.push(step);
  }
  const next = offset + steps.length;
  return { steps, total: Number(run.step_count), next_offset: next < Number(run.step_count) ? next : null };
}
