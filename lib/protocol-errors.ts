/**
 * Failures met before any route runs, in the listener's own error shape rather than fastify's or
 * Node's: a request that is not valid HTTP, headers too large, a request not sent in time (408), a
 * URL whose percent-encoding does not decode, a path parameter past MAX_PARAM_LENGTH. A client
 * then reads every failure of a listener the same way.
 */
import { STATUS_CODES, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

/** A failure's body in the listener's shape. */
export type ErrorShape = (status: number, code: string, message: string) => object;

/**
 * Longest path parameter: an identity of 200 characters, percent-encoded (up to 12 bytes a
 * character), with room. Fastify's default of 100 refused some names the gateway takes.
 */
const MAX_PARAM_LENGTH = 4096;

/** What a malformed request is told, by Node's error code. */
function clientFailure(code: string | undefined): [number, string, string] {
  if (code === 'ERR_HTTP_REQUEST_TIMEOUT') return [408, 'request_timeout', 'the request was not sent in time'];
  if (code === 'HPE_HEADER_OVERFLOW') return [431, 'headers_too_large', 'the request headers are larger than this server takes'];
  return [400, 'bad_request', `the request is not valid HTTP${code ? ` (${code})` : ''}`];
}

/** Fastify options that answer these failures with `shape`, and with `headers()` when the listener sets some on every answer. */
export function protocolErrorOptions(shape: ErrorShape, headers: () => Record<string, string> = () => ({})) {
  return {
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    frameworkErrors: (error: Error & { code?: string; statusCode?: number }, _req: FastifyRequest, reply: FastifyReply): void => {
      const message = error.code === 'FST_ERR_BAD_URL' ? 'the URL is not valid: its percent-encoding does not decode' : error.code === 'FST_ERR_MAX_PARAM_LENGTH' ? `a path segment is longer than ${MAX_PARAM_LENGTH} characters` : 'the request could not be routed';
      const status = error.statusCode ?? 400;
      void reply.code(status).headers(headers()).send(shape(status, status === 414 ? 'uri_too_long' : 'bad_request', message));
    },
    clientErrorHandler: (error: Error & { code?: string }, socket: Socket): void => {
      if (error.code === 'ECONNRESET' || socket.destroyed) return;
      const [status, code, message] = clientFailure(error.code);
      const body = JSON.stringify(shape(status, code, message));
      const extra = Object.entries(headers()).map(([name, value]) => `${name}: ${value}\r\n`).join('');
      if (socket.writable) socket.write(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}Connection: close\r\n\r\n${body}`);
      socket.destroy();
    },
  };
}

/**
 * What is wrong with a request's Host header, or undefined: RFC 9112 has a server answer 400 to an
 * HTTP/1.1 request without one (HTTP/1.0 has none to require) and to any request with more than one.
 * Node's `headers` keep only the first of several, so a check that reads it alone would pass them.
 */
export function hostHeaderFault(req: IncomingMessage): string | undefined {
  const hosts = req.headersDistinct.host?.length ?? 0;
  if (hosts > 1) return `the request has ${hosts} Host headers; it may have one`;
  if (hosts === 0 && req.httpVersion === '1.1') return 'the request has no Host header, which HTTP/1.1 requires';
  return undefined;
}

/**
 * Answers a request whose Host header is missing (HTTP/1.1) or repeated with 400 in the listener's
 * shape (add it before any other onRequest hook). Node would answer a missing one itself, with an
 * empty body, before fastify saw it: its check is turned off on the app's server here, so that this
 * one answers instead.
 */
export function refuseBadHostHeader(app: FastifyInstance, shape: ErrorShape, headers: () => Record<string, string> = () => ({})): void {
  // Read by Node's HTTP/1 server on each request (its option of the same name); not in its types here.
  (app.server as { requireHostHeader?: boolean }).requireHostHeader = false;
  app.addHook('onRequest', async (req, reply) => {
    const fault = hostHeaderFault(req.raw);
    if (fault !== undefined) {
      // Closed after the answer: a client that sends such a request is not one to keep a connection open for.
      return reply.code(400).headers({ ...headers(), connection: 'close' }).send(shape(400, 'bad_request', fault));
    }
  });
}
