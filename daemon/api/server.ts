/**
 * The lifecycle API under `/v1` (fastify + TypeBox) and, on the same listener, the data-plane
 * proxy, which is served before fastify sees the request so that bodies stream untouched.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { boundedBody, strictJsonBody, type BodyLimits } from '../../lib/bounded-body.js';
import { answerHalfClosedClients } from '../../lib/client-gone.js';
import { ResourceLimitError } from '../../lib/errors.js';
import { isOutOfDescriptors } from '../../lib/http-limits.js';
import type { Logger } from '../../lib/log.js';
import { hostHeaderFault, protocolErrorOptions, refuseBadHostHeader, type ErrorShape } from '../../lib/protocol-errors.js';
import { invalid, isOutOfSpace, LifecycleError, notSupported, outOfDescriptors, outOfSpace } from '../service/errors.js';
import { cpuMillis, memoryBytes } from '../service/quantity.js';
import type { ListQuery, MetadataPair, SandboxService } from '../service/sandboxes.js';
import { schemaError } from '../../lib/schema-error.js';
import { secretEquals } from '../../lib/secret.js';
import { keyMissing } from './credentials.js';
import { PROXY_PATH, proxyHandler, STREAM_HIGH_WATER_MARK } from './proxy.js';
import { createdView, sandboxView } from './render.js';
import { CreateSandboxBody, RenewBody, UNSUPPORTED_FIELDS } from './schemas.js';

const BODY_LIMIT = 1 << 20;
/** Lifecycle bodies: 1 MiB (decoded), read and dropped up to 8 MiB, all sent within 30 s. */
const BODY_LIMITS: BodyLimits = { maxBytes: BODY_LIMIT, drainBytes: 8 * BODY_LIMIT, timeoutMs: 30_000 };
const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]*$/;
const MAX_PAGE_SIZE = 200;

function fail(reply: FastifyReply, error: LifecycleError): FastifyReply {
  return reply.code(error.status).send({ code: error.code, message: error.message });
}

/** A query parameter given at most once. */
function once(query: URLSearchParams, name: string): string | undefined {
  const values = query.getAll(name);
  if (values.length > 1) throw invalid(`${name}: given ${values.length} times`);
  return values[0];
}

function positive(query: URLSearchParams, name: string, fallback: number, max?: number): number {
  const text = once(query, name);
  if (text === undefined) return fallback;
  if (!/^\d{1,9}$/.test(text) || Number(text) < 1) throw invalid(`${name}: ${JSON.stringify(text)} must be a positive integer`);
  if (max !== undefined && Number(text) > max) throw invalid(`${name}: ${text} is above the maximum of ${max}`);
  return Number(text);
}

/** A form-encoded component read as Python's parse_qsl reads it: `+` is a space, a malformed `%` stays as it is. */
function formDecoded(text: string): string {
  return text.replace(/\+/g, ' ').replace(/(%[0-9A-Fa-f]{2})+/g, (run) => Buffer.from(run.replace(/%/g, ''), 'hex').toString('utf8'));
}

/**
 * The metadata filter: one `k=v&k2=v2` string. The SDK joins the pairs unescaped, while the
 * protocol's own example escapes them once more; so each pair is read both ways (as sent, and
 * decoded) and a record matches it when it matches either reading.
 */
function metadataFilter(text: string | undefined): MetadataPair[][] {
  if (text === undefined || text === '') return [];
  return text.split('&').map((part) => {
    const eq = part.indexOf('=');
    if (eq <= 0) throw new LifecycleError(400, 'INVALID_METADATA_FORMAT', `metadata: ${JSON.stringify(part)} is not key=value`);
    const literal: MetadataPair = [part.slice(0, eq), part.slice(eq + 1)];
    return [literal, [formDecoded(literal[0]), formDecoded(literal[1])]];
  });
}

export function listQuery(rawUrl: string): ListQuery {
  const query = new URL(rawUrl, 'http://x').searchParams;
  return {
    states: query.getAll('state'),
    metadata: metadataFilter(once(query, 'metadata')),
    page: positive(query, 'page', 1),
    pageSize: positive(query, 'pageSize', 20, MAX_PAGE_SIZE),
  };
}

function createInput(body: CreateSandboxBody) {
  for (const field of UNSUPPORTED_FIELDS) if (body[field] !== undefined && body[field] !== null) throw notSupported(`${field} is not supported by this daemon`);
  if (body.secureAccess === true) throw notSupported('secureAccess: true is not supported (endpoints carry a sandbox token instead)');
  if (body.extensions && Object.keys(body.extensions).length > 0) throw notSupported('extensions are not supported');
  if (!body.image) throw invalid('image: required (image.uri names a prepared image)');
  if (body.image.auth !== undefined && body.image.auth !== null) throw notSupported('image.auth: registry authentication is not supported (images are prepared locally)');
  if (body.platform !== undefined && body.platform !== null) {
    const p = body.platform as { os?: unknown; arch?: unknown };
    if (p.os !== 'linux' || p.arch !== 'amd64') throw notSupported('platform: only linux/amd64 runs here');
  }
  const env = body.env ?? {};
  for (const [key, value] of Object.entries(env)) {
    if (!ENV_KEY.test(key)) throw invalid(`env: ${JSON.stringify(key)} is not a variable name`);
    // The guest could not start a process with it, and would only say so by timing out.
    if (value.includes('\0')) throw invalid(`env: the value of ${key} must not contain NUL`);
  }
  for (const arg of body.entrypoint) if (arg.includes('\0')) throw invalid('entrypoint: arguments must not contain NUL');
  if (body.entrypoint[0] === '') throw invalid('entrypoint[0] must not be empty');
  const size = [...body.entrypoint, ...Object.entries(env).flat()].reduce((n, s) => n + Buffer.byteLength(s) + 1, 0);
  if (size > 65536) throw invalid(`entrypoint and env: ${size} bytes, above 65536`);
  return {
    image: body.image.uri,
    entrypoint: body.entrypoint,
    env,
    metadata: body.metadata ?? {},
    cpuMillis: cpuMillis(body.resourceLimits.cpu),
    memoryBytes: memoryBytes(body.resourceLimits.memory),
    ...(body.timeout === undefined || body.timeout === null ? {} : { timeout: body.timeout }),
  };
}

/** A route's path (`/v1/sandboxes/:id`) as an anchored pattern of the paths it serves. */
function routePattern(url: string): RegExp {
  const parts = url.split('/').map((part) => (part.startsWith(':') ? '[^/]+' : part === '*' ? '.*' : part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
  return new RegExp(`^${parts.join('/')}$`);
}

/** Codes of client errors that are not INVALID_REQUEST. */
const CLIENT_CODES: Record<number, string> = { 408: 'REQUEST_TIMEOUT', 413: 'PAYLOAD_TOO_LARGE' };

export interface ApiOptions {
  service: SandboxService;
  apiKey: string;
  /** Where an unexpected error is told in full (the client gets only "internal error"). */
  log: Logger;
}

export function buildApi({ service, apiKey, log }: ApiOptions): FastifyInstance {
  const keyMatches = (key: string): boolean => secretEquals(key, apiKey);
  const proxy = proxyHandler(service, keyMatches);
  const shape: ErrorShape = (status, code, message) => ({ code: status === 400 ? 'INVALID_REQUEST' : code.toUpperCase(), message });
  const requestId = (): Record<string, string> => ({ 'x-request-id': randomUUID() });
  const app = Fastify({
    ...protocolErrorOptions(shape, requestId),
    schemaErrorFormatter: schemaError,
    bodyLimit: BODY_LIMITS.drainBytes,
    genReqId: () => randomUUID(),
    ajv: { customOptions: { removeAdditional: false, coerceTypes: false, useDefaults: false, allErrors: false } },
    serverFactory: (handler) => {
      const server = createServer({ requestTimeout: 0, headersTimeout: 60_000, highWaterMark: STREAM_HIGH_WATER_MARK }, (req: IncomingMessage, res: ServerResponse) => {
        const match = PROXY_PATH.exec(req.url ?? '');
        // A request without one Host goes to fastify, whose hook refuses it (Node's own check is off).
        if (match && hostHeaderFault(req) === undefined) return void proxy(req, res, match);
        handler(req, res);
      });
      // WebSocket and CONNECT are not routed.
      const refuse = (req: IncomingMessage, socket: Duplex): void => {
        const body = JSON.stringify({ code: 'NOT_IMPLEMENTED', message: req.method === 'CONNECT' ? 'CONNECT is not supported' : 'WebSocket upgrades are not supported' });
        socket.end(`HTTP/1.1 501 Not Implemented\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nX-Request-ID: ${randomUUID()}\r\nConnection: close\r\n\r\n${body}`);
      };
      server.on('upgrade', refuse);
      server.on('connect', refuse);
      return server;
    },
  });

  refuseBadHostHeader(app, shape, requestId);
  // A client that half-closes once its request is sent (`nc -N`, a socket's end()) still waits for
  // its answer: a creator must learn its sandbox's id. Nothing here is cancelled when a client leaves
  // (an accepted operation runs to its end); the data plane tells one that left (proxy.ts).
  answerHalfClosedClients(app);
  // JSON only: any other body is 415, not parsed as something else. Read decoded, refused after
  // being read (so a client still sending gets the answer), and within BODY_TIMEOUT_MS: the server
  // itself sets no request timeout, as proxied uploads may take long. An empty body is no body, as
  // without Content-Type: generated clients label the empty body of a bodiless POST (pause, resume)
  // JSON. Routes with a body schema still require one.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', boundedBody(BODY_LIMITS, (raw) => (raw.length === 0 ? undefined : strictJsonBody(raw))));

  app.addHook('onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
    reply.header('x-request-id', request.id);
    const keys = request.raw.headersDistinct['svc-api-key'];
    if (!keys || !keys[0]) return reply.code(401).send({ code: 'UNAUTHORIZED', message: keyMissing('the SVC-API-KEY header is required', request.headers) });
    if (keys.length !== 1) return reply.code(401).send({ code: 'UNAUTHORIZED', message: `the SVC-API-KEY header must be sent once, not ${keys.length} times` });
    if (!keyMatches(keys[0])) return reply.code(401).send({ code: 'UNAUTHORIZED', message: 'the SVC-API-KEY header is not valid' });
  });

  app.setErrorHandler((error: Error & { statusCode?: number; code?: string; validation?: unknown }, request, reply) => {
    if (error instanceof LifecycleError) return fail(reply, error);
    if (error instanceof ResourceLimitError) return reply.code(429).send({ code: 'CAPACITY_EXCEEDED', message: error.message });
    if (error.validation) return reply.code(400).send({ code: 'INVALID_REQUEST', message: error.message });
    if (isOutOfDescriptors(error)) {
      // Not a fault of the daemon: what failed left the durable state as it was (or recorded an intent that maintenance finishes).
      const what = `${request.method} ${request.url.split('?')[0]}`;
      log.warn(`sandboxd: ${what} (request ${request.id}): ${error.message}`);
      return fail(reply, outOfDescriptors(what));
    }
    // Nor is a full disk: the registry's writes are all or nothing, so the refused change left no trace.
    if (isOutOfSpace(error)) return fail(reply, outOfSpace(`${request.method} ${request.url.split('?')[0]}`));
    const status = error.statusCode ?? 500;
    if (error.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') return reply.code(415).send({ code: 'INVALID_REQUEST', message: `the body must be JSON, sent with Content-Type: application/json (this request's: ${JSON.stringify(request.headers['content-type'] ?? 'none').slice(0, 100)})` });
    if (status >= 400 && status < 500) return reply.code(status).send({ code: CLIENT_CODES[status] ?? 'INVALID_REQUEST', message: error.message });
    log.error(`sandboxd: ${request.method} ${request.url.split('?')[0]} (request ${request.id}): ${error.stack ?? String(error)}`);
    return reply.code(500).send({ code: 'INTERNAL_ERROR', message: 'internal error' });
  });
  // Each route's path as a pattern, so that a known path asked with another method is 405, as the
  // reference daemon answers, not 404 (fastify routes by method first).
  const routes: { pattern: RegExp; methods: string[] }[] = [];
  app.addHook('onRoute', (route) => void routes.push({ pattern: routePattern(route.url ?? route.path), methods: [route.method].flat() }));
  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0]!;
    const allowed = [...new Set(routes.filter((route) => route.pattern.test(path)).flatMap((route) => route.methods))];
    if (allowed.length === 0) return reply.code(404).send({ code: 'NOT_FOUND', message: `no route ${request.method} ${path}` });
    return reply.code(405).header('allow', allowed.join(', ')).send({ code: 'METHOD_NOT_ALLOWED', message: `${request.method} is not allowed on ${path} (allowed: ${allowed.join(', ')})` });
  });

  app.post<{ Body: CreateSandboxBody }>('/v1/sandboxes', { schema: { body: CreateSandboxBody } }, async (request, reply) => {
    const record = await service.create(createInput(request.body));
    return reply.code(202).header('location', `/v1/sandboxes/${record.id}`).send(createdView(record));
  });
  app.get('/v1/sandboxes', async (request, reply) => {
    const query = listQuery(request.url);
    const { items, totalItems } = service.list(query);
    const totalPages = Math.ceil(totalItems / query.pageSize);
    return reply.send({ items: items.map(sandboxView), pagination: { page: query.page, pageSize: query.pageSize, totalItems, totalPages, hasNextPage: query.page < totalPages } });
  });
  app.get<{ Params: { id: string } }>('/v1/sandboxes/:id', async (request) => sandboxView(await service.get(request.params.id)));
  app.delete<{ Params: { id: string } }>('/v1/sandboxes/:id', async (request, reply) => {
    await service.delete(request.params.id);
    return reply.code(204).header('content-length', '0').send();
  });
  for (const op of ['pause', 'resume'] as const) {
    app.post<{ Params: { id: string } }>(`/v1/sandboxes/:id/${op}`, async (request, reply) => {
      await service.control(request.params.id, op);
      // An empty 202 must say so: the SDK parses any other 2xx body as JSON.
      return reply.code(202).header('content-length', '0').send('');
    });
  }
  app.post<{ Params: { id: string }; Body: RenewBody }>('/v1/sandboxes/:id/renew-expiration', { schema: { body: RenewBody } }, async (request) => ({
    expiresAt: await service.renew(request.params.id, request.body.expiresAt),
  }));
  app.get<{ Params: { id: string; port: string } }>('/v1/sandboxes/:id/endpoints/:port', async (request) => {
    const query = new URL(request.url, 'http://x').searchParams;
    if (query.has('expires')) throw invalid('expires: signed endpoints are not supported');
    const flag = once(query, 'use_server_proxy') ?? 'false';
    if (flag !== 'true' && flag !== 'false') throw invalid(`use_server_proxy: ${JSON.stringify(flag)} must be true or false`);
    const { port } = request.params;
    if (!/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535) throw invalid(`port: ${JSON.stringify(port)} is not a port number`);
    return service.endpoint(request.params.id, Number(port), flag === 'true');
  });
  const unsupported = async (): Promise<never> => {
    throw new LifecycleError(501, 'NOT_IMPLEMENTED', 'not implemented by this daemon');
  };
  app.patch('/v1/sandboxes/:id/metadata', unsupported);
  app.all('/v1/sandboxes/:id/snapshots', unsupported);
  app.all('/v1/snapshots', unsupported);
  app.all('/v1/snapshots/:id', unsupported);
  app.all('/v1/templates', unsupported);
  app.all('/v1/templates/:id', unsupported);
  app.post('/v1/metrics/events', unsupported);
  return app;
}
