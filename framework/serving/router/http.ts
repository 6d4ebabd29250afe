/**
 * The Router's HTTP API on fastify: `POST /v1/chat/completions` and `POST /v1/completions` (a JSON
 * object, or server-sent events with `stream: true`), `GET /v1/models` and `GET /health`.
 *
 * One request goes to one worker (pool.ts) as a stream of chunks. Nothing is sent to the client
 * before the worker's first chunk, so a request no worker can serve, or one the worker refuses,
 * still gets a proper status: 400 (OpenAI's error body, naming the field), 404 for another
 * model, 503 when no worker is alive or every one is overloaded (with when to try again). A client that disconnects, or
 * takes nothing of its stream for a minute (SEND_TIMEOUT_MS: it is then disconnected), cancels
 * the generation on its worker; one that only half-closes after its request gets its reply. When a worker dies mid-stream, the stream ends with an `error`
 * event (no `[DONE]`); a non-streamed request is retried on another worker, since nothing was sent.
 */
import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { GenerateChunk, GenerateErrorCode } from '../contract.js';
import { ChatCompletion, ChatRequest, Completion, CompletionRequest, ErrorBody, Health, ModelList, ResponseShape, errorBody, generateRequest, promptOf, requestProblem, type ApiRequest } from './openai.js';
import { MAX_CALL_DEPTH } from '../../core/codec.js';
import { isActorError } from '../../core/errors.js';
import { NoWorkerError, callFailure, type OpenedRequest, type WorkerPool } from './pool.js';
import { boundedBody, depthBoundedJsonBody, type BodyLimits } from '../../../lib/bounded-body.js';
import { answerHalfClosedClients, clientGone } from '../../../lib/client-gone.js';
import { REQUEST_TIMEOUT_MS, closeStalledAnswers } from '../../../lib/http-limits.js';
import { refuseOtherHosts } from '../../../lib/loopback-host.js';
import { protocolErrorOptions, refuseBadHostHeader, type ErrorShape } from '../../../lib/protocol-errors.js';
import { secretEquals } from '../../../lib/secret.js';
import { drained } from '../../../lib/streams.js';

export interface ApiOptions {
  modelName: string;
  pool: WorkerPool;
  /** When set, every /v1 request must carry `Authorization: Bearer <apiKey>`. */
  apiKey: string | undefined;
  /** Refuse requests whose Host is not a loopback name (a loopback listener without a key: DNS rebinding). */
  loopbackHostsOnly: boolean;
  counters: { requests: number; failed: number; cancelled: number };
  /** Where the Router says what failed on its side (answers of 500 and up, streams cut by a failure), one line each, with the request's id. */
  log: (line: string) => void;
}

/** Bodies up to 1 MiB; a larger one is read and dropped up to 8 MiB, so that its sender gets the 413. */
const BODY_LIMITS: BodyLimits = { maxBytes: 1024 * 1024, drainBytes: 8 * 1024 * 1024 };
/** Attempts of a non-streamed request whose worker fails before the end. */
const COLLECT_ATTEMPTS = 2;

/** A failed request as a status and OpenAI's error body, and for a passing failure, the seconds after which to try again. */
class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly body: ErrorBody,
    readonly retryAfterS?: number,
  ) {
    super(body.error.message);
  }
}

/**
 * When a client turned away for want of a worker should try again, in seconds, by cause. OpenAI's
 * clients retry a 503 twice by default, after the `retry-after-ms` or `retry-after` it carries (up
 * to 60 s); without either, after 0.5 s and 1 s, too soon for a worker that is still loading its model.
 * - no_worker: none is alive. A worker registers once its model is loaded, which takes seconds:
 *   twice 5 s gives a default client 10 s for one to join.
 * - overloaded: every worker's queue is full (or the Router's); a place frees as soon as any reply ends.
 */
const RETRY_AFTER_S: Record<'no_worker' | 'overloaded', number> = { no_worker: 5, overloaded: 1 };

/** The headers telling a client when to try again: `retry-after` as HTTP has it, `retry-after-ms` read first by OpenAI's clients. */
const retryAfterHeaders = (seconds: number): Record<string, string> => ({ 'retry-after': String(seconds), 'retry-after-ms': String(seconds * 1000) });

const WORKER_ERRORS: Record<GenerateErrorCode, [number, string]> = {
  invalid_request: [400, 'invalid_request_error'],
  context_length_exceeded: [400, 'invalid_request_error'],
  overloaded: [503, 'server_error'],
  internal: [500, 'server_error'],
};

function workerError(chunk: Extract<GenerateChunk, { type: 'error' }>): ApiError {
  const [status, type] = WORKER_ERRORS[chunk.code] ?? [500, 'server_error'];
  return new ApiError(status, errorBody(chunk.message, type, chunk.code === 'invalid_request' ? null : chunk.code, chunk.param || null), chunk.code === 'overloaded' ? RETRY_AFTER_S.overloaded : undefined);
}

function unavailable(error: NoWorkerError): ApiError {
  if (error.reason === 'worker_timeout') return new ApiError(504, errorBody(error.message, 'server_error', error.reason));
  return new ApiError(503, errorBody(error.message, 'server_error', error.reason), RETRY_AFTER_S[error.reason]);
}

/** `/messages/0/content` -> `messages[0].content`. */
function paramOf(path: string): string {
  return path
    .split('/')
    .filter(Boolean)
    .map((part, i) => (/^\d+$/.test(part) ? `[${part}]` : i ? `.${part}` : part))
    .join('');
}

interface ValidationError {
  keyword: string;
  instancePath: string;
  message?: string;
  params?: Record<string, unknown>;
}

/**
 * The error that tells the client most. A value that may take several forms (`stop`: a string or
 * up to 4; `content`: a string or text parts) fails each form: the first, "must be string", says
 * nothing of a list of 5 stops. The deepest path wins, then anything but the type of the first
 * form and the summary of the alternatives.
 */
function telling(errors: ValidationError[]): ValidationError | undefined {
  const vague = (error: ValidationError): number => (error.keyword === 'anyOf' || error.keyword === 'type' ? 1 : 0);
  return [...errors].sort((a, b) => b.instancePath.split('/').length - a.instancePath.split('/').length || vague(a) - vague(b))[0];
}

/** A request's id, shaped as OpenAI's (`req_` and 32 hex digits): every answer carries it in `x-request-id`, which OpenAI's clients show. */
const newRequestId = (): string => `req_${randomUUID().replaceAll('-', '')}`;

/** The value of the body at an error's `instancePath` (the schema's own field names and indexes: nothing in it is escaped). */
const valueAt = (body: unknown, path: string): unknown => path.split('/').slice(1).reduce<unknown>((value, key) => (typeof value === 'object' && value !== null ? (value as Record<string, unknown>)[key] : undefined), body);

/** A value as OpenAI's messages quote it: a string in single quotes (its first 100 characters), anything else as JSON. */
const quoted = (value: unknown): string => (typeof value === 'string' ? `'${value.slice(0, 100)}'` : String(JSON.stringify(value)));

/** `'a'`, `'a' and 'b'`, `'a', 'b', and 'c'`. */
function listed(values: unknown[]): string {
  const words = values.map(quoted);
  return words.length < 3 ? words.join(' and ') : `${words.slice(0, -1).join(', ')}, and ${words[words.length - 1]}`;
}

/** Fastify's errors (validation, bad JSON, a body that is not JSON, too large) in OpenAI's shape; anything else is a 500 that says nothing more. */
function toApiError(error: unknown, body: unknown, contentType: string | undefined): ApiError {
  if (error instanceof ApiError) return error;
  const e = error as { validation?: ValidationError[]; statusCode?: number; code?: string; message?: string };
  const first = e.validation && telling(e.validation);
  if (first) {
    if (first.keyword === 'const') {
      // A value that must be one of a few (a union of literals: one error per literal at its place) is told them all, as OpenAI does.
      const allowed = e.validation!.filter((v) => v.keyword === 'const' && v.instancePath === first.instancePath).map((v) => v.params?.allowedValue);
      const param = paramOf(first.instancePath);
      return new ApiError(400, errorBody(`Invalid value: ${quoted(valueAt(body, first.instancePath))}. Supported values are: ${listed(allowed)}.`, 'invalid_request_error', 'invalid_value', param || null));
    }
    if (first.keyword === 'additionalProperties') {
      const field = String(first.params?.additionalProperty ?? '');
      const param = paramOf(`${first.instancePath}/${field}`);
      return new ApiError(400, errorBody(`Unrecognized request argument supplied: ${param}`, 'invalid_request_error', null, param));
    }
    if (first.keyword === 'required') {
      const param = paramOf(`${first.instancePath}/${String(first.params?.missingProperty ?? '')}`);
      return new ApiError(400, errorBody(`Missing required parameter: '${param}'.`, 'invalid_request_error', 'missing_required_parameter', param));
    }
    const param = paramOf(first.instancePath);
    return new ApiError(400, errorBody(param ? `Invalid value for '${param}': ${first.message ?? 'invalid'}.` : `Invalid request body: ${first.message ?? 'invalid'}.`, 'invalid_request_error', 'invalid_value', param || null));
  }
  if (e.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
    const given = contentType ? `'${contentType.slice(0, 100)}'` : 'none';
    return new ApiError(415, errorBody(`The request body must be JSON, sent with Content-Type: application/json (this request's Content-Type: ${given}).`, 'invalid_request_error'));
  }
  if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) {
    return new ApiError(e.statusCode, errorBody(e.message ?? 'bad request', 'invalid_request_error'));
  }
  return new ApiError(500, errorBody('The server had an error while processing your request.', 'server_error'));
}

export function apiServer(options: ApiOptions): FastifyInstance {
  // Types as given are checked, never coerced ("5" is not a number), and unknown fields refused, not dropped.
  const shape: ErrorShape = (status, code, message) => errorBody(message, status >= 500 ? 'server_error' : 'invalid_request_error', code);
  const app = Fastify({
    ...protocolErrorOptions(shape, () => ({ 'x-request-id': newRequestId() })),
    genReqId: newRequestId,
    logger: false,
    bodyLimit: BODY_LIMITS.drainBytes,
    requestTimeout: REQUEST_TIMEOUT_MS,
    forceCloseConnections: true,
    ajv: { customOptions: { removeAdditional: false, coerceTypes: false, discriminator: true } },
  });
  // First, so that the other hooks' answers have it too. A stream's head, written on the raw response, adds it itself.
  app.addHook('onRequest', (req, reply, done) => {
    void reply.header('x-request-id', req.id);
    done();
  });
  refuseBadHostHeader(app, shape);
  // A client that half-closes once its request is sent (`nc -N`, a socket's end()) still waits for its reply.
  answerHalfClosedClients(app);
  // A client that stops reading its stream would otherwise hold its reply, and the worker's sequence generating it, for good.
  closeStalledAnswers(app);
  // Without a key, a loopback API is still open to a web page that re-points its own name at 127.0.0.1.
  if (options.loopbackHostsOnly) refuseOtherHosts(app, (reply, message) => reply.send(errorBody(message, 'invalid_request_error', 'forbidden_host')));
  const started = Math.floor(Date.now() / 1000);

  // Only JSON is a request here: fastify would also take a text/plain body (which a page elsewhere
  // can send from a browser without asking first), and its JSON parser answers an oversize body
  // before reading it, so a client still sending could see its connection closed, not the 413.
  app.removeAllContentTypeParsers();
  // Deeper than an actor call may nest, a body could never reach a worker (codec.ts).
  app.addContentTypeParser('application/json', boundedBody(BODY_LIMITS, depthBoundedJsonBody(MAX_CALL_DEPTH)));
  app.setErrorHandler((error, req, reply) => {
    const { status, body, retryAfterS } = toApiError(error, req.body, req.headers['content-type']);
    if (status >= 500) options.counters.failed++;
    // A 503 (no worker, or all overloaded) says all there is to say, and comes by the thousand under load; the others are what an operator looks for.
    if (status >= 500 && status !== 503) options.log(`request ${req.id} answered ${status}: ${error instanceof ApiError ? error.message : failureOf(error)}`);
    if (retryAfterS !== undefined) void reply.headers(retryAfterHeaders(retryAfterS));
    void reply.code(status).send(body);
  });
  const modelNotFound = (asked: string): ApiError =>
    new ApiError(404, errorBody(`The model '${asked.slice(0, 200)}' does not exist: this router serves '${options.modelName}'.`, 'invalid_request_error', 'model_not_found', 'model'));
  app.setNotFoundHandler((req, reply) => {
    const served = 'POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /v1/models/{model} and GET /health';
    void reply.code(404).send(errorBody(`Unknown request URL: ${req.method} ${req.url.split('?')[0]!.slice(0, 200)}. This server serves ${served}.`, 'invalid_request_error', 'unknown_url'));
  });
  // With a key, every request needs it but the health probe's (which then says less). The route a
  // request reached decides, not how its URL is spelled: `/%761/...` and `http://host/v1/...` reach
  // the /v1 routes too. A URL that reaches no route needs it as well, so the API's shape is not shown.
  const authorized = (req: FastifyRequest): boolean => {
    if (options.apiKey === undefined) return true;
    const given = /^Bearer (.+)$/i.exec(req.headers.authorization ?? '')?.[1] ?? '';
    return secretEquals(given, options.apiKey);
  };
  if (options.apiKey !== undefined) {
    app.addHook('onRequest', async (req) => {
      if (req.routeOptions.url !== '/health' && !authorized(req)) throw new ApiError(401, errorBody('Incorrect or missing API key.', 'invalid_request_error', 'invalid_api_key'));
    });
  }

  const errors = { 400: ErrorBody, 404: ErrorBody, 500: ErrorBody, 503: ErrorBody };
  const refuseUnsupported = (chat: boolean) => async (req: FastifyRequest) => {
    const problem = requestProblem(req.body, chat);
    if (problem) throw new ApiError(400, errorBody(problem.message, 'invalid_request_error', 'invalid_value', problem.param));
  };
  app.post('/v1/chat/completions', { schema: { body: ChatRequest, response: { 200: ChatCompletion, ...errors } }, preValidation: refuseUnsupported(true) }, (req, reply) => serve(req as FastifyRequest<{ Body: ChatRequest }>, reply, true));
  app.post('/v1/completions', { schema: { body: CompletionRequest, response: { 200: Completion, ...errors } }, preValidation: refuseUnsupported(false) }, (req, reply) => serve(req as FastifyRequest<{ Body: CompletionRequest }>, reply, false));
  const model = { id: options.modelName, object: 'model' as const, created: started, owned_by: 'actorctl' };
  app.get('/v1/models', { schema: { response: { 200: ModelList } } }, async (): Promise<ModelList> => ({ object: 'list', data: [model] }));
  app.get('/v1/models/:model', { schema: { response: { 200: ModelList.properties.data.items, 404: ErrorBody } } }, async (req) => {
    const { model: asked } = req.params as { model: string };
    if (asked !== options.modelName) throw modelNotFound(asked);
    return model;
  });
  app.get('/health', { schema: { response: { 200: Health, 503: Health } } }, async (req, reply) => {
    // Without the key (when there is one), the workers' addresses and loads are not shown.
    const detailed = authorized(req);
    const workers = options.pool.alive().map((w) => {
      const report = detailed ? options.pool.fresh(w) : undefined;
      return { node_id: w.nodeId, ...(detailed ? { addr: w.addr } : {}), ...(report ? { active: report.active, queued: report.queued, tokens_per_s: report.tokens_per_s } : {}) };
    });
    const body: Health = { status: workers.length ? 'ok' : 'unavailable', model: options.modelName, workers };
    return reply.code(workers.length ? 200 : 503).send(body);
  });

  async function serve(req: FastifyRequest<{ Body: ApiRequest }>, reply: FastifyReply, chat: boolean): Promise<unknown> {
    options.counters.requests++;
    const body = req.body;
    if (body.model !== options.modelName) throw modelNotFound(body.model);
    if (body.stream_options != null && body.stream !== true) {
      throw new ApiError(400, errorBody("The 'stream_options' parameter is only allowed when 'stream' is enabled.", 'invalid_request_error', 'invalid_value', 'stream_options'));
    }
    const request = generateRequest(body);
    const includeUsage = body.stream === true && body.stream_options?.include_usage === true;
    const echoed = 'prompt' in body && body.echo === true ? promptOf(body) : '';
    const shape = new ResponseShape(chat, options.modelName, includeUsage, echoed);
    // The client leaving before its reply is finished (not a half-close: clientGone tells them apart) cancels the generation.
    const gone = clientGone(reply);
    if (gone.aborted) options.counters.cancelled++;
    else gone.addEventListener('abort', () => options.counters.cancelled++, { once: true });
    if (body.stream) return stream(reply, shape, await open(request, gone));
    return collect(shape, request, gone);
  }

  /** A worker's first chunk, or the error that answers the request. */
  async function open(request: ReturnType<typeof generateRequest>, signal: AbortSignal): Promise<OpenedRequest> {
    let opened: OpenedRequest;
    try {
      opened = await options.pool.open(request, signal);
    } catch (error) {
      if (error instanceof NoWorkerError) throw unavailable(error);
      throw error;
    }
    if (opened.first.type === 'error') {
      opened.release();
      throw workerError(opened.first);
    }
    return opened;
  }

  /** The whole reply as one object; a worker that fails before the end is replaced once. */
  async function collect(shape: ResponseShape, request: ReturnType<typeof generateRequest>, signal: AbortSignal): Promise<unknown> {
    for (let attempt = 1; ; attempt++) {
      const opened = await open(request, signal);
      let text = '';
      try {
        for (let chunk: GenerateChunk | undefined = opened.first; chunk; chunk = await next(opened)) {
          if (chunk.type === 'text') {
            text += chunk.text;
            continue;
          }
          if (chunk.type === 'end') return shape.complete(text, chunk.finish_reason, chunk.usage);
          throw workerError(chunk);
        }
        throw new Error('the stream ended without an end chunk');
      } catch (error) {
        if (error instanceof ApiError || signal.aborted || attempt >= COLLECT_ATTEMPTS) throw error instanceof ApiError ? error : new ApiError(502, workerFailed(opened, error));
        opened.failed(error);
      } finally {
        opened.release();
      }
    }
  }

  /** Server-sent events: the role, text deltas, the finish reason, usage if asked for, `[DONE]`. */
  async function stream(reply: FastifyReply, shape: ResponseShape, opened: OpenedRequest): Promise<void> {
    reply.hijack();
    const events = new EventStream(reply.raw, reply.request.id);
    /** Ends the stream with an error event in place of `[DONE]`. */
    const cut = (body: ErrorBody): void => {
      options.log(`request ${reply.request.id}: stream ended by an error: ${body.error.message}`);
      events.send({ error: body.error });
    };
    try {
      if (shape.chat) events.send(shape.chunk('role'));
      if (shape.echoed) events.send(shape.chunk({ text: shape.echoed }));
      for (let chunk: GenerateChunk | undefined = opened.first; chunk && events.open; chunk = await next(opened)) {
        if (chunk.type === 'text') {
          events.send(shape.chunk({ text: chunk.text }));
          await events.writable();
        } else if (chunk.type === 'end') {
          events.send(shape.chunk({ finish: chunk.finish_reason }));
          if (shape.includeUsage) events.send(shape.usageChunk(chunk.usage));
          events.send('[DONE]');
          return;
        } else {
          cut(workerError(chunk).body);
          return;
        }
      }
      if (events.open) cut(workerFailed(opened, new Error('the stream ended without an end chunk')));
    } catch (error) {
      if (events.open) {
        opened.failed(error);
        options.counters.failed++;
        cut(workerFailed(opened, error));
      }
    } finally {
      opened.release();
      events.end();
    }
  }

  return app;
}

async function next(opened: OpenedRequest): Promise<GenerateChunk | undefined> {
  const result = await opened.rest.next();
  return result.done ? undefined : result.value;
}

/**
 * The server-sent events of one response (workers hand out text at most once per 10 ms tick, so an
 * event holds what came meanwhile). Events sent in one turn (the role and the first text; the last
 * text, the finish, usage and `[DONE]`) leave in one write: one system call here and one wake-up
 * for the client, where each took its own.
 */
class EventStream {
  /** Events sent in this turn, not yet written. */
  private pending = '';

  constructor(
    private readonly raw: ServerResponse,
    requestId: string,
  ) {
    raw.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive', 'x-accel-buffering': 'no', 'x-request-id': requestId });
  }

  /** Whether the client is still there. */
  get open(): boolean {
    return !this.raw.destroyed;
  }

  send(data: object | string): void {
    if (!this.open) return;
    if (!this.pending) process.nextTick(() => this.flush());
    this.pending += `data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;
  }

  /** Resolves when the client has taken what was written (or has gone): its pace is the worker's. */
  async writable(): Promise<void> {
    if (this.raw.writableNeedDrain && this.open) await drained(this.raw);
  }

  end(): void {
    const rest = this.take();
    if (this.open && rest) this.raw.end(rest);
    else this.raw.end();
  }

  private flush(): void {
    const events = this.take();
    if (this.open && events) this.raw.write(events);
  }

  private take(): string {
    const events = this.pending;
    this.pending = '';
    return events;
  }
}

/** An unexpected error as the log shows it: its stack (which starts with its message), else what it is. */
const failureOf = (error: unknown): string => (error instanceof Error ? (error.stack ?? error.message) : String(error));

function workerFailed(opened: OpenedRequest, error: unknown): ErrorBody {
  const what = isActorError(error) ? `it ${callFailure(error)}` : (error as Error).message;
  return errorBody(`The worker ${opened.worker} failed during generation: ${what}`, 'server_error', 'worker_failed');
}
