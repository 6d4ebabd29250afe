/**
 * The LLM capture gateway (`serve --gateway-config FILE`): a forwarding proxy for OpenAI
 * chat-completions (`POST /v1/chat/completions`, also without `/v1`) and Anthropic messages
 * (`POST /v1/messages`), plain and streamed, that records every call as canonical events.
 *
 * Forwarding (reference/capture-gateway.md):
 * - the route is the first `[[models]]` entry whose name matches the request's `model`; a
 *   `forward` route rewrites the model to its target's name and uses the target's upstream;
 * - the URL is the upstream base joined with the path the request was routed by, an overlap of
 *   whole segments taken once (`.../v1` + `/v1/chat/completions` = `.../v1/chat/completions`); the
 *   query passes; a target spelled any other way (a fragment, dot segments, percent-encoding, the
 *   absolute form) is refused, so the route's credential reaches no other path of the upstream;
 * - a request from a web page of another site (an `Origin` that is not loopback, `Sec-Fetch-Site`
 *   cross-site or same-site) is refused, and so is a body that is not `application/json`, which a
 *   page could send without the browser asking first (a CORS "simple" request);
 * - a body nesting arrays and objects deeper than MAX_JSON_DEPTH is refused, as the event gateway
 *   refuses one: the call could not be recorded;
 * - a compressed request body (gzip, deflate, br) is forwarded decoded, without its
 *   Content-Encoding;
 * - end-to-end headers pass; `host`, `content-length`, hop-by-hop headers, proxy credentials, the
 *   client's LLM credentials (`authorization`, `x-api-key`, `api-key`, `x-goog-api-key`) and the
 *   gateway's own headers are removed; the route's credential is set (`authorization: Bearer` for
 *   chat-completions, `x-api-key` for messages);
 * - the answer (status, headers but hop-by-hop ones, body) goes back to the client as its bytes
 *   arrive, untouched; a copy is read on the side (response.ts). Redirects are returned, not
 *   followed. An upstream error is returned as it is and closes the captured call; an upstream
 *   that cannot be reached, or answers something that is not an HTTP answer (a status outside
 *   200-599), gets the client a 502; one that sends nothing for `upstream_timeout` a 504, or its
 *   stream ended there.
 *
 * Capture: per call an `llm.request` event when it starts and an `llm.response` (or
 * `llm.response.stream`) event when its answer ends (`http.cancel` when the client goes away
 * first), with the same `call_id`, `source` CAPTURE_SOURCE and increasing `seq` within the session,
 * into the trace of the agent (`agent_id`, or the request's AGENT_HEADER) and session (the
 * configured session header, `default` when absent). What the payloads hold depends on the
 * capture level (summary: models, status, usage, timing and byte counts; dialogue: also the user's
 * newest text, the system prompt, tool results, the assistant's text, reasoning and tool calls;
 * full: also the parsed request and answer bodies and their headers, credentials removed). Events
 * are appended after the call's bytes have gone to the client, never in its way. The route's and
 * the client's credentials are scrubbed from every string recorded (an upstream may echo one); the
 * record's shape is never touched. Calls still under way when the gateway stops are cut and
 * recorded before the event log closes.
 */
import { randomUUID } from 'node:crypto';
import { Agent as HttpAgent, request as httpRequest, type IncomingHttpHeaders, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { REQUEST_TIMEOUT_MS } from '../../../lib/http-limits.js';
import { answerHalfClosedClients } from '../../../lib/client-gone.js';
import { protocolErrorOptions, refuseBadHostHeader, type ErrorShape } from '../../../lib/protocol-errors.js';
import { boundedBody, type BodyLimits } from '../../../lib/bounded-body.js';
import { jsonDepthExceeds } from '../../../lib/json-depth.js';
import { MAX_JSON_DEPTH } from '../../formats/lines.js';
import type { Logger } from '../../../lib/log.js';
import { requestFacts, responseFacts } from '../gateway/decode.js';
import type { EventRecord } from '../gateway/events.js';
import { safeSegment } from '../gateway/identity.js';
import type { Gateway } from '../gateway/gateway.js';
import { USER_HEADER } from '../gateway/split.js';
import { chooseRoute, type CaptureConfig, type ModelRoute, type RouteChoice } from './config.js';
import { AnswerReader, type Protocol } from './response.js';
import type { CaptureState } from './state.js';
import { refuseOtherHosts } from '../../../lib/loopback-host.js';
import { crossSite } from '../../../lib/loopback.js';
import { redactQueryCredentials } from '../../../lib/redact.js';
import type { Scrub } from './state.js';

/** `source` of the events the capture gateway records. */
export const CAPTURE_SOURCE = 'trajstore-capture';
/** A request header naming the agent of the call, over the configured `agent_id`. */
export const AGENT_HEADER = 'x-trajstore-agent-id';
/** Session of a call without the session header. */
export const DEFAULT_SESSION = 'default';
/**
 * Longest model name taken: every call copies it into the log, the debug log and the session index
 * (rewritten whole as calls come), so a megabyte of name made megabytes of state per call. Far past
 * any model an API names (Bedrock's ARNs, the longest, are about 100 characters).
 */
const MAX_MODEL_CHARS = 256;
/** Request bodies up to 32 MiB (decoded); a larger one is read and dropped up to 64 MiB, so that its sender gets the 413. */
const REQUEST_LIMITS: BodyLimits = { maxBytes: 32 * 1024 * 1024, drainBytes: 64 * 1024 * 1024 };

/** Headers never forwarded either way (RFC 9110 §7.6.1 hop-by-hop, and what the proxy sets itself). */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host', 'content-length']);

/** Whether `name` stops at this hop: a hop-by-hop header, or one its message's Connection header names (RFC 9110 §7.6.1). */
function hopByHop(headers: IncomingHttpHeaders): (name: string) => boolean {
  const named = new Set(String(headers.connection ?? '').split(',').map((token) => token.trim().toLowerCase()));
  return (name) => HOP_BY_HOP.has(name) || named.has(name);
}
/** Client credentials of LLM APIs: removed from the forwarded request, never recorded. */
const CREDENTIAL_HEADERS = new Set(['authorization', 'x-api-key', 'api-key', 'x-goog-api-key', 'cookie', 'proxy-authorization']);

/** The upstream URL of a request: the base joined with the path, whole segments both end with and start with taken once. */
export function upstreamUrl(base: URL, pathAndQuery: string): URL {
  const q = pathAndQuery.indexOf('?');
  const path = q < 0 ? pathAndQuery : pathAndQuery.slice(0, q);
  const query = q < 0 ? '' : pathAndQuery.slice(q);
  const baseSegments = base.pathname.split('/').filter((s) => s !== '');
  const pathSegments = path.split('/').filter((s) => s !== '');
  let overlap = 0;
  for (let n = Math.min(baseSegments.length, pathSegments.length); n > 0; n--) {
    if (baseSegments.slice(-n).join('/') === pathSegments.slice(0, n).join('/')) {
      overlap = n;
      break;
    }
  }
  const url = new URL(base.href);
  url.pathname = `/${[...baseSegments, ...pathSegments.slice(overlap)].join('/')}`;
  url.search = query;
  return url;
}

/** Replaces every occurrence of the secrets in a text with `***`. */
export function scrubber(secrets: readonly string[]): Scrub {
  const list = secrets.filter((s) => s.length >= 4);
  return (text) => list.reduce((t, secret) => (t.includes(secret) ? t.split(secret).join('***') : t), text);
}

/**
 * A JSON value with the secrets scrubbed from its strings. Keys, numbers, booleans and null stay as
 * they are: a credential such as `true` or `role` must not change the record's shape.
 */
export function scrubJson(value: unknown, scrub: Scrub): unknown {
  if (typeof value === 'string') return scrub(value);
  if (Array.isArray(value)) return value.map((v) => scrubJson(v, scrub));
  if (typeof value === 'object' && value !== null) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, scrubJson(v, scrub)]));
  return value;
}

/** The protocol a request target speaks, for its error answers. */
const protocolOf = (target: string): Protocol => (target.startsWith('/v1/messages') ? 'anthropic-messages' : 'openai-chat');

/**
 * The query (`?...`, or '') of a request target spelled exactly as the routed `path` with an
 * optional query; undefined for any other spelling the router may have taken for it (a fragment,
 * dot segments, percent-encoding, the absolute form), which would otherwise reach another path.
 */
function queryOf(target: string, path: string): string | undefined {
  const q = target.indexOf('?');
  const [spelled, query] = q < 0 ? [target, ''] : [target.slice(0, q), target.slice(q)];
  return spelled === path && !query.includes('#') ? query : undefined;
}

/** A request target as logs and messages show it: no credential of its query, at most 200 characters. */
const shownTarget = (target: string): string => redactQueryCredentials(target).slice(0, 200);

/** The media type of a request, lowercase, without its parameters; '' without one. */
const mediaType = (headers: IncomingHttpHeaders): string => (headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();

/** Values of the client's credential headers (Bearer tokens without the scheme too), to scrub. */
function clientSecrets(headers: IncomingHttpHeaders): string[] {
  const out: string[] = [];
  for (const name of CREDENTIAL_HEADERS) {
    const value = headers[name];
    for (const v of Array.isArray(value) ? value : value === undefined ? [] : [value]) {
      out.push(v);
      const token = /^\s*\w+\s+(.+)$/.exec(v)?.[1];
      if (token) out.push(token);
    }
  }
  return out;
}

function forwardHeaders(incoming: IncomingHttpHeaders, drop: ReadonlySet<string>, route: ModelRoute, protocol: Protocol, length: number): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  const stops = hopByHop(incoming);
  for (const [name, value] of Object.entries(incoming)) {
    // The body goes out as read, decoded: its Content-Encoding no longer applies.
    if (value === undefined || stops(name) || CREDENTIAL_HEADERS.has(name) || drop.has(name) || name === 'content-encoding') continue;
    out[name] = value;
  }
  if (route.apiKey !== undefined) {
    if (protocol === 'anthropic-messages') out['x-api-key'] = route.apiKey;
    else out.authorization = `Bearer ${route.apiKey}`;
  }
  out['content-length'] = String(length);
  return out;
}

/** Headers of an answer as recorded (full capture): without hop-by-hop and credential headers. */
function recordedHeaders(headers: IncomingHttpHeaders): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const stops = hopByHop(headers);
  for (const [name, value] of Object.entries(headers)) if (!stops(name) && !CREDENTIAL_HEADERS.has(name) && name !== 'set-cookie') out[name] = value;
  return out;
}

/** An error body in the client's protocol (the SDKs read these shapes). */
function errorBody(protocol: Protocol, type: string, message: string): object {
  return protocol === 'anthropic-messages' ? { type: 'error', error: { type, message } } : { error: { message, type, code: null } };
}

function apiError(reply: FastifyReply, protocol: Protocol, status: number, type: string, message: string): FastifyReply {
  return reply.code(status).header('content-type', 'application/json').send(errorBody(protocol, type, message));
}

/** A header value as one path-safe segment (unsafe characters become `_`), or undefined. */
function segmentOf(value: string | string[] | undefined): string | undefined {
  const text = Array.isArray(value) ? value[0] : value;
  return text === undefined ? undefined : safeSegment(text);
}

export interface CaptureCounters {
  calls: number;
  inFlight: number;
  upstreamErrors: number;
  captureFailures: number;
}

interface Call {
  id: string;
  protocol: Protocol;
  agentId: string;
  sessionId: string;
  user: string | undefined;
  choice: RouteChoice;
  modelRequested: string;
  stream: boolean;
  startedAt: string;
  started: number;
  scrub: Scrub;
}

export class CaptureProxy {
  readonly counters: CaptureCounters = { calls: 0, inFlight: 0, upstreamErrors: 0, captureFailures: 0 };
  private readonly writes = new Set<Promise<unknown>>();
  private readonly nextSeq = new Map<string, number>();
  private readonly agents = { http: new HttpAgent({ keepAlive: true }), https: new HttpsAgent({ keepAlive: true }) };
  private readonly ownHeaders: ReadonlySet<string>;
  private readonly routeSecrets: string[];
  /** The calls under way, each as the function that cuts it and records it so. */
  private readonly active = new Set<(reason: string) => void>();
  private stopping = false;

  constructor(
    private readonly config: CaptureConfig,
    private readonly gateway: Gateway,
    private readonly state: CaptureState,
    private readonly log: Logger,
  ) {
    this.ownHeaders = new Set([config.sessionHeader, AGENT_HEADER, USER_HEADER]);
    this.routeSecrets = config.routes.flatMap((r) => (r.apiKey === undefined ? [] : [r.apiKey]));
  }

  app(): FastifyInstance {
    // What fails before any route (not valid HTTP, a Host header missing or repeated) is answered in OpenAI's shape, as its 404.
    const shape: ErrorShape = (_status, _code, message) => errorBody('openai-chat', 'invalid_request_error', message);
    const app = Fastify({ ...protocolErrorOptions(shape), logger: false, bodyLimit: REQUEST_LIMITS.drainBytes, requestTimeout: REQUEST_TIMEOUT_MS, return503OnClosing: true });
    refuseBadHostHeader(app, shape);
    // A client that half-closes once its request is sent still waits for the answer.
    answerHalfClosedClients(app);
    // Another site's page must not spend the routes' credentials through the user's browser.
    refuseOtherHosts(app, (reply, message) => apiError(reply, protocolOf(reply.request.url), 403, 'permission_error', message));
    app.addHook('onRequest', async (req, reply) => {
      const protocol = protocolOf(req.url);
      const why = crossSite(req.headers);
      if (why !== undefined) return apiError(reply, protocol, 403, 'permission_error', `${why}: the capture gateway answers this machine's programs, not web pages`);
      // A browser sends any other type across sites without asking first (a CORS "simple" request).
      if (req.method === 'POST' && mediaType(req.headers) !== 'application/json') {
        return apiError(reply, protocol, 415, 'invalid_request_error', `the request body must be JSON sent as Content-Type: application/json, not ${JSON.stringify(mediaType(req.headers) || 'none')}`);
      }
      return undefined;
    });
    // At shutdown, calls the grace cuts are told apart from clients that left.
    app.addHook('preClose', async () => {
      this.stopping = true;
    });
    app.removeAllContentTypeParsers();
    // The body is read decoded (a compressed request is forwarded uncompressed): its JSON picks the route.
    app.addContentTypeParser('*', boundedBody(REQUEST_LIMITS, (raw) => raw));
    app.addHook('onResponse', async (req, reply) => this.log.info(`capture: ${req.method} ${shownTarget(req.url)} ${reply.statusCode} ${reply.elapsedTime.toFixed(1)}ms`));
    app.setErrorHandler((error, req, reply) => {
      const status = (error as { statusCode?: number }).statusCode;
      const protocol = protocolOf(req.url);
      if (typeof status === 'number' && status >= 400 && status < 500) return apiError(reply, protocol, status, 'invalid_request_error', (error as Error).message);
      this.log.error(`capture: ${req.method} ${shownTarget(req.url)}: ${(error as Error).stack ?? String(error)}`);
      return apiError(reply, protocol, 500, 'api_error', 'internal error of the capture gateway (see its log)');
    });
    app.setNotFoundHandler((req, reply) => apiError(reply, 'openai-chat', 404, 'invalid_request_error', `the capture gateway has no route ${req.method} ${req.url.split('?')[0]}`));
    for (const path of ['/v1/chat/completions', '/chat/completions']) app.post(path, (req, reply) => this.handle(req, reply, 'openai-chat', path));
    app.post('/v1/messages', (req, reply) => this.handle(req, reply, 'anthropic-messages', '/v1/messages'));
    app.get('/v1/models', async () => ({ object: 'list', data: this.config.routes.filter((r) => !r.name.includes('*')).map((r) => ({ id: r.name, object: 'model', created: 0, owned_by: 'trajstore-gateway' })) }));
    return app;
  }

  private async handle(req: FastifyRequest, reply: FastifyReply, protocol: Protocol, path: string): Promise<FastifyReply | void> {
    const started = performance.now();
    const query = queryOf(req.url, path);
    if (query === undefined) {
      return apiError(reply, protocol, 400, 'invalid_request_error', `the request target must be ${path}, with a query or not, spelled as it is (no fragment, dot segments, percent-encoding or absolute form), not ${JSON.stringify(shownTarget(req.url.split('?')[0]!))}`);
    }
    const raw = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
    // As the event gateway's rule: a call nested deeper could not be recorded (its walks run out of stack).
    if (jsonDepthExceeds(raw, MAX_JSON_DEPTH)) return apiError(reply, protocol, 400, 'invalid_request_error', `the request body nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels`);
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(raw.toString('utf8')) as Record<string, unknown>;
    } catch {
      return apiError(reply, protocol, 400, 'invalid_request_error', 'the request body is not JSON');
    }
    if (typeof body !== 'object' || body === null || Array.isArray(body) || typeof body.model !== 'string' || body.model === '') {
      return apiError(reply, protocol, 400, 'invalid_request_error', 'the request needs a "model"');
    }
    if (body.model.length > MAX_MODEL_CHARS) return apiError(reply, protocol, 400, 'invalid_request_error', `the model name is ${body.model.length} characters; at most ${MAX_MODEL_CHARS}`);
    const choice = chooseRoute(this.config.routes, body.model);
    if (!choice) return apiError(reply, protocol, 404, 'not_found_error', `no route of the capture gateway matches the model ${JSON.stringify(body.model)}`);
    const base = protocol === 'anthropic-messages' ? (choice.target.upstreamAnthropic ?? (choice.target.provider === 'anthropic' ? choice.target.upstream : undefined)) : (choice.target.upstream ?? choice.target.upstreamAnthropic);
    if (!base) return apiError(reply, protocol, 400, 'invalid_request_error', `the route ${JSON.stringify(choice.target.name)} has no upstream for ${protocol === 'anthropic-messages' ? 'Anthropic messages (upstream_anthropic)' : 'chat completions (upstream)'}`);
    const sent = choice.rewritten ? Buffer.from(JSON.stringify({ ...body, model: choice.modelSent }), 'utf8') : raw;
    const call: Call = {
      id: randomUUID(),
      protocol,
      agentId: segmentOf(req.headers[AGENT_HEADER]) ?? this.config.agentId,
      sessionId: segmentOf(req.headers[this.config.sessionHeader]) ?? DEFAULT_SESSION,
      user: segmentOf(req.headers[USER_HEADER]),
      choice,
      modelRequested: body.model,
      stream: body.stream === true,
      startedAt: new Date().toISOString(),
      started,
      scrub: scrubber([...this.routeSecrets, ...clientSecrets(req.headers)]),
    };
    this.counters.calls += 1;
    this.counters.inFlight += 1;
    reply.hijack();
    this.forward(call, upstreamUrl(base, path + query), forwardHeaders(req.headers, this.ownHeaders, choice.target, protocol, sent.length), sent, body, reply.raw);
    // Off the call's path: the user's text of a live Markdown session.
    setImmediate(() => {
      try {
        this.state.markdown(call.scrub, call.agentId, call.sessionId, `## ${call.startedAt} user (${call.modelRequested}${choice.rewritten ? ` -> ${choice.modelSent}` : ''})`, contentTextOf(requestFacts({ http: { request_body: body } }).user));
      } catch (error) {
        this.log.warn(`capture: the Markdown of session ${call.sessionId}: ${call.scrub((error as Error).message)}`);
      }
    });
  }

  /**
   * Sends a call upstream and its answer to the client, and records it once, however it ends: the
   * answer ended; the upstream could not be reached, answered no valid HTTP status, left part-way
   * or sent nothing for `upstream_timeout`; the client left; the gateway stopped. Every listener is
   * guarded: what one throws ends the call (a 502 when the client has no answer yet), never the process.
   */
  private forward(call: Call, url: URL, headers: OutgoingHttpHeaders, sent: Buffer, body: Record<string, unknown>, client: ServerResponse): void {
    const { started, protocol } = call;
    const upstreamName = `the upstream of route ${JSON.stringify(call.choice.target.name)} (${url.origin})`;
    const upstream = (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, { method: 'POST', headers, agent: url.protocol === 'https:' ? this.agents.https : this.agents.http });
    let res: IncomingMessage | undefined;
    let headersAt = 0;
    let firstAt: number | undefined;
    let broken: Broken | undefined;
    let done = false;
    const timing = (): Record<string, number> => ({ ...(res ? { upstream_headers_ms: headersAt - started } : {}), ...(firstAt !== undefined ? { ttft_ms: firstAt - started } : {}), total_ms: performance.now() - started });
    const finish = (end: () => Promise<Outcome>): void => {
      if (done) return;
      done = true;
      this.active.delete(cut);
      void this.record(call, sent, body, end);
    };
    /** Ends the call before the upstream has answered: the client gets `status` in its protocol. */
    const fail = (status: number, type: string, message: string): void => {
      if (done) return;
      if (type.startsWith('upstream')) this.counters.upstreamErrors += 1;
      this.log.warn(`capture: ${message}`);
      finish(async () => ({ payload: { status, timing: timing(), response_bytes: 0, error: { type, message } }, kind: 'llm.response', failed: true }));
      upstream.destroy();
      if (client.headersSent) client.destroy();
      else client.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(errorBody(protocol, protocol === 'anthropic-messages' ? 'api_error' : type, message)));
    };
    /** Ends the call the client will not see end (it left, or the gateway is stopping). */
    const cut = (reason: string): void => {
      finish(() => cancelled(reason, timing()));
      upstream.destroy();
      client.destroy();
    };
    const guard =
      <A extends unknown[]>(listener: (...args: A) => void) =>
      (...args: A): void => {
        try {
          listener(...args);
        } catch (error) {
          this.log.error(`capture: the call ${call.id}: ${call.scrub((error as Error).stack ?? String(error))}`);
          try {
            fail(502, 'gateway_error', 'the capture gateway failed on this call (see its log)');
          } catch {
            upstream.destroy();
            client.destroy();
          }
        }
      };
    this.active.add(cut);

    upstream.on('response', guard((answer: IncomingMessage) => {
      if (done) {
        answer.destroy();
        return;
      }
      const status = answer.statusCode ?? 0;
      // Node's parser takes 000-099: no client could read them as an answer.
      if (status < 200 || status > 599) {
        answer.destroy();
        return fail(502, 'upstream_invalid', `${upstreamName} answered the invalid status ${status}`);
      }
      res = answer;
      headersAt = performance.now();
      const out: OutgoingHttpHeaders = {};
      const stops = hopByHop(answer.headers);
      for (const [name, value] of Object.entries(answer.headers)) if (value !== undefined && (!stops(name) || name === 'content-length')) out[name] = value;
      client.writeHead(status, out);
      client.flushHeaders();
      const read = new AnswerReader(protocol, /^text\/event-stream/i.test(String(answer.headers['content-type'] ?? '')), String(answer.headers['content-encoding'] ?? '').toLowerCase() || undefined);
      answer.on('error', () => {}); // the upstream cut short: 'close' below records it
      answer.on('data', guard((chunk: Buffer) => {
        firstAt ??= performance.now();
        if (!client.write(chunk)) {
          answer.pause();
          client.once('drain', () => answer.resume());
        }
        read.push(chunk);
      }));
      answer.on('end', guard(() => {
        client.end();
        const t = timing();
        finish(() => this.answered(call, answer, read, t));
      }));
      answer.on('close', guard(() => {
        if (done) return;
        // The upstream went away part-way, or was cut for its silence.
        const t = timing();
        finish(() => this.answered(call, answer, read, t, broken ?? { type: 'upstream_closed', message: 'the upstream closed the connection before the answer ended' }));
        client.destroy();
      }));
    }));
    // A 101 answer: Node hands over the socket here, or closes it when nobody listens.
    upstream.on('upgrade', guard((_answer: IncomingMessage, socket: Socket) => {
      socket.destroy();
      fail(502, 'upstream_invalid', `${upstreamName} answered the status 101 (Switching Protocols)`);
    }));
    upstream.setTimeout(this.config.upstreamTimeoutMs, guard(() => {
      if (done) return;
      const message = `${upstreamName} sent nothing for ${this.config.upstreamTimeoutMs / 1000} s`;
      if (!res) return fail(504, 'upstream_timeout', message);
      broken = { type: 'upstream_timeout', message };
      this.log.warn(`capture: ${message}`);
      upstream.destroy();
    }));
    upstream.on('error', guard((error: Error) => {
      if (!res) fail(502, 'upstream_unreachable', `${upstreamName} could not be reached: ${(error as NodeJS.ErrnoException).code ?? error.message}`);
    }));
    upstream.on('close', guard(() => {
      if (!res) fail(502, 'upstream_invalid', `${upstreamName} closed the connection without an answer`);
    }));
    client.on('close', guard(() => {
      if (done || client.writableFinished) return;
      cut(this.stopping ? 'the gateway stopped before the answer ended' : `the client closed the connection before ${res ? 'the answer ended' : 'the upstream answered'}`);
    }));
    upstream.end(sent);
  }

  /** Records a call's two events (its request, then its end), after the fact, in the log; tracked for close(). */
  private record(call: Call, sent: Buffer, body: Record<string, unknown>, end: () => Promise<Outcome>): Promise<void> {
    this.counters.inFlight -= 1;
    const work = (async () => {
      const outcome = await end();
      const request = this.requestPayload(call, sent, body);
      const seq = this.allocate(call, 2);
      const common = { source: CAPTURE_SOURCE, call_id: call.id, agent_id: call.agentId, session_id: call.sessionId, producer: 'trajstore serve --gateway-config' };
      const records: EventRecord[] = [
        { ...common, seq, kind: 'llm.request', timestamp: call.startedAt, payload: request },
        { ...common, seq: seq + 1, kind: outcome.kind, timestamp: new Date().toISOString(), payload: outcome.payload },
      ].map((r) => ({ ...r, payload: scrubJson(r.payload, call.scrub) }) as EventRecord);
      await this.gateway.append({ agentId: call.agentId, sessionId: call.sessionId, user: call.user, records, mustTake: true });
      const at = new Date().toISOString();
      this.log.info(`capture: ${call.protocol} ${call.choice.matched.name} ${call.modelRequested}${call.choice.rewritten ? ` -> ${call.choice.modelSent}` : ''} session ${call.sessionId}: ${outcome.kind} ${String(outcome.payload.status ?? '-')} ${Math.round(performance.now() - call.started)}ms`);
      this.state.called(call.agentId, call.sessionId, call.choice.modelSent, outcome.failed, at);
      this.state.debug(call.scrub, { at, call_id: call.id, agent_id: call.agentId, session_id: call.sessionId, route: call.choice.matched.name, model_requested: call.modelRequested, model_sent: call.choice.modelSent, kind: outcome.kind, status: outcome.payload.status, timing: outcome.payload.timing, request_bytes: sent.length, response_bytes: outcome.payload.response_bytes }, sent, outcome.answer);
    })().catch((error: unknown) => {
      this.counters.captureFailures += 1;
      this.log.error(`capture: the call ${call.id} of session ${call.sessionId} could not be recorded: ${call.scrub((error as Error).message)}`);
    });
    this.writes.add(work);
    void work.finally(() => this.writes.delete(work));
    return work;
  }

  /** `count` consecutive seqs of the call's session, after every seq the session has in the log. */
  private allocate(call: Call, count: number): number {
    const key = `${call.agentId}/${call.sessionId}`;
    const known = this.gateway.events.get({ agentId: call.agentId, sessionId: call.sessionId })?.seqs.get(CAPTURE_SOURCE)?.last ?? -1;
    const next = Math.max(this.nextSeq.get(key) ?? 0, known + 1);
    this.nextSeq.set(key, next + count);
    return next;
  }

  private requestPayload(call: Call, sent: Buffer, body: Record<string, unknown>): Record<string, unknown> {
    const level = this.config.captureLevel;
    const payload: Record<string, unknown> = {
      protocol: call.protocol,
      route: call.choice.matched.name,
      model: call.modelRequested,
      model_sent: call.choice.modelSent,
      model_rewritten: call.choice.rewritten,
      stream: call.stream,
      request_bytes: sent.length,
      capture_level: level,
    };
    if (level === 'summary') return payload;
    const facts = requestFacts({ http: { request_body: body } });
    if (facts.user !== undefined) payload.user_content = facts.user;
    if (facts.system !== undefined) payload.system = facts.system;
    if (facts.toolResults.length > 0) payload.tool_results = facts.toolResults.map((r) => ({ call_id: r.callId, content: r.content, ...(r.isError ? { is_error: true } : {}) }));
    if (level === 'full') payload.http = { method: 'POST', path: call.protocol === 'anthropic-messages' ? '/v1/messages' : '/v1/chat/completions', request_body: body, headers_redacted: true };
    return payload;
  }

  private async answered(call: Call, res: IncomingMessage, reader: AnswerReader, timing: Record<string, number>, broken?: Broken): Promise<Outcome> {
    const status = res.statusCode ?? 0;
    const answer = await reader.result();
    const failed = status >= 400 || broken !== undefined;
    if (status >= 400 || broken?.type === 'upstream_timeout') this.counters.upstreamErrors += 1;
    const level = this.config.captureLevel;
    const payload: Record<string, unknown> = { status, timing, response_bytes: reader.bytes, ...(reader.truncated ? { truncated: true } : {}) };
    if (answer) {
      const facts = responseFacts({ http: { response_body: answer } });
      if (facts.model !== undefined) payload.model = facts.model;
      if (facts.usage !== undefined) payload.usage = facts.usage;
      if (facts.finish !== undefined) payload.finish_reason = facts.finish;
      if (level !== 'summary' && status < 400) {
        payload.assistant_content = facts.text;
        if (facts.reasoning !== undefined) payload.reasoning_content = facts.reasoning;
        if (facts.calls.length > 0) payload.tool_calls = facts.calls.map((c) => ({ id: c.id, name: c.name, arguments: c.args }));
      }
      if (level === 'full') payload.http = { status, headers: recordedHeaders(res.headers), response_body: answer, headers_redacted: true };
    }
    if (status >= 400) {
      // An error that is not JSON (a proxy's HTML page) is kept as its text.
      const body = level === 'summary' ? undefined : answer ? (answer.error ?? answer) : reader.text() || undefined;
      payload.error = { type: 'upstream_error', ...(body !== undefined ? { body } : {}) };
    }
    if (broken !== undefined) payload.error = broken;
    const text = payload.assistant_content;
    if (typeof text === 'string' || status >= 400) {
      this.state.markdown(call.scrub, call.agentId, call.sessionId, `### assistant (${String(payload.model ?? call.choice.modelSent)}, status ${status})`, typeof text === 'string' ? text : JSON.stringify(payload.error));
    }
    return { payload, kind: reader.streamed ? 'llm.response.stream' : 'llm.response', failed, ...(answer ? { answer: Buffer.from(JSON.stringify(answer)) } : {}) };
  }

  /** Cuts the calls still under way (the listener is closed: their clients are gone) and waits for the recording of every call. */
  async close(): Promise<void> {
    for (const cut of [...this.active]) cut('the gateway stopped before the answer ended');
    while (this.writes.size > 0) await Promise.all([...this.writes]);
    this.agents.http.destroy();
    this.agents.https.destroy();
  }
}

/** Why an answer under way ended early: the upstream left, or sent nothing for too long. */
interface Broken {
  type: 'upstream_closed' | 'upstream_timeout';
  message: string;
}

interface Outcome {
  payload: Record<string, unknown>;
  kind: string;
  failed: boolean;
  answer?: Buffer;
}

/** The end of a call the client left before its answer ended. */
async function cancelled(reason: string, timing: Record<string, number>): Promise<Outcome> {
  return { payload: { timing, reason }, kind: 'http.cancel', failed: true };
}

function contentTextOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map((p) => (typeof p === 'object' && p !== null && typeof (p as { text?: unknown }).text === 'string' ? (p as { text: string }).text : '')).join('\n');
  return '';
}
