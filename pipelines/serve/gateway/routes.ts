/**
 * The gateway's HTTP routes.
 *
 * On the gateway listener (`--gateway ADDRESS`), a fastify app of its own whose errors are
 * `{error, message}` (reference/trajectory-formats.md §5.2):
 *   POST /v1/events                         canonical events (events.ts); 200 once durable
 *   POST /v1/traces                         OTLP/HTTP traces, JSON or protobuf (otlp.ts); also at Langfuse's
 *   POST /api/public/otel/v1/traces         path
 *   GET  /healthz                           liveness and what the gateway writes to
 *
 * On the read-only API listener (registered beside its routes), answering from the event log, so a
 * trace is readable as soon as its events are acknowledged, before any projection:
 *   GET /api/gateway                                   the gateway: dataset, split, idle, projection, log held
 *   GET /api/gateway/traces                            the traces it knows, newest first
 *   GET /api/gateway/traces/:agent_id/:session_id              one trace's facts
 *   GET /api/gateway/traces/:agent_id/:session_id/events       its events, in trace order
 *   GET /api/gateway/traces/:agent_id/:session_id/storyline    its Storyline document
 *   GET /api/gateway/traces/:agent_id/:session_id/trajectory   its trajectory as ATIF
 */
import { Type, type Static } from '@sinclair/typebox';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { REQUEST_TIMEOUT_MS } from '../../../lib/http-limits.js';
import { answerHalfClosedClients } from '../../../lib/client-gone.js';
import { protocolErrorOptions, refuseBadHostHeader, type ErrorShape } from '../../../lib/protocol-errors.js';
import { NotFoundError } from '../../../lib/errors.js';
import type { Logger } from '../../../lib/log.js';
import { boundedBody, depthBoundedJsonBody } from '../../../lib/bounded-body.js';
import { MAX_JSON_DEPTH } from '../../formats/lines.js';
import { loadFormat } from '../../formats/registry.js';
import type { Storyline } from '../../storyline/schema.js';
import { inTraceOrder, storylineOf, tracePath } from './decode.js';
import type { Trace } from './event-log.js';
import { AppendAnswer, BODY_LIMITS, checkBody, checkIdentity, GatewayError, MAX_BODY_BYTES } from './events.js';
import { isGatewayFailure } from './failure.js';
import type { Gateway } from './gateway.js';
import { refuseCrossSiteChanges, refuseOtherHosts } from '../../../lib/loopback-host.js';
import { ANSWER_HEADERS } from '../answer-headers.js';
import { otlpRoutes } from './otlp.js';
import { USER_HEADER } from './split.js';

const sendError = (reply: FastifyReply, status: number, error: string, message: string): FastifyReply => reply.code(status).send({ error, message } satisfies GatewayError);

/** The `{user}` of a request: its USER_HEADER, which must be one path-safe segment; undefined when absent. */
export function userOf(req: FastifyRequest): string | undefined {
  const value = req.headers[USER_HEADER];
  if (value === undefined) return undefined;
  const user = Array.isArray(value) ? value.join(',') : value;
  checkIdentity(USER_HEADER, user);
  return user;
}

/** Fastify's own client errors (bad JSON, too large, wrong content type) by status, as the gateway's codes. */
const CLIENT_CODES: Record<number, string> = { 400: 'invalid_json', 404: 'not_found', 405: 'method_not_allowed', 413: 'body_too_large', 415: 'unsupported_media_type' };

/** What a client error of fastify's own says: for a body too large or of a type not taken, what the gateway takes. */
function clientMessage(error: Error & { code?: string }, req: FastifyRequest): string {
  if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE') return `the body is larger than ${MAX_BODY_BYTES} bytes`;
  if (error.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') return `Content-Type ${JSON.stringify((req.headers['content-type'] ?? 'none').slice(0, 100))} is not taken: send application/json (the OTLP paths also take application/x-protobuf)`;
  return error.message;
}

/** The gateway listener's app. */
export function gatewayApp(gateway: Gateway, log: Logger): FastifyInstance {
  const shape: ErrorShape = (_status, error, message) => ({ error, message });
  const app = Fastify({ ...protocolErrorOptions(shape, () => ANSWER_HEADERS), logger: false, bodyLimit: BODY_LIMITS.drainBytes, requestTimeout: REQUEST_TIMEOUT_MS, return503OnClosing: true });
  refuseBadHostHeader(app, shape, () => ANSWER_HEADERS);
  // A client that half-closes once its request is sent still waits for its acknowledgement.
  answerHalfClosedClients(app);
  app.addHook('onRequest', async (_req, reply) => void reply.headers(ANSWER_HEADERS));
  refuseOtherHosts(app, (reply, message) => sendError(reply, 403, 'forbidden', message));
  // Its posts write to the dataset: another site's page may not make them, whatever its body's type.
  refuseCrossSiteChanges(app, (reply, message) => sendError(reply, 403, 'forbidden', message));
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', boundedBody(BODY_LIMITS, depthBoundedJsonBody(MAX_JSON_DEPTH)));
  app.addHook('onResponse', async (req, reply) => log.info(`gateway: ${req.method} ${req.url} ${reply.statusCode} ${reply.elapsedTime.toFixed(1)}ms`));
  app.setErrorHandler((error, req, reply) => {
    if (isGatewayFailure(error)) {
      if (error.status === 429) void reply.header('retry-after', '1');
      return sendError(reply, error.status, error.code, error.message);
    }
    const status = (error as { statusCode?: number }).statusCode;
    if (typeof status === 'number' && status >= 400 && status < 500) {
      return sendError(reply, status, CLIENT_CODES[status] ?? 'bad_request', clientMessage(error as Error & { code?: string }, req));
    }
    log.error(`gateway: ${req.method} ${req.url}: ${(error as Error).stack ?? String(error)}`);
    return sendError(reply, 500, 'internal', 'internal error (see the server log)');
  });
  app.setNotFoundHandler((req, reply) => sendError(reply, 404, 'not_found', `no route ${req.method} ${req.url.split('?')[0]}`));

  app.post('/v1/events', { schema: { response: { 200: AppendAnswer, '4xx': GatewayError, '5xx': GatewayError } } }, async (req) => {
    const body = checkBody(req.body);
    const { result: _result, ...answer } = await gateway.append({ agentId: body.agent_id, sessionId: body.session_id, rootSessionId: body.root_session_id, user: userOf(req), records: body.records });
    return answer;
  });
  otlpRoutes(app, gateway, userOf);
  app.get('/healthz', async () => ({ status: 'ok', mode: 'ingest', dataset: gateway.datasetUri, split: gateway.split?.source ?? null, traces: gateway.events.list().length }));
  return app;
}

const TraceParams = Type.Object({ agent_id: Type.String(), session_id: Type.String() });
/** `limit` (up to `maximum`) and `offset` of a paged list. */
const pageQuery = (maximum: number) =>
  Type.Object(
    {
      limit: Type.Optional(Type.Integer({ minimum: 1, maximum })),
      offset: Type.Optional(Type.Integer({ minimum: 0 })),
    },
    { additionalProperties: false },
  );
type PageQuery = Static<ReturnType<typeof pageQuery>>;

/** The page of `all` a query asks for (`limit` defaults to `size`), and where it starts. */
function pageOf<T>(all: T[], query: PageQuery, size: number): { offset: number; items: T[] } {
  const offset = query.offset ?? 0;
  return { offset, items: all.slice(offset, offset + (query.limit ?? size)) };
}

const TRACES_PAGE = 100;
const TracesQuery = pageQuery(1000);
/** Events per page of a live trace by default: a trace can hold hundreds of thousands. */
const EVENTS_PAGE = 1000;
const EventsQuery = pageQuery(10 * EVENTS_PAGE);

function traceFacts(gateway: Gateway, trace: Trace): Record<string, unknown> {
  return {
    agent_id: trace.agentId,
    session_id: trace.sessionId,
    root_session_id: trace.rootSessionId ?? null,
    partition: trace.partition,
    storage: tracePath(trace),
    events: trace.events,
    projected_events: gateway.projection.projectedEvents(trace),
    first_received_at: trace.firstReceivedAt ?? null,
    last_received_at: trace.lastReceivedAt ?? null,
  };
}

/** ATIF of one Storyline document. */
async function atifOf(doc: Storyline): Promise<unknown> {
  const atif = await loadFormat('atif');
  for await (const encoded of atif.encode?.((async function* () {
    yield doc;
  })()) ?? []) return encoded.value;
  return null;
}

/** The live trace routes on the read-only API listener. */
export function liveTraceRoutes(app: FastifyInstance, gateway: Gateway, mount: string): void {
  const find = (params: Static<typeof TraceParams>): Trace => {
    const trace = gateway.events.get({ agentId: params.agent_id, sessionId: params.session_id });
    if (!trace) throw new NotFoundError(`the gateway has no trace of agent ${JSON.stringify(params.agent_id)} and session ${JSON.stringify(params.session_id)}`);
    return trace;
  };
  app.get('/api/gateway', async () => ({
    dataset: gateway.datasetUri,
    mount,
    split: gateway.split?.source ?? null,
    split_idle_ms: gateway.idleMs,
    traces: gateway.events.list().length,
    projection: gateway.projection.status,
    log: gateway.events.stats,
  }));
  app.get<{ Querystring: PageQuery }>('/api/gateway/traces', { schema: { querystring: TracesQuery } }, async (req) => {
    const all = gateway.events.list().sort((a, b) => String(b.lastReceivedAt).localeCompare(String(a.lastReceivedAt)));
    const { offset, items } = pageOf(all, req.query, TRACES_PAGE);
    return { total: all.length, offset, traces: items.map((t) => traceFacts(gateway, t)) };
  });
  const opts = { schema: { params: TraceParams } };
  app.get<{ Params: Static<typeof TraceParams> }>('/api/gateway/traces/:agent_id/:session_id', opts, async (req) => ({ trace: traceFacts(gateway, find(req.params)) }));
  app.get<{ Params: Static<typeof TraceParams>; Querystring: PageQuery }>('/api/gateway/traces/:agent_id/:session_id/events', { schema: { params: TraceParams, querystring: EventsQuery } }, async (req) => {
    const trace = find(req.params);
    const all = inTraceOrder(await gateway.events.events(trace));
    const { offset, items } = pageOf(all, req.query, EVENTS_PAGE);
    return { trace: traceFacts(gateway, trace), total: all.length, offset, events: items.map((e) => ({ ...e.record, received_at: e.receivedAt })) };
  });
  app.get<{ Params: Static<typeof TraceParams> }>('/api/gateway/traces/:agent_id/:session_id/storyline', opts, async (req) => {
    const trace = find(req.params);
    return storylineOf(trace, await gateway.events.events(trace));
  });
  app.get<{ Params: Static<typeof TraceParams> }>('/api/gateway/traces/:agent_id/:session_id/trajectory', opts, async (req) => {
    const trace = find(req.params);
    return atifOf(storylineOf(trace, await gateway.events.events(trace)));
  });
}
