/**
 * How a node answers the streams arriving on its listener: a table from method and path to
 * handler. A path not in the table answers 404, a method the path does not take 405.
 */
import type http2 from 'node:http2';
import { ActorError, STATUS_OF, errorMessage, knownCode } from '../core/errors.js';

export interface Request {
  stream: http2.ServerHttp2Stream;
  headers: http2.IncomingHttpHeaders;
  /** The path without its query. */
  path: string;
  /** Only for routes reached after the URL was parsed (exact routes whose request carried a query). */
  query: URLSearchParams | undefined;
}

export type Handler = (request: Request) => void;

/** Handlers of one path by method. */
type Methods = Map<string, Handler>;

export class RouteTable {
  private readonly exact = new Map<string, Methods>();
  private readonly prefixes: Array<[string, Methods]> = [];

  /** `path` exactly, for each of `methods`. */
  on(methods: readonly string[], path: string, handler: Handler): this {
    const entry = this.exact.get(path) ?? new Map<string, Handler>();
    for (const method of methods) entry.set(method, handler);
    this.exact.set(path, entry);
    return this;
  }

  /** Every path under `prefix` (which ends with `/`), for each of `methods`. */
  under(methods: readonly string[], prefix: string, handler: Handler): this {
    this.prefixes.push([prefix, new Map(methods.map((m) => [m, handler]))]);
    return this;
  }

  /** The listener's stream handler: whatever one request brings, a throw here must not end the node. */
  readonly dispatch = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void => {
    try {
      this.route(stream, headers);
    } catch (error) {
      if (!stream.destroyed) refuseWithError(stream, error);
    }
  };

  private route(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void {
    const method = headers[':method'] ?? 'GET';
    const raw = headers[':path'] ?? '/';
    // Calls are the hot path: their paths carry no query, so they are matched on the raw path and skip URL parsing.
    let path = raw;
    let query: URLSearchParams | undefined;
    let methods = this.exact.get(raw) ?? this.prefixes.find(([prefix]) => raw.startsWith(prefix))?.[1];
    if (!methods) {
      ({ path, query } = splitTarget(raw));
      methods = this.exact.get(path);
    }
    if (!methods) return refuse(stream, 404, { error: { code: 'not-found', message: `no route ${path}` } });
    const handler = methods.get(method);
    if (!handler) return refuse(stream, 405, { error: { code: 'bad-request', message: `${method} not allowed on ${path}; use ${[...methods.keys()][0]}` } });
    handler({ stream, headers, path, query });
  }
}

/**
 * A request target's path and query, split by hand: `new URL()` throws on targets a client may
 * send (`//[::1` reads as a host), and a throw here would end the node. Routes match paths exactly,
 * so nothing else of URL parsing is wanted.
 */
export function splitTarget(target: string): { path: string; query: URLSearchParams } {
  // The absolute form (`http://host/health`, as proxies send) names its path after the authority.
  const raw = target.replace(/^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i, '');
  const end = raw.search(/[?#]/);
  if (end < 0) return { path: raw, query: new URLSearchParams() };
  const hash = raw.indexOf('#', end);
  return { path: raw.slice(0, end), query: new URLSearchParams(raw[end] === '?' ? raw.slice(end + 1, hash < 0 ? undefined : hash) : '') };
}

/** A JSON reply, unless the stream is already answered or gone. */
export function respond(stream: http2.ServerHttp2Stream, status: number, body: unknown, headers: http2.OutgoingHttpHeaders = {}): void {
  respondJson(stream, status, JSON.stringify(body), headers);
}

/** A reply whose JSON is already encoded. */
export function respondJson(stream: http2.ServerHttp2Stream, status: number, json: string, headers: http2.OutgoingHttpHeaders = {}): void {
  if (stream.destroyed || stream.closed || stream.headersSent) return;
  stream.respond({ ':status': status, 'content-type': 'application/json', ...headers });
  stream.end(json);
}

/**
 * An error reply to a request whose body is not read (refused before, or stopped part way): once
 * the reply is sent the stream is closed, which tells the client to stop sending the rest.
 */
export function refuse(stream: http2.ServerHttp2Stream, status: number, body: unknown): void {
  respond(stream, status, body);
  if (stream.writableFinished) stream.destroy();
  else stream.once('finish', () => stream.destroy());
}

/** `refuse` with an error: an ActorError (as readBody fails with) answers with its code's status; anything else is a bad request. */
export function refuseWithError(stream: http2.ServerHttp2Stream, error: unknown): void {
  const e = error instanceof ActorError ? error : new ActorError('bad-request', errorMessage(error));
  const code = knownCode(e.code);
  refuse(stream, STATUS_OF[code], { error: { code, message: e.message } });
}
