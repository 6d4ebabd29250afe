/**
 * A trace's canonical events as a Storyline document (and as rows of the `events` relation): what
 * projection writes into the dataset and what the live trace endpoints answer before it has.
 *
 * Events are taken in `seq` order (then in the order they arrived). What becomes a turn:
 * - `llm.request`: a user turn with the request's newest user text (`payload.user_content`, else
 *   the last message of `payload.http.request_body` when it is the user's: in an agent loop the
 *   requests after a tool call end with tool results, not a new user message). Its tool results
 *   (`payload.tool_results`, else the request's `tool` messages or `tool_result` blocks) become the
 *   observation of the agent turn that made the calls. The system prompt goes to `prompt.system`.
 * - `llm.response`, `llm.response.stream`: an agent turn with the assistant's text, reasoning and
 *   tool calls (`payload.assistant_content`, `reasoning_content`, `tool_calls`, else the OpenAI or
 *   Anthropic response in `payload.http.response_body`), usage as metrics (OpenAI, Anthropic or
 *   OpenTelemetry names), model, latency and time to first token (`payload.timing`), and its call's
 *   status, error and models (requested, sent) in `extra`.
 * - `tool.execution` (OpenTelemetry `execute_tool` spans): the result and duration of the call
 *   with its `call_id`, and an observation; a call no turn made gets an agent turn of its own (no LLM).
 * - `note`: a system turn of kind `note`.
 * - `session.started`, `session.ended`: the document's start and end, and the agent's name and version.
 * Other kinds make no turn; every event is in the `events` relation whatever its kind.
 */
import type { Row } from '../../dataset/parquet.js';
import { normaliseTimestamp } from '../../dataset/rows.js';
import { withinDepth } from '../../formats/lines.js';
import { STORYLINE_SCHEMA_VERSION, type Content, type Metrics, type Storyline, type ToolCall, type Turn } from '../../storyline/schema.js';
import { isStorableTime, type EventRecord } from './events.js';
import type { StoredEvent, Trace } from './event-log.js';
import { isJsonObject, type JsonObject } from '../../../lib/json-object.js';

/** `source_format` of the runs projection writes. */
export const GATEWAY_FORMAT = 'gateway-events';

const text = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined);
const count = (value: unknown): number | undefined => (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? value : undefined);
const nonNegative = (value: unknown): number | undefined => (typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined);

/** The trace's source path: `[<partition>/]<agent_id>/<session_id>` (the run's `source_path`, and `storage` in the gateway's answer). */
export const tracePath = (trace: Pick<Trace, 'partition' | 'agentId' | 'sessionId'>): string => [trace.partition, trace.agentId, trace.sessionId].filter((p) => p !== '').join('/');

/** The events in trace order: by `seq`, then as they arrived. */
export function inTraceOrder(events: readonly StoredEvent[]): StoredEvent[] {
  return events.map((e, i) => ({ e, i })).sort((a, b) => a.e.record.seq - b.e.record.seq || a.i - b.i).map(({ e }) => e);
}

/**
 * A record's own time: `timestamp`, else `timestamp_unix_ms`. A log written before the gateway
 * bounded times may hold one past what a date can hold, or outside the years 0000 to 9999 (which
 * would sort wrong among the stored times): such a time is no time, rather than an error that
 * would stop its trace's projection for good, or a run sorted first.
 */
function recordTime(r: StoredEvent['record']): string | undefined {
  const given = normaliseTimestamp(r.timestamp);
  // toISOString writes a year outside 0000-9999 with a sign.
  if (given !== null && !/^[+-]/.test(given)) return given;
  const ms = r.timestamp_unix_ms;
  return ms !== undefined && isStorableTime(ms) ? new Date(ms).toISOString() : undefined;
}

/** An event's time: its record's, else when it was received. */
function timeOf(event: StoredEvent): string {
  return recordTime(event.record) ?? event.receivedAt;
}

/** Text of message content: a string, or the text of its text parts / blocks. */
function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((part) => (isJsonObject(part) && (part.type === 'text' || part.type === 'input_text' || part.type === 'output_text') ? (text(part.text) ?? text(part.content) ?? '') : ''))
    .filter((t) => t !== '')
    .join('\n');
}

/** Usage in any of the OpenAI, Anthropic and OpenTelemetry spellings, as Storyline metrics (prompt tokens include cached ones). */
export function usageMetrics(usage: unknown): Metrics | undefined {
  if (!isJsonObject(usage)) return undefined;
  const cacheRead = count(usage.cache_read_input_tokens) ?? count(usage['cache_read.input_tokens']) ?? count(isJsonObject(usage.prompt_tokens_details) ? usage.prompt_tokens_details.cached_tokens : undefined);
  const cacheWrite = count(usage.cache_creation_input_tokens) ?? count(usage['cache_creation.input_tokens']);
  let prompt = count(usage.prompt_tokens);
  if (prompt === undefined && count(usage.input_tokens) !== undefined) {
    // Anthropic's input_tokens leave out the cache; OpenTelemetry's include it.
    const anthropic = usage.cache_read_input_tokens !== undefined || usage.cache_creation_input_tokens !== undefined;
    prompt = (count(usage.input_tokens) ?? 0) + (anthropic ? (cacheRead ?? 0) + (cacheWrite ?? 0) : 0);
  }
  const completion = count(usage.completion_tokens) ?? count(usage.output_tokens);
  if (prompt === undefined && completion === undefined) return undefined;
  return {
    ...(prompt !== undefined ? { prompt_tokens: prompt } : {}),
    ...(completion !== undefined ? { completion_tokens: completion } : {}),
    ...(cacheRead !== undefined ? { cached_tokens: cacheRead } : {}),
    ...(cacheWrite !== undefined ? { extra: { cache_creation_input_tokens: cacheWrite } } : {}),
  };
}

export interface RequestFacts {
  user?: Content;
  system?: string;
  toolResults: Array<{ callId: string; content: unknown; isError?: boolean }>;
}

/** What a chat-completions or messages request body says of the newest user turn, the system prompt and tool results. */
export function requestFacts(payload: JsonObject): RequestFacts {
  const body = isJsonObject(payload.http) && isJsonObject(payload.http.request_body) ? payload.http.request_body : undefined;
  const messages = Array.isArray(body?.messages) ? (body.messages as unknown[]).filter(isJsonObject) : [];
  const facts: RequestFacts = { toolResults: [] };
  const system = text(payload.system) ?? (typeof body?.system === 'string' ? body.system : Array.isArray(body?.system) ? contentText(body.system) : undefined) ?? messages.filter((m) => m.role === 'system' || m.role === 'developer').map((m) => contentText(m.content)).join('\n');
  if (system) facts.system = system;
  const user = payload.user_content;
  if (typeof user === 'string' || Array.isArray(user)) facts.user = user as Content;
  else {
    const last = messages.at(-1);
    if (last?.role === 'user') {
      const t = contentText(last.content);
      if (t !== '') facts.user = t;
    }
  }
  if (Array.isArray(payload.tool_results)) {
    for (const r of payload.tool_results.filter(isJsonObject)) {
      const callId = text(r.call_id);
      if (callId) facts.toolResults.push({ callId, content: r.content, ...(typeof r.is_error === 'boolean' ? { isError: r.is_error } : {}) });
    }
    return facts;
  }
  // The results after the last assistant message: the ones this request brings.
  const lastAssistant = messages.map((m) => m.role).lastIndexOf('assistant');
  for (const m of messages.slice(lastAssistant + 1)) {
    if (m.role === 'tool' && typeof m.tool_call_id === 'string') facts.toolResults.push({ callId: m.tool_call_id, content: contentText(m.content) || m.content });
    if (m.role === 'user' && Array.isArray(m.content)) {
      for (const block of m.content.filter(isJsonObject)) {
        if (block.type === 'tool_result' && typeof block.tool_use_id === 'string') {
          facts.toolResults.push({ callId: block.tool_use_id, content: contentText(block.content) || block.content, ...(block.is_error === true ? { isError: true } : {}) });
        }
      }
    }
  }
  return facts;
}

export interface ResponseFacts {
  text: string;
  reasoning?: string;
  calls: Array<{ id: string; name: string; args: unknown }>;
  usage?: unknown;
  model?: string;
  finish?: string;
}

/** JSON text parsed (OpenAI sends tool arguments as a string; OpenTelemetry messages are JSON text); anything else, and text that is not JSON, as given. */
export function jsonOrAsGiven(value: unknown): unknown {
  if (typeof value !== 'string') return value;
  try {
    const parsed = JSON.parse(value) as unknown;
    // Nested deeper than a stored document may be (it could not be written back): kept as the text it came as.
    return withinDepth(parsed) ? parsed : value;
  } catch {
    return value;
  }
}

/** Tool arguments: parsed when they are JSON text, `{}` when absent. */
const argumentsOf = (value: unknown): unknown => jsonOrAsGiven(value ?? {});

/** What a response says: the assistant's text, reasoning, tool calls, usage and model, from the payload's fields or its body. */
export function responseFacts(payload: JsonObject): ResponseFacts {
  const body = isJsonObject(payload.http) && isJsonObject(payload.http.response_body) ? payload.http.response_body : isJsonObject(payload.response_body) ? payload.response_body : undefined;
  const facts: ResponseFacts = { text: '', calls: [] };
  const model = text(payload.model) ?? text(body?.model);
  if (model !== undefined) facts.model = model;
  const usage = payload.usage ?? body?.usage;
  if (usage !== undefined) facts.usage = usage;
  const finish = text(payload.finish_reason);
  if (finish !== undefined) facts.finish = finish;
  if (payload.assistant_content !== undefined || payload.tool_calls !== undefined || payload.reasoning_content !== undefined) {
    facts.text = contentText(payload.assistant_content);
    const reasoning = text(payload.reasoning_content);
    if (reasoning) facts.reasoning = reasoning;
    for (const call of Array.isArray(payload.tool_calls) ? payload.tool_calls.filter(isJsonObject) : []) {
      facts.calls.push({ id: text(call.id) ?? text(call.call_id) ?? '', name: text(call.name) ?? '', args: argumentsOf(call.arguments) });
    }
    return facts;
  }
  if (!body) return facts;
  const choice = Array.isArray(body.choices) && isJsonObject(body.choices[0]) ? body.choices[0] : undefined;
  const message = isJsonObject(choice?.message) ? choice.message : undefined;
  if (message) {
    // OpenAI chat completion.
    facts.text = contentText(message.content);
    const reasoning = text(message.reasoning_content) ?? text(message.reasoning);
    if (reasoning) facts.reasoning = reasoning;
    for (const call of Array.isArray(message.tool_calls) ? message.tool_calls.filter(isJsonObject) : []) {
      const fn = isJsonObject(call.function) ? call.function : {};
      facts.calls.push({ id: text(call.id) ?? '', name: text(fn.name) ?? '', args: argumentsOf(fn.arguments) });
    }
    const reason = text(choice?.finish_reason);
    if (reason && facts.finish === undefined) facts.finish = reason;
  } else if (Array.isArray(body.content)) {
    // Anthropic message.
    const blocks = body.content.filter(isJsonObject);
    facts.text = contentText(blocks);
    const thinking = blocks.filter((b) => b.type === 'thinking').map((b) => text(b.thinking) ?? '').join('\n');
    if (thinking) facts.reasoning = thinking;
    for (const b of blocks) if (b.type === 'tool_use') facts.calls.push({ id: text(b.id) ?? '', name: text(b.name) ?? '', args: b.input ?? {} });
    const reason = text(body.stop_reason);
    if (reason && facts.finish === undefined) facts.finish = reason;
  }
  return facts;
}

/** The events of a trace as a Storyline document. */
export function storylineOf(trace: Trace, stored: readonly StoredEvent[]): Storyline {
  const events = inTraceOrder(stored);
  const turns: Turn[] = [];
  /** Each tool call id's turn and call, so a result later finds them. */
  const calls = new Map<string, { turn: Turn; call: ToolCall }>();
  const requests = new Map<string, JsonObject>();
  const doc: Storyline = { schema_version: STORYLINE_SCHEMA_VERSION, session: trace.sessionId, agent: { id: trace.agentId }, turns, origin: { format: GATEWAY_FORMAT, source_path: tracePath(trace) } };
  const newTurn = (turn: Omit<Turn, 'id'>): Turn => {
    const t = { id: turns.length + 1, ...turn } as Turn;
    turns.push(t);
    return t;
  };
  const tcids = new Set<string>();
  const uniqueCallId = (id: string): string => {
    let candidate = id || `call-${tcids.size + 1}`;
    for (let n = 2; tcids.has(candidate); n++) candidate = `${id || 'call'}#${n}`;
    tcids.add(candidate);
    return candidate;
  };
  type Made = { turn: Turn; call: ToolCall };
  const observe = (made: Made, content: unknown, isError?: boolean): void => {
    made.call.result ??= content;
    const results = (made.turn.observation ??= { results: [] }).results;
    if (results.some((r) => r.source_call_id === made.call.tcid)) return;
    results.push({ source_call_id: made.call.tcid, content: typeof content === 'string' || Array.isArray(content) ? (content as Content) : JSON.stringify(content ?? null), ...(isError ? { is_error: true } : {}) });
  };

  for (const event of events) {
    const r: EventRecord = event.record;
    const payload = isJsonObject(r.payload) ? r.payload : {};
    const ts = timeOf(event);
    switch (r.kind) {
      case 'session.started': {
        doc.started_at ??= ts;
        const name = text(payload.agent_name) ?? text(payload.name);
        if (name) doc.agent.name = name;
        const version = text(payload.agent_version) ?? text(payload.version);
        if (version) doc.agent.ver = version;
        const model = text(payload.model);
        if (model) doc.agent.model = model;
        break;
      }
      case 'session.ended':
        doc.finished_at = ts;
        break;
      case 'note':
        newTurn({ src: 'system', kind: 'note', msg: text(payload.text) ?? text(r.payload) ?? JSON.stringify(r.payload), ts });
        break;
      case 'llm.request':
      case 'http.request': {
        if (r.call_id) requests.set(r.call_id, payload);
        const facts = requestFacts(payload);
        if (facts.system !== undefined && doc.prompt?.system === undefined) doc.prompt = { ...doc.prompt, system: facts.system };
        for (const result of facts.toolResults) {
          const made = calls.get(result.callId);
          if (made) observe(made, result.content, result.isError);
        }
        if (facts.user !== undefined && (r.kind === 'llm.request' || facts.user !== '')) newTurn({ src: 'user', msg: facts.user, ts });
        break;
      }
      case 'llm.response':
      case 'llm.response.stream':
      case 'http.response': {
        const facts = responseFacts(payload);
        if (r.kind === 'http.response' && facts.text === '' && facts.calls.length === 0 && facts.usage === undefined) break;
        const request = r.call_id ? requests.get(r.call_id) : undefined;
        const timing = isJsonObject(payload.timing) ? payload.timing : {};
        const status = count(payload.status) ?? (isJsonObject(payload.http) ? count(payload.http.status) : undefined);
        const extra: JsonObject = {
          ...(r.call_id ? { call_id: r.call_id } : {}),
          ...(status !== undefined ? { status } : {}),
          ...(facts.finish !== undefined ? { finish_reason: facts.finish } : {}),
          ...(payload.error !== undefined ? { error: payload.error } : {}),
          ...(request?.model !== undefined ? { model_requested: request.model } : {}),
          ...(request?.model_sent !== undefined ? { model_sent: request.model_sent } : {}),
          ...(request?.model_rewritten === true ? { model_rewritten: true } : {}),
          ...(r.kind === 'llm.response.stream' ? { stream: true } : {}),
        };
        const metrics = usageMetrics(facts.usage);
        const turn = newTurn({
          src: 'agent',
          msg: facts.text,
          ts,
          nllm: 1,
          ...(facts.model ?? text(request?.model_sent) ?? text(request?.model) ? { model: facts.model ?? text(request?.model_sent) ?? text(request?.model) } : {}),
          ...(facts.reasoning !== undefined ? { reason: facts.reasoning } : {}),
          ...(metrics ? { metrics } : {}),
          ...(nonNegative(timing.total_ms) !== undefined ? { latency_ms: nonNegative(timing.total_ms) } : {}),
          ...(nonNegative(timing.ttft_ms) !== undefined ? { ttft_ms: nonNegative(timing.ttft_ms) } : {}),
          ...(Object.keys(extra).length > 0 ? { extra } : {}),
        });
        if (facts.calls.length > 0) {
          turn.tool_calls = facts.calls.map((c) => {
            const call: ToolCall = { tcid: uniqueCallId(c.id), fn: c.name, args: c.args };
            calls.set(c.id || call.tcid, { turn, call });
            return call;
          });
        }
        break;
      }
      case 'tool.execution': {
        const id = text(payload.call_id) ?? r.call_id ?? '';
        let made = id === '' ? undefined : calls.get(id);
        if (!made) {
          const call: ToolCall = { tcid: uniqueCallId(id), fn: text(payload.name) ?? '', args: argumentsOf(payload.arguments) };
          made = { turn: newTurn({ src: 'agent', msg: '', ts, nllm: 0, tool_calls: [call] }), call };
          calls.set(id || call.tcid, made);
        }
        const duration = nonNegative(payload.duration_ms);
        if (duration !== undefined) made.call.duration_ms = duration;
        const failed = payload.is_error === true;
        if (failed) made.call.response = { status: 'error' };
        if (payload.result !== undefined || failed) observe(made, payload.result ?? payload.error ?? null, failed);
        break;
      }
      default:
        break;
    }
  }
  if (events.length > 0) {
    doc.started_at ??= timeOf(events[0] as StoredEvent);
    doc.finished_at ??= timeOf(events.at(-1) as StoredEvent);
  }
  doc.extra = { events: events.length, ...(trace.partition !== '' ? { partition: trace.partition } : {}), ...(trace.rootSessionId !== undefined ? { root_session_id: trace.rootSessionId } : {}) };
  return doc;
}

/**
 * Rows of the `events` relation for some of a trace's events, already in trace order (inTraceOrder)
 * and starting at `firstOrdinal` of it, its run being `documentId`: projection makes them a slice at a time.
 */
export function eventRows(trace: Trace, inOrder: readonly StoredEvent[], documentId: string, firstOrdinal = 0): Row[] {
  const base = { document_id: documentId, session_id: trace.sessionId, agent_id: trace.agentId, root_session_id: trace.rootSessionId ?? null, source_path: tracePath(trace), partition: trace.partition };
  return inOrder.map((event, i) => {
    const r = event.record;
    return {
      ...base,
      ordinal: firstOrdinal + i,
      seq: r.seq,
      source: r.source,
      kind: r.kind,
      event_id: r.event_id ?? null,
      call_id: r.call_id ?? null,
      trace_id: r.trace_id ?? null,
      timestamp: recordTime(r) ?? null,
      received_at: event.receivedAt,
      record_json: JSON.stringify(r),
    };
  });
}
