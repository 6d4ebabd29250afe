/**
 * A Storyline document as rows of `runs`, `steps` and `tool_calls` (columns: dataset/relations.ts).
 * Timestamps are normalised to RFC 3339 UTC with milliseconds; the Storyline itself keeps what the
 * source wrote.
 *
 * Every part of the document is stored once in a lossless form, so that export can rebuild it
 * without a second whole copy: `runs.document_json` is the document without its `turns`, and each
 * turn is `steps.turn_json` (its small fields and tool calls) plus `message_json`, `reasoning_content`
 * and `observation_json` (the large ones), with each tool call's `extra` in `tool_calls.extra_json`.
 * A tool call's `result` that is the very content of its observation result (as decoders link them)
 * is not written again: its index is listed under `TURN_RESULTS_FROM_OBSERVATION` in `turn_json` and
 * export puts the observation content back. Nor is an observation result's content that is already
 * its call's `tool_calls.result_json` (tool output, most of a document): `observation_json` holds
 * `OBSERVATION_CONTENT_FROM_CALL` in its place and export puts the call's result back.
 *
 * Text and JSON cells are written through a `CellStore`: as they are, or (contents.ts) with their
 * large strings kept once in the content store and referred to.
 */
import { setOwn } from '../../lib/own-property.js';
import { InvalidInputError } from '../../lib/errors.js';
import type { Row } from './parquet.js';
import type { Content, ObservationResult, Storyline, ToolCall, Turn } from '../storyline/schema.js';
import type { PriceList } from '../pricing/cost.js';
import type { ContentRefs } from './content-refs.js';
import { hasCjk } from './fts-text.js';

/** How text and JSON cells are written: plainly, or with large strings in the content store (ContentRefs). */
export type CellStore = Pick<ContentRefs, 'text' | 'json'>;

/** Cells as they are: for rows that are looked at, not stored (listing sources). */
export const PLAIN_CELLS: CellStore = {
  text: (value) => value ?? null,
  json: (value) => (value === undefined || value === null ? null : JSON.stringify(value)),
};

/**
 * Key in `steps.turn_json` listing the tool calls whose `result` is their observation result's
 * content. Storyline turns are closed objects, so no real field can have this name.
 */
export const TURN_RESULTS_FROM_OBSERVATION = '@results_from_observation';

/**
 * Key standing in `steps.observation_json` for an observation result's `content` that is the
 * `result_json` of the first call with its `source_call_id`. Observation results are closed objects
 * too, so no real field can have this name.
 */
export const OBSERVATION_CONTENT_FROM_CALL = '@content_from_call';

/**
 * Set on a `steps` row whose text holds Chinese, Japanese or Korean: the full-text index must
 * receive it spaced out (fts-text.ts), and only here, before text goes to the content store, is it
 * whole to look at. Not a column: the writer reads it off the row.
 */
export const NEEDS_SPACING = Symbol('needs spacing for the full-text index');

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

function sum(values: Array<number | null | undefined>): number | null {
  let total: number | null = null;
  for (const v of values) if (typeof v === 'number') total = (total ?? 0) + v;
  return total;
}

/** A run's total of a token count: an int64 column, so it must stay an exact integer. */
function countSum(documentId: string, column: string, values: Array<number | null | undefined>): number | null {
  const total = sum(values);
  if (total !== null && !Number.isSafeInteger(total)) {
    throw new InvalidInputError(`document ${JSON.stringify(documentId)}: ${column} summed over its turns is ${total}, beyond ±${Number.MAX_SAFE_INTEGER}, which cannot be stored exactly`);
  }
  return total;
}

/** The document id the team fixed: Storyline `trajectory` if set, else `session`. */
export function documentIdOf(doc: Storyline): string {
  return doc.trajectory ?? doc.session;
}

/**
 * The turn without the fields that have their own columns: `msg` (message_json), `observation`
 * (observation_json) and a string `reason` (reasoning_content; a null one stays here, so absent and
 * null stay apart). `observed` holds each call's observation result, to leave out results it repeats.
 */
function turnJson(turn: Turn, observed: Map<string, ObservationResult>, cells: CellStore): string {
  const rest: Record<string, unknown> = {};
  for (const key in turn) {
    if (key === 'msg' || key === 'observation' || (key === 'reason' && typeof turn.reason === 'string')) continue;
    setOwn(rest, key, turn[key as keyof Turn]);
  }
  if (turn.tool_calls) {
    const fromObservation: number[] = [];
    rest.tool_calls = turn.tool_calls.map((call, index) => {
      // `extra` is the call's `tool_calls.extra_json`, losslessly (an object or absent).
      const { extra: _stored, ...slim } = call;
      const result = observed.get(call.tcid);
      if (call.result === undefined || result === undefined || result.content !== call.result) return slim;
      fromObservation.push(index);
      const { result: _repeated, ...withoutResult } = slim;
      return withoutResult;
    });
    if (fromObservation.length > 0) rest[TURN_RESULTS_FROM_OBSERVATION] = fromObservation;
  }
  return cells.json(rest) as string;
}

/** The Storyline document without its turns (they are the `steps` rows). */
function documentJson(doc: Storyline, cells: CellStore): string {
  const rest: Record<string, unknown> = {};
  for (const key in doc) if (key !== 'turns') setOwn(rest, key, doc[key as keyof Storyline]);
  return cells.json(rest) as string;
}

/** JSON text of observation result contents, each serialised once (a content is also its call's result). */
class ContentJson {
  private readonly cache = new Map<unknown, string>();
  constructor(private readonly cells: CellStore) {}
  of(content: unknown): string {
    let text = this.cache.get(content);
    if (text === undefined) this.cache.set(content, (text = this.cells.json(content) ?? 'null'));
    return text;
  }
  /**
   * `JSON.stringify(observation)`, built from the cached contents, except that a content equal to
   * the `result_json` of the first call it answers (`callResults`) is `OBSERVATION_CONTENT_FROM_CALL`.
   */
  observation(observation: Turn['observation'], callResults: ReadonlyMap<string, string | null>): string | null {
    if (observation === undefined || observation === null) return null;
    const results = observation.results.map((result) => {
      const members: string[] = [];
      for (const key in result) {
        const value = result[key as keyof ObservationResult];
        if (value === undefined) continue;
        if (key !== 'content') {
          members.push(`${JSON.stringify(key)}:${this.cells.json(value)}`);
          continue;
        }
        const text = this.of(value);
        const fromCall = typeof result.source_call_id === 'string' && callResults.get(result.source_call_id) === text;
        members.push(fromCall ? `"${OBSERVATION_CONTENT_FROM_CALL}":true` : `"content":${text}`);
      }
      return `{${members.join(',')}}`;
    });
    return `{"results":[${results.join(',')}]}`;
  }
}

/** A call's `result` as stored: its own, else the content of the observation result answering it. */
function callResult(call: ToolCall, observed: ObservationResult | undefined): unknown {
  return call.result !== undefined ? call.result : observed?.content;
}

/** A count from a turn's `metrics.extra`, where formats keep the detail of their usage. */
function extraCount(turn: Turn, key: string): number | null {
  const value = turn.metrics?.extra?.[key];
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? value : null;
}

/** The identity of the API response a turn's usage comes from (`metrics.extra.response_id`, set by decoders that know it). */
function responseIdOf(turn: Turn): string | null {
  const value = turn.metrics?.extra?.response_id;
  return typeof value === 'string' && value !== '' ? value : null;
}

/**
 * `prices`: what prices the turns whose source reports no cost; without it (listing sources) costs
 * are the reported ones only. `cells`: how text and JSON cells are written.
 */
export function storylineRows(doc: Storyline, place: RunPlacement, prices?: PriceList, cells: CellStore = PLAIN_CELLS): StorylineRows {
  const json = (value: unknown): string | null => cells.json(value);
  const contents = new ContentJson(cells);
  const results = new Map<string, ObservationResult>();
  for (const turn of doc.turns) {
    for (const result of turn.observation?.results ?? []) if (typeof result.source_call_id === 'string') results.set(result.source_call_id, result);
  }
  // The result_json of the first call of each id: what an observation result's content may stand for.
  const callResults = new Map<string, string | null>();
  for (const turn of doc.turns) {
    for (const call of turn.tool_calls ?? []) {
      if (callResults.has(call.tcid)) continue;
      const result = callResult(call, results.get(call.tcid));
      callResults.set(call.tcid, result === undefined || result === null ? null : contents.of(result));
    }
  }
  const base = { document_id: place.documentId, session_id: doc.session };
  const steps: Row[] = [];
  const toolCalls: Row[] = [];
  const costs: Array<number | null> = [];
  doc.turns.forEach((turn: Turn, ordinal) => {
    const calls = turn.tool_calls ?? [];
    const cacheWrite = extraCount(turn, 'cache_creation_input_tokens');
    const usage = { prompt: turn.metrics?.prompt_tokens ?? null, completion: turn.metrics?.completion_tokens ?? null, cached: turn.metrics?.cached_tokens ?? null, cacheWrite };
    const cost = turn.metrics?.cost_usd ?? prices?.cost(turn.model ?? doc.agent.model, usage) ?? null;
    costs.push(cost);
    const messageText = contentText(turn.msg);
    const observationText = turn.observation ? turn.observation.results.map((r) => contentText(r.content)).filter((t) => t !== '').join('\n') : null;
    steps.push({
      ...base,
      ...(hasCjk(messageText) || (turn.reason !== undefined && turn.reason !== null && hasCjk(turn.reason)) || (observationText !== null && hasCjk(observationText)) ? { [NEEDS_SPACING]: true } : {}),
      step_id: String(turn.id),
      turn_ordinal: ordinal,
      source: turn.src,
      effective_kind: turn.kind ?? turn.src,
      timestamp: normaliseTimestamp(turn.ts),
      model_name: turn.model ?? null,
      reasoning_effort: turn.effort === undefined || turn.effort === null ? null : String(turn.effort),
      message_text: cells.text(messageText),
      message_json: json(turn.msg),
      turn_json: turnJson(turn, results, cells),
      reasoning_content: cells.text(turn.reason),
      observation_text: cells.text(observationText),
      observation_json: contents.observation(turn.observation, callResults),
      prompt_tokens: turn.metrics?.prompt_tokens ?? null,
      completion_tokens: turn.metrics?.completion_tokens ?? null,
      cached_tokens: turn.metrics?.cached_tokens ?? null,
      cache_write_tokens: cacheWrite,
      cost_usd: cost,
      response_id: responseIdOf(turn),
      llm_call_count: turn.nllm ?? null,
      is_copied_context: turn.copied ?? null,
      latency_ms: turn.latency_ms ?? null,
      tool_call_count: calls.length,
      metrics_json: json(turn.metrics),
      extra_json: json(turn.extra),
    });
    calls.forEach((call, index) => {
      const observed = results.get(call.tcid);
      const result = callResult(call, observed);
      toolCalls.push({
        ...base,
        step_id: String(turn.id),
        turn_ordinal: ordinal,
        call_index: index,
        tool_call_id: call.tcid,
        function_name: call.fn,
        kind: call.kind ?? null,
        arguments_json: json(call.args ?? null) ?? 'null',
        result_json: result === undefined || result === null ? null : contents.of(result),
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
    prompt_tokens: countSum(place.documentId, 'prompt_tokens', doc.turns.map((t) => t.metrics?.prompt_tokens)),
    completion_tokens: countSum(place.documentId, 'completion_tokens', doc.turns.map((t) => t.metrics?.completion_tokens)),
    cached_tokens: countSum(place.documentId, 'cached_tokens', doc.turns.map((t) => t.metrics?.cached_tokens)),
    cache_write_tokens: countSum(place.documentId, 'cache_write_tokens', doc.turns.map((t) => extraCount(t, 'cache_creation_input_tokens'))),
    cost_usd: sum(costs),
    notes: doc.notes ?? null,
    final_metrics_json: json(doc.final_metrics),
    task_json: json(doc.task),
    prompt_json: json(doc.prompt),
    agent_extra_json: json(agentExtra),
    extra_json: json(doc.extra),
    meta_json: json(doc.meta),
    unknown_fields_json: json(doc.unknown_fields),
    document_json: documentJson(doc, cells),
  };
  return { run, steps, toolCalls };
}

/** The stored parts of one turn: `steps` columns as read back from a part. */
export interface StoredTurn {
  message_json: unknown;
  reasoning_content: unknown;
  observation_json: unknown;
  turn_json: unknown;
}

/** The stored parts of one tool call: `tool_calls` columns as read back from a part. */
export interface StoredCall {
  tool_call_id: unknown;
  result_json: unknown;
  extra_json: unknown;
}

/** Parses a stored JSON cell: JSON.parse, or one that also puts back what the content store holds (export). */
export type CellParser = (text: string) => unknown;

/** An observation result as stored, with the content it stands for back in its place. */
function withContent(result: Record<string, unknown>, callResults: ReadonlyMap<unknown, unknown>, parse: CellParser): ObservationResult {
  if (!(OBSERVATION_CONTENT_FROM_CALL in result)) return result as ObservationResult;
  const stored = callResults.get(result.source_call_id);
  if (typeof stored !== 'string') throw new Error(`observation result of call ${JSON.stringify(result.source_call_id)}: its call has no result_json`);
  const restored: Record<string, unknown> = {};
  for (const key in result) {
    if (key === OBSERVATION_CONTENT_FROM_CALL) restored.content = parse(stored);
    else setOwn(restored, key, result[key]);
  }
  return restored as ObservationResult;
}

/**
 * The Storyline document back from `runs.document_json`, its `steps` rows in turn order and its
 * `tool_calls` rows in call order (the inverse of `storylineRows`). JSON cells go through `parse`;
 * a text cell (`reasoning_content`) must be given as the source had it.
 */
export function storylineFromRows(documentJson: string, steps: readonly StoredTurn[], calls: readonly StoredCall[], parse: CellParser = JSON.parse): Storyline {
  const doc = parse(documentJson) as Storyline;
  const callResults = new Map<unknown, unknown>();
  for (const call of calls) if (!callResults.has(call.tool_call_id)) callResults.set(call.tool_call_id, call.result_json);
  const observed = new Map<string, ObservationResult>();
  const linked: ToolCall[] = [];
  let callIndex = 0;
  doc.turns = steps.map((step): Turn => {
    const rest = parse(String(step.turn_json)) as Record<string, unknown>;
    const fromObservation = rest[TURN_RESULTS_FROM_OBSERVATION] as number[] | undefined;
    delete rest[TURN_RESULTS_FROM_OBSERVATION];
    const turn = { id: rest.id, src: rest.src, msg: parse(String(step.message_json)), ...rest } as Turn;
    if (typeof step.reasoning_content === 'string') turn.reason = step.reasoning_content;
    if (step.observation_json !== null && step.observation_json !== undefined) {
      const observation = parse(String(step.observation_json)) as { results: Array<Record<string, unknown>> };
      turn.observation = { ...observation, results: observation.results.map((result) => withContent(result, callResults, parse)) };
    }
    for (const result of turn.observation?.results ?? []) if (typeof result.source_call_id === 'string') observed.set(result.source_call_id, result);
    for (const call of turn.tool_calls ?? []) {
      const extra = calls[callIndex++]?.extra_json;
      if (extra !== null && extra !== undefined) call.extra = parse(String(extra)) as ToolCall['extra'];
    }
    for (const index of fromObservation ?? []) {
      const call = turn.tool_calls?.[index];
      if (call) linked.push(call);
    }
    return turn;
  });
  if (callIndex !== calls.length) throw new Error(`the document has ${callIndex} tool calls and ${calls.length} tool_calls rows`);
  // Results are linked after every turn is back: as on import, a call's observation may sit on any turn.
  // Before `extra`, which comes back last: where a call stored with its own result has it, so a
  // document exported, imported again and exported again keeps its bytes.
  for (const call of linked) {
    const { extra } = call;
    delete call.extra;
    call.result = observed.get(call.tcid)?.content;
    if (extra !== undefined) call.extra = extra;
  }
  return doc;
}
