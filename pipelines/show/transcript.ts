/**
 * `show`: one trajectory as a transcript, read from the dataset's SQLite index by document id
 * (three indexed look-ups: the run, its steps, its tool calls) rather than by rebuilding the
 * Storyline document from the Parquet parts, which would read every row group before it. The
 * index's views put long values back from the content store, so every text here is whole; the
 * command line decides how much of it to print.
 */
import { InvalidInputError, NotFoundError } from '../../lib/errors.js';
import type { ProgressFactory } from '../../lib/progress.js';
import { openDatasetArg, type OpenDataset } from '../dataset/open.js';
import type { ResolveContext } from '../pins/resolve.js';

/** Which run to show: exactly one of the two. */
export type TranscriptKey = { documentId: string } | { runId: string };

export interface ShowRequest {
  /** A DATASET argument: a path, a pin, or undefined for the default dataset. */
  dataset: string | undefined;
  key: TranscriptKey;
  progress?: ProgressFactory;
}

export interface TranscriptToolCall {
  tool_call_id: string;
  function_name: string;
  kind: string | null;
  /** Parsed JSON (the arguments as the agent sent them). */
  arguments: unknown;
  /** Parsed JSON; null when the call has no recorded result. */
  result: unknown;
  is_error: boolean | null;
  status: string | null;
  exit_code: number | null;
  duration_ms: number | null;
}

export interface TranscriptStep {
  step_id: string;
  source: string;
  kind: string;
  timestamp: string | null;
  model_name: string | null;
  message: string;
  reasoning: string | null;
  observation: string | null;
  prompt_tokens: number | null;
  completion_tokens: number | null;
  cached_tokens: number | null;
  cost_usd: number | null;
  latency_ms: number | null;
  tool_calls: TranscriptToolCall[];
}

export interface TranscriptRun {
  document_id: string;
  run_id: string | null;
  session_id: string;
  source_path: string;
  source_format: string;
  agent_name: string | null;
  agent_version: string | null;
  agent_model_name: string | null;
  parent_session_id: string | null;
  parent_tool_call_id: string | null;
  started_at: string | null;
  finished_at: string | null;
  step_count: number;
  tool_call_count: number;
  prompt_tokens: number | null;
  completion_tokens: number | null;
  cached_tokens: number | null;
  cost_usd: number | null;
  notes: string | null;
}

export interface Transcript {
  dataset_uri: string;
  snapshot_id: string;
  run: TranscriptRun;
  /** Runs this one spawned (their `parent_session_id` is its session). */
  subagents: Array<{ document_id: string; run_id: string | null; parent_tool_call_id: string | null; agent_name: string | null }>;
  steps: TranscriptStep[];
}

const RUN_COLUMNS = [
  'document_id', 'run_id', 'session_id', 'source_path', 'source_format', 'agent_name', 'agent_version', 'agent_model_name', 'parent_session_id', 'parent_tool_call_id',
  'started_at', 'finished_at', 'step_count', 'tool_call_count', 'prompt_tokens', 'completion_tokens', 'cached_tokens', 'cost_usd', 'notes',
] as const;

/** Rows as plain objects with numbers (the index stores counts as integers well inside 2^53). */
type Cells = Record<string, unknown>;

function parseJson(text: unknown): unknown {
  if (typeof text !== 'string') return null;
  try {
    return JSON.parse(text);
  } catch {
    return text; // shown as it is stored rather than hidden
  }
}

const bool = (value: unknown): boolean | null => (value === null || value === undefined ? null : Boolean(value));
const num = (value: unknown): number | null => (value === null || value === undefined ? null : Number(value));
const str = (value: unknown): string | null => (value === null || value === undefined ? null : String(value));

/** The run a key names: by document id one look-up; a run id must name exactly one run. */
function runRowOf(dataset: OpenDataset, key: TranscriptKey): Cells {
  const flag = 'documentId' in key ? `--document-id ${key.documentId}` : `--run-id ${key.runId}`;
  let documentId: string | undefined;
  if ('documentId' in key) documentId = key.documentId;
  else {
    const ids = (dataset.db.prepare('SELECT document_id FROM runs WHERE run_id = ? ORDER BY rowid').all(key.runId) as Array<{ document_id: string }>).map((r) => r.document_id);
    if (ids.length > 1) {
      throw new InvalidInputError(`${flag}: ${ids.length} runs have this run id (documents ${ids.slice(0, 5).join(', ')}${ids.length > 5 ? ', ...' : ''})`, { hint: 'choose one with --document-id' });
    }
    documentId = ids[0];
  }
  const row = documentId === undefined ? undefined : (dataset.db.prepare(`SELECT ${RUN_COLUMNS.join(', ')} FROM runs WHERE document_id = ?`).get(documentId) as Cells | undefined);
  if (!row) throw new NotFoundError(`${flag}: no such run in ${dataset.uri} (snapshot ${dataset.snapshotId})`, { hint: 'list runs with `trajstore find DATASET --match ...` or `trajstore query`' });
  return row;
}

export function readTranscript(dataset: OpenDataset, key: TranscriptKey): Transcript {
  if (dataset.kind !== 'storyline') {
    throw new InvalidInputError(`${dataset.uri}: show reads Storyline datasets; this one is a compact record store`, { hint: 'use `trajstore query` with SQL over dataset.records' });
  }
  const runRow = runRowOf(dataset, key);
  const documentId = String(runRow.document_id);
  const db = dataset.db;
  const run = Object.fromEntries(RUN_COLUMNS.map((c) => [c, runRow[c] ?? null])) as unknown as TranscriptRun;
  for (const c of ['step_count', 'tool_call_count', 'prompt_tokens', 'completion_tokens', 'cached_tokens', 'cost_usd'] as const) (run as unknown as Cells)[c] = num(runRow[c]);

  const calls = new Map<string, TranscriptToolCall[]>();
  const callRows = db
    .prepare('SELECT turn_ordinal, tool_call_id, function_name, kind, arguments_json, result_json, is_error, status, exit_code, duration_ms FROM tool_calls WHERE document_id = ? ORDER BY turn_ordinal, call_index')
    .all(documentId) as Cells[];
  for (const row of callRows) {
    const ordinal = String(row.turn_ordinal);
    const list = calls.get(ordinal) ?? [];
    list.push({
      tool_call_id: String(row.tool_call_id),
      function_name: String(row.function_name),
      kind: str(row.kind),
      arguments: parseJson(row.arguments_json),
      result: parseJson(row.result_json),
      is_error: bool(row.is_error),
      status: str(row.status),
      exit_code: num(row.exit_code),
      duration_ms: num(row.duration_ms),
    });
    calls.set(ordinal, list);
  }
  const stepRows = db
    .prepare(
      `SELECT turn_ordinal, step_id, source, effective_kind, timestamp, model_name, message_text, reasoning_content, observation_text,
        prompt_tokens, completion_tokens, cached_tokens, cost_usd, latency_ms FROM steps WHERE document_id = ? ORDER BY turn_ordinal`,
    )
    .all(documentId) as Cells[];
  const steps = stepRows.map(
    (row): TranscriptStep => ({
      step_id: String(row.step_id),
      source: String(row.source),
      kind: String(row.effective_kind),
      timestamp: str(row.timestamp),
      model_name: str(row.model_name),
      message: String(row.message_text ?? ''),
      reasoning: str(row.reasoning_content),
      observation: str(row.observation_text),
      prompt_tokens: num(row.prompt_tokens),
      completion_tokens: num(row.completion_tokens),
      cached_tokens: num(row.cached_tokens),
      cost_usd: num(row.cost_usd),
      latency_ms: num(row.latency_ms),
      tool_calls: calls.get(String(row.turn_ordinal)) ?? [],
    }),
  );
  const subagents = (
    db.prepare('SELECT document_id, run_id, parent_tool_call_id, agent_name FROM runs WHERE parent_session_id = ? AND document_id != ? ORDER BY rowid').all(run.session_id, documentId) as Cells[]
  ).map((r) => ({ document_id: String(r.document_id), run_id: str(r.run_id), parent_tool_call_id: str(r.parent_tool_call_id), agent_name: str(r.agent_name) }));
  return { dataset_uri: dataset.uri, snapshot_id: dataset.snapshotId, run, subagents, steps };
}

/** Opens the dataset, reads the transcript, closes it. */
export async function showTranscript(rc: ResolveContext, request: ShowRequest): Promise<Transcript> {
  const dataset = await openDatasetArg(rc, request.dataset, request.progress ? { progress: request.progress } : {});
  try {
    return readTranscript(dataset, request.key);
  } finally {
    dataset.close();
  }
}
