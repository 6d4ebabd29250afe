/**
 * OpenTelemetry traces over OTLP/HTTP, JSON or protobuf (`POST /v1/traces`, the OTLP path, and
 * Langfuse's `POST /api/public/otel/v1/traces`), following the GenAI semantic conventions
 * (reference/trajectory-formats.md §6), stored as the same canonical events as `POST /v1/events`:
 *
 * | span (`gen_ai.operation.name`)              | events (source `otlp/<trace id>/<span id>`, seq = µs since the epoch) |
 * |---------------------------------------------|------------------------------------------------------------------------|
 * | `invoke_agent`, `create_agent`              | `session.started` at its start, `session.ended` at its end             |
 * | `chat`, `generate_content`, `text_completion` | `llm.request` at its start, `llm.response` at its end (call_id = span id): model, usage, the input's newest user text, tool results and system instructions, the output's text, reasoning and tool calls |
 * | `execute_tool`                              | `tool.execution` at its end: name, call id, arguments, result, error  |
 * | anything else                               | `otel.span` at its end                                                 |
 *
 * A span's trace (the agent and session it belongs to) is `gen_ai.agent.id` (else `.name`, else the
 * resource's `service.name`, else `otel`) and `gen_ai.conversation.id` (else its OTLP trace id),
 * each inherited from the nearest ancestor span in the request that has it, made path-safe. The
 * end event of every span carries the span itself (name, ids, kind, attributes, status, events).
 * Since an event is known by its source and seq, an exporter's retry of a batch stores nothing twice.
 * A protobuf body (`application/x-protobuf`, otlp-protobuf.ts) is decoded into the JSON form first,
 * and answered in protobuf: an empty ExportTraceServiceResponse.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { boundedBody } from '../../../lib/bounded-body.js';
import { setOwn } from '../../../lib/own-property.js';
import { jsonOrAsGiven } from './decode.js';
import type { EventRecord } from './events.js';
import { BODY_LIMITS, RejectedBatch } from './events.js';
import { safeSegment } from './identity.js';
import type { Gateway } from './gateway.js';
import { decodeTraceRequest, OtlpProtobufError } from './otlp-protobuf.js';
import { isJsonObject, type JsonObject } from '../../../lib/json-object.js';

const PROTOBUF = 'application/x-protobuf';


/** An OTLP AnyValue as plain JSON. */
function anyValue(value: unknown): unknown {
  if (!isJsonObject(value)) return null;
  if ('stringValue' in value) return value.stringValue;
  if ('boolValue' in value) return value.boolValue;
  if ('intValue' in value) return Number(value.intValue);
  if ('doubleValue' in value) return Number(value.doubleValue);
  if ('bytesValue' in value) return value.bytesValue;
  if (isJsonObject(value.arrayValue)) return (Array.isArray(value.arrayValue.values) ? value.arrayValue.values : []).map(anyValue);
  if (isJsonObject(value.kvlistValue)) return attributes(value.kvlistValue.values);
  return null;
}

/** A KeyValue list as an object. */
function attributes(list: unknown): JsonObject {
  const out: JsonObject = {};
  for (const kv of Array.isArray(list) ? list : []) if (isJsonObject(kv) && typeof kv.key === 'string') setOwn(out, kv.key, anyValue(kv.value));
  return out;
}

/** A JSON attribute (GenAI messages are JSON text on spans), parsed; undefined when absent. */
const jsonAttribute = (value: unknown): unknown => jsonOrAsGiven(value ?? undefined);

/**
 * OTLP times are fixed64 nanoseconds; an event's `seq` is its time in microseconds, which must be a
 * safe integer (2^53 µs is in the year 2255), as /v1/events asks of it.
 */
const MAX_MICROS = BigInt(Number.MAX_SAFE_INTEGER);

/** Nanoseconds since the epoch (a decimal string or a number) as microseconds; undefined when missing, not a fixed64 or past MAX_MICROS. */
function micros(value: unknown): number | undefined {
  const nanos = typeof value === 'number' && Number.isInteger(value) && value >= 0 ? BigInt(value) : typeof value === 'string' && /^\d{1,20}$/.test(value) ? BigInt(value) : undefined;
  if (nanos === undefined || nanos / 1000n > MAX_MICROS) return undefined;
  return Number(nanos / 1000n);
}

/** An identity made path-safe (identity.ts), or `fallback`. */
function safeIdentity(value: unknown, fallback: string): string {
  return typeof value === 'string' || typeof value === 'number' ? (safeSegment(String(value)) ?? fallback) : fallback;
}

interface Message {
  role?: string;
  parts?: JsonObject[];
}

function messagesOf(value: unknown): Message[] {
  const parsed = jsonAttribute(value);
  return Array.isArray(parsed) ? parsed.filter(isJsonObject).map((m) => ({ ...(typeof m.role === 'string' ? { role: m.role } : {}), parts: Array.isArray(m.parts) ? m.parts.filter(isJsonObject) : [] })) : [];
}

const partsText = (parts: readonly JsonObject[], type: string): string =>
  parts
    .filter((p) => p.type === type)
    .map((p) => (typeof p.content === 'string' ? p.content : ''))
    .join('\n');

/** What an inference span's input says: its newest user text (when it ends with the user's message), tool results, system instructions. */
function inputFacts(attrs: JsonObject): JsonObject {
  const messages = messagesOf(attrs['gen_ai.input.messages']);
  const out: JsonObject = {};
  const last = messages.at(-1);
  if (last?.role === 'user') {
    const text = partsText(last.parts ?? [], 'text');
    if (text !== '') out.user_content = text;
  }
  const lastAssistant = messages.map((m) => m.role).lastIndexOf('assistant');
  const results = messages
    .slice(lastAssistant + 1)
    .flatMap((m) => m.parts ?? [])
    .filter((p) => p.type === 'tool_call_response' && typeof p.id === 'string')
    .map((p) => ({ call_id: p.id, content: typeof p.response === 'string' ? p.response : JSON.stringify(p.response ?? null) }));
  if (results.length > 0) out.tool_results = results;
  const system = jsonAttribute(attrs['gen_ai.system_instructions']);
  const systemText = typeof system === 'string' ? system : Array.isArray(system) ? partsText(system.filter(isJsonObject), 'text') : '';
  if (systemText !== '') out.system = systemText;
  return out;
}

/** What an inference span's output says: text, reasoning, tool calls. */
function outputFacts(attrs: JsonObject): JsonObject {
  const parts = messagesOf(attrs['gen_ai.output.messages']).flatMap((m) => (m.role === undefined || m.role === 'assistant' ? (m.parts ?? []) : []));
  const out: JsonObject = {};
  const text = partsText(parts, 'text');
  if (text !== '' || parts.length > 0) out.assistant_content = text;
  const reasoning = partsText(parts, 'reasoning');
  if (reasoning !== '') out.reasoning_content = reasoning;
  const calls = parts.filter((p) => p.type === 'tool_call').map((p) => ({ id: p.id ?? '', name: p.name ?? '', arguments: p.arguments ?? {} }));
  if (calls.length > 0) out.tool_calls = calls;
  return out;
}

function usageOf(attrs: JsonObject): JsonObject | undefined {
  const usage: JsonObject = {};
  for (const [name, key] of [
    ['input_tokens', 'gen_ai.usage.input_tokens'],
    ['output_tokens', 'gen_ai.usage.output_tokens'],
    ['cache_read.input_tokens', 'gen_ai.usage.cache_read.input_tokens'],
    ['cache_creation.input_tokens', 'gen_ai.usage.cache_creation.input_tokens'],
  ] as const) {
    if (typeof attrs[key] === 'number') usage[name] = attrs[key];
  }
  return Object.keys(usage).length > 0 ? usage : undefined;
}

const INFERENCE = new Set(['chat', 'generate_content', 'text_completion']);

interface Span {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  attrs: JsonObject;
  resource: JsonObject;
  raw: JsonObject;
}

export interface OtlpGroup {
  agentId: string;
  sessionId: string;
  records: EventRecord[];
}

/**
 * Spans per export request. A span becomes one or two records, and each costs about 500 bytes of log
 * however small the span: 200,000 empty spans (8 MB of protobuf, 1 MB gzipped) made 100 MB of log.
 * With 8,192, empty spans make at most about 4 MB, so what one request writes stays within a few times
 * the 8 MiB body limit (and well under the 64 MiB pending bound), and the batches exporters send by
 * default still fit: the SDKs' BatchSpanProcessor sends 512, the Collector's batch processor 8,192.
 */
export const MAX_SPANS = 8192;

/** The canonical events of an OTLP JSON export request, grouped by trace (agent and session); throws RejectedBatch for a request that is not one. */
export function otlpEvents(body: unknown): OtlpGroup[] {
  if (!isJsonObject(body)) throw new RejectedBatch(400, 'invalid_event', 'the body must be an OTLP ExportTraceServiceRequest: a JSON object {resourceSpans: [...]}');
  if (body.resourceSpans !== undefined && !Array.isArray(body.resourceSpans)) throw new RejectedBatch(400, 'invalid_event', '/resourceSpans: must be an array');
  const spans: Span[] = [];
  (body.resourceSpans as unknown[] | undefined ?? []).forEach((rs, i) => {
    if (!isJsonObject(rs)) throw new RejectedBatch(400, 'invalid_event', `/resourceSpans/${i}: must be an object`);
    const resource = attributes(isJsonObject(rs.resource) ? rs.resource.attributes : undefined);
    (Array.isArray(rs.scopeSpans) ? rs.scopeSpans : []).forEach((ss, j) => {
      if (!isJsonObject(ss)) throw new RejectedBatch(400, 'invalid_event', `/resourceSpans/${i}/scopeSpans/${j}: must be an object`);
      (Array.isArray(ss.spans) ? ss.spans : []).forEach((span, k) => {
        const where = `/resourceSpans/${i}/scopeSpans/${j}/spans/${k}`;
        if (!isJsonObject(span) || typeof span.traceId !== 'string' || typeof span.spanId !== 'string' || span.traceId === '' || span.spanId === '') {
          throw new RejectedBatch(400, 'invalid_event', `${where}: a span needs a traceId and a spanId`);
        }
        if (micros(span.startTimeUnixNano) === undefined) throw new RejectedBatch(400, 'invalid_event', `${where}/startTimeUnixNano: must be nanoseconds since the epoch`);
        if (spans.length === MAX_SPANS) throw new RejectedBatch(413, 'too_many_spans', `more than ${MAX_SPANS} spans; one export request may hold at most ${MAX_SPANS} (send smaller batches)`);
        spans.push({ traceId: span.traceId, spanId: span.spanId, parentSpanId: typeof span.parentSpanId === 'string' ? span.parentSpanId : '', name: typeof span.name === 'string' ? span.name : '', attrs: attributes(span.attributes), resource, raw: span });
      });
    });
  });
  const byId = new Map(spans.map((s) => [`${s.traceId}/${s.spanId}`, s]));
  /** An attribute of the span or of its nearest ancestor in this request that has it. */
  const inherited = (span: Span, key: string): unknown => {
    for (let s: Span | undefined = span, hops = 0; s && hops < 64; s = byId.get(`${s.traceId}/${s.parentSpanId}`), hops++) if (s.attrs[key] !== undefined && s.attrs[key] !== null) return s.attrs[key];
    return undefined;
  };
  const groups = new Map<string, OtlpGroup>();
  for (const span of spans) {
    const agentId = safeIdentity(inherited(span, 'gen_ai.agent.id') ?? inherited(span, 'gen_ai.agent.name') ?? span.resource['service.name'], 'otel');
    const sessionId = safeIdentity(inherited(span, 'gen_ai.conversation.id'), safeIdentity(span.traceId, 'otel'));
    const key = `${agentId}/${sessionId}`;
    let group = groups.get(key);
    if (!group) groups.set(key, (group = { agentId, sessionId, records: [] }));
    group.records.push(...spanEvents(span, agentId, sessionId));
  }
  return [...groups.values()];
}

/** The events of one span. */
function spanEvents(span: Span, agentId: string, sessionId: string): EventRecord[] {
  const a = span.attrs;
  const op = typeof a['gen_ai.operation.name'] === 'string' ? a['gen_ai.operation.name'] : (span.name.split(' ')[0] ?? '');
  const start = micros(span.raw.startTimeUnixNano) as number;
  const end = Math.max(micros(span.raw.endTimeUnixNano) ?? start, start + 1);
  const status = isJsonObject(span.raw.status) ? span.raw.status : {};
  const failed = status.code === 2 || status.code === 'STATUS_CODE_ERROR' || a['error.type'] !== undefined;
  const base = { source: `otlp/${span.traceId}/${span.spanId}`, agent_id: agentId, session_id: sessionId, trace_id: span.traceId, call_id: span.spanId, producer: 'otlp' };
  const at = (us: number) => ({ seq: us, timestamp: new Date(Math.floor(us / 1000)).toISOString(), timestamp_unix_ms: Math.floor(us / 1000) });
  const spanRecord = { name: span.name, trace_id: span.traceId, span_id: span.spanId, parent_span_id: span.parentSpanId || null, kind: span.raw.kind ?? null, attributes: a, status, events: span.raw.events ?? [] };
  const durationMs = (end - start) / 1000;
  const error = failed ? { type: a['error.type'] ?? 'error', ...(typeof status.message === 'string' ? { message: status.message } : {}) } : undefined;
  if (op === 'invoke_agent' || op === 'create_agent') {
    return [
      { ...base, ...at(start), kind: 'session.started', payload: { agent_name: a['gen_ai.agent.name'], agent_id: a['gen_ai.agent.id'], agent_description: a['gen_ai.agent.description'], agent_version: a['gen_ai.agent.version'], model: a['gen_ai.request.model'] } },
      { ...base, ...at(end), kind: 'session.ended', payload: { ...(error ? { error } : {}), span: spanRecord } },
    ];
  }
  if (INFERENCE.has(op)) {
    return [
      { ...base, ...at(start), kind: 'llm.request', payload: { model: a['gen_ai.request.model'], provider: a['gen_ai.provider.name'] ?? a['gen_ai.system'], ...inputFacts(a) } },
      {
        ...base,
        ...at(end),
        kind: 'llm.response',
        payload: {
          model: a['gen_ai.response.model'] ?? a['gen_ai.request.model'],
          ...(usageOf(a) ? { usage: usageOf(a) } : {}),
          ...outputFacts(a),
          ...(Array.isArray(a['gen_ai.response.finish_reasons']) && typeof a['gen_ai.response.finish_reasons'][0] === 'string' ? { finish_reason: a['gen_ai.response.finish_reasons'][0] } : {}),
          ...(error ? { error } : {}),
          timing: { total_ms: durationMs },
          span: spanRecord,
        },
      },
    ];
  }
  if (op === 'execute_tool') {
    const callId = typeof a['gen_ai.tool.call.id'] === 'string' ? a['gen_ai.tool.call.id'] : span.spanId;
    return [
      {
        ...base,
        ...at(end),
        call_id: callId,
        kind: 'tool.execution',
        payload: { name: a['gen_ai.tool.name'] ?? span.name, call_id: callId, arguments: jsonAttribute(a['gen_ai.tool.call.arguments']) ?? {}, ...(a['gen_ai.tool.call.result'] !== undefined ? { result: jsonAttribute(a['gen_ai.tool.call.result']) } : {}), ...(failed ? { is_error: true, error } : {}), duration_ms: durationMs, span: spanRecord },
      },
    ];
  }
  return [{ ...base, ...at(end), kind: 'otel.span', payload: { span: spanRecord } }];
}

/** A protobuf body as its OTLP/JSON object; one that is not an ExportTraceServiceRequest is the client's error. */
function decodeProtobuf(body: Buffer): JsonObject {
  try {
    return decodeTraceRequest(body);
  } catch (error) {
    if (error instanceof OtlpProtobufError) throw new RejectedBatch(400, 'invalid_event', `the protobuf body is not an ExportTraceServiceRequest: ${error.message}`);
    throw error;
  }
}

export function otlpRoutes(app: FastifyInstance, gateway: Gateway, userOf: (req: FastifyRequest) => string | undefined): void {
  const handler = async (req: FastifyRequest, reply: FastifyReply): Promise<JsonObject | FastifyReply> => {
    const user = userOf(req);
    const protobuf = Buffer.isBuffer(req.body);
    const body = protobuf ? decodeProtobuf(req.body as Buffer) : req.body;
    // One append for every trace of the export: a refusal (429, 503) leaves nothing of it stored, so the exporter's retry is whole.
    await gateway.appendAll(otlpEvents(body).map((group) => ({ agentId: group.agentId, sessionId: group.sessionId, user, records: group.records })));
    // OTLP: a full success is an ExportTraceServiceResponse without partialSuccess, in the request's encoding.
    if (protobuf) return reply.type(PROTOBUF).send(Buffer.alloc(0));
    return {};
  };
  // The protobuf parser belongs to these routes only: /v1/events stays JSON.
  void app.register(async (otlp) => {
    otlp.addContentTypeParser(PROTOBUF, boundedBody(BODY_LIMITS, (raw) => raw));
    otlp.post('/v1/traces', handler);
    otlp.post('/api/public/otel/v1/traces', handler);
  });
}
