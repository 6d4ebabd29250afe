/**
 * A Storyline document as rows of `runs`, `steps` and `tool_calls` (columns: dataset/relations.ts).
 * Timestamps are normalised to RFC 3339 UTC with milliseconds; the Storyline itself (kept whole in
 * `runs.storyline_json`) keeps what the source wrote.
 */
import type { Row } from '../dataset/parquet.js';
import type { Content, ObservationResult, Storyline, Turn } from '../storyline/schema.js';

export interface RunPlacement {
  documentId: string;
  sourcePath: string;
  sourceFormat: string;
  sourceDocument: number;
}

export interface StorylineRows {
  run: Row;
  steps: Row[];
  toolCalls: Row[];
}

/** RFC 3339 UTC with milliseconds; epoch numbers are seconds; text that is no date stays as written. */
export function normaliseTimestamp(value: unknown): string | null {
  if (value === undefined || value === null || value === '') return null;
  if (typeof value === 'number') {
    const date = new Date(value * 1000);
    return Number.isNaN(date.getTime()) ? null : date.toISOString();
  }
  const text = String(value);
  const date = new Date(text);
  return Number.isNaN(date.getTime()) ? text : date.toISOString();
}

/** Plain text of message content: the string, or the text of its text parts, one per line. */
export function contentText(content: Content | null | undefined): string {
  if (content === null || content === undefined) return '';
  if (typeof content === 'string') return content;
  return content
    .map((part) => (typeof part.text === 'string' ? part.text : typeof part.content === 'string' ? part.content : ''))
    .filter((text) => text !== '')
    .join('\n');
}

function resultText(value: unknown): string {
  if (value === undefined || value === null) return '';
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) return contentText(value as Content);
  return JSON.stringify(value);
}

const json = (value: unknown): string | null => (value === undefined || value === null ? null : JSON.stringify(value));

function sum(values: Array<number | null | undefined>): number | null {
  let total: number | null = null;
  for (const v of values) if (typeof v === 'number') total = (total ?? 0) + v;
  return total;
}

/** The document id the team fixed: Storyline `trajectory` if set, else `session`. */
export function documentIdOf(doc: Storyline): string {
  return doc.trajectory ?? doc.session;
}

export function storylineRows(doc: Storyline, place: RunPlacement): StorylineRows {
  const results = new Map<string, ObservationResult>();
  for (const turn of doc.turns) {
    for (const result of turn.observation?.results ?? []) if (typeof result.source_call_id === 'string') results.set(result.source_call_id, result);
  }
  const base = { document_id: place.documentId, session_id: doc.session };
  const steps: Row[] = [];
  const toolCalls: Row[] = [];
  doc.turns.forEach((turn: Turn, ordinal) => {
    const calls = turn.tool_calls ?? [];
    steps.push({
      ...base,
      step_id: String(turn.id),
      turn_ordinal: ordinal,
      source: turn.src,
      effective_kind: turn.kind ?? turn.src,
      timestamp: normaliseTimestamp(turn.ts),
      model_name: turn.model ?? null,
      reasoning_effort: turn.effort === undefined || turn.effort === null ? null : String(turn.effort),
      message_text: contentText(turn.msg),
      message_json: JSON.stringify(turn.msg),
      reasoning_content: turn.reason ?? null,
      observation_text: turn.observation ? turn.observation.results.map((r) => contentText(r.content)).filter((t) => t !== '').join('\n') : null,
      observation_json: json(turn.observation),
      prompt_tokens: turn.metrics?.prompt_tokens ?? null,
      completion_tokens: turn.metrics?.completion_tokens ?? null,
      cached_tokens: turn.metrics?.cached_tokens ?? null,
      cost_usd: turn.metrics?.cost_usd ?? null,
      llm_call_count: turn.nllm ?? null,
      is_copied_context: turn.copied ?? null,
      latency_ms: turn.latency_ms ?? null,
      tool_call_count: calls.length,
      metrics_json: json(turn.metrics),
      extra_json: json(turn.extra),
    });
    calls.forEach((call, index) => {
      const observed = results.get(call.tcid);
      const result = call.result !== undefined ? call.result : observed?.content;
      toolCalls.push({
        ...base,
        step_id: String(turn.id),
        turn_ordinal: ordinal,
        call_index: index,
        tool_call_id: call.tcid,
        function_name: call.fn,
        kind: call.kind ?? null,
        arguments_json: JSON.stringify(call.args ?? null),
        result_json: json(result),
        result_bytes: result === undefined || result === null ? null : Buffer.byteLength(resultText(result), 'utf8'),
        is_error: observed?.is_error ?? null,
        status: call.response?.status ?? null,
        exit_code: call.response?.exit_code ?? null,
        duration_ms: call.duration_ms ?? null,
        extra_json: json(call.extra),
      });
    });
  });
  const first = doc.turns.find((t) => t.ts !== undefined && t.ts !== null);
  const last = [...doc.turns].reverse().find((t) => t.ts !== undefined && t.ts !== null);
  const agentExtra = doc.agent.extra !== undefined || doc.agent.tools !== undefined ? { ...(doc.agent.tools ? { tools: doc.agent.tools } : {}), ...(doc.agent.extra ? { extra: doc.agent.extra } : {}) } : undefined;
  const run: Row = {
    ...base,
    run_id: doc.run ?? null,
    trajectory_id: doc.trajectory ?? null,
    attempt_id: doc.attempt_id ?? null,
    source_path: place.sourcePath,
    source_format: place.sourceFormat,
    source_document: place.sourceDocument,
    agent_id: doc.agent.id,
    agent_name: doc.agent.name ?? null,
    agent_version: doc.agent.ver ?? null,
    agent_model_name: doc.agent.model ?? null,
    parent_session_id: doc.parent?.psid ?? null,
    parent_tool_call_id: doc.parent?.scid ?? null,
    started_at: normaliseTimestamp(doc.started_at ?? first?.ts),
    finished_at: normaliseTimestamp(doc.finished_at ?? last?.ts),
    step_count: doc.turns.length,
    tool_call_count: toolCalls.length,
    prompt_tokens: sum(doc.turns.map((t) => t.metrics?.prompt_tokens)),
    completion_tokens: sum(doc.turns.map((t) => t.metrics?.completion_tokens)),
    cached_tokens: sum(doc.turns.map((t) => t.metrics?.cached_tokens)),
    cost_usd: sum(doc.turns.map((t) => t.metrics?.cost_usd)),
    notes: doc.notes ?? null,
    final_metrics_json: json(doc.final_metrics),
    task_json: json(doc.task),
    prompt_json: json(doc.prompt),
    agent_extra_json: json(agentExtra),
    extra_json: json(doc.extra),
    meta_json: json(doc.meta),
    unknown_fields_json: json(doc.unknown_fields),
    storyline_json: JSON.stringify(doc),
  };
  return { run, steps, toolCalls };
}
