/**
 * The data-plane proxy: `/v1/sandboxes/{id}/proxy/{port}/...` streamed both ways, with
 * backpressure, over the sandbox's hybrid vsock socket. The lifecycle key or this sandbox's token
 * only; control credentials are stripped before the guest sees the request; the guest services'
 * own tokens pass through. Upload plus upstream headers are capped at 120 s; after the headers
 * there is no total timeout (SSE and large downloads run as long as they run). A client that
 * leaves takes the upstream exchange with it (a command it ran is killed); one that only
 * half-closed after its request gets its answer (lib/client-gone.ts tells the two apart).
 */
import { randomUUID } from 'node:crypto';
import { request, type IncomingMessage, type ServerResponse, type IncomingHttpHeaders } from 'node:http';
import { pipeline } from 'node:stream';
import { clientGoneFrom } from '../../lib/client-gone.js';
import { LifecycleError } from '../service/errors.js';
import { SDK_KEY_HEADER, keyMissing } from './credentials.js';
import { SANDBOX_TOKEN_HEADER, type SandboxService } from '../service/sandboxes.js';
import { GuestExchange } from './guest-exchange.js';

export const PROXY_PATH = /^\/v1\/sandboxes\/([^/?]+)\/proxy\/([^/?]+)(\/[^?]*)?(\?.*)?$/;
export const UPSTREAM_HEADERS_TIMEOUT_MS = 120_000;
/** Larger buffers than Node's 16 KiB default: fewer, bigger writes per streamed megabyte. */
export const STREAM_HIGH_WATER_MARK = 1 << 20;
/** A body of known length from here up is bulk data (a download): sent raw (guest-exchange.ts), with TCP's coalescing. */
const BULK_BODY_BYTES = 1 << 20;
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'proxy-connection']);
const CONTROL_CREDENTIALS = new Set(['svc-api-key', SANDBOX_TOKEN_HEADER.toLowerCase(), SDK_KEY_HEADER, 'authorization', 'cookie', 'host', 'forwarded', 'x-forwarded-for', 'x-forwarded-host', 'x-forwarded-proto']);

export function sendError(res: ServerResponse, status: number, code: string, message: string): void {
  if (res.headersSent) return void res.destroy();
  const body = JSON.stringify({ code, message });
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

function forwardable(headers: IncomingHttpHeaders, drop: Set<string>): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const named = new Set((String(headers.connection ?? '')).split(',').map((h) => h.trim().toLowerCase()));
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || drop.has(name) || named.has(name)) continue;
    out[name] = value;
  }
  return out;
}

/** The length of a bulk body of this answer (a download), or undefined when it is not one. */
function bulkLength(method: string | undefined, answer: IncomingMessage): number | undefined {
  if (method === 'HEAD' || answer.statusCode === 204 || answer.statusCode === 304 || answer.headers['transfer-encoding'] !== undefined) return undefined;
  const text = answer.headers['content-length'];
  const length = text !== undefined && /^\d+$/.test(text) ? Number(text) : undefined;
  return length !== undefined && length >= BULK_BODY_BYTES ? length : undefined;
}

/** Exactly one value of a header, or undefined when absent or repeated. */
function single(req: IncomingMessage, name: string): string | undefined {
  const values = req.headersDistinct[name];
  return values?.length === 1 ? values[0] : undefined;
}

export function proxyHandler(service: SandboxService, keyMatches: (key: string) => boolean) {
  return async (req: IncomingMessage, res: ServerResponse, match: RegExpExecArray): Promise<void> => {
    res.setHeader('x-request-id', randomUUID());
    const [, id, portText, rest = '/', query = ''] = match as unknown as string[];
    // Who asks first: a client without credentials learns nothing of what else is wrong.
    const key = single(req, 'svc-api-key');
    const token = single(req, SANDBOX_TOKEN_HEADER.toLowerCase());
    const allowed = (key !== undefined && keyMatches(key)) || (token !== undefined && service.tokenMatches(id!, token));
    if (!allowed) return sendError(res, 401, 'UNAUTHORIZED', keyMissing('a valid SVC-API-KEY or this sandbox\'s X-SVC-SANDBOX-TOKEN is required', req.headers));
    if (!/^\d{1,5}$/.test(portText!) || Number(portText) < 1 || Number(portText) > 65535) return sendError(res, 400, 'INVALID_REQUEST', `port ${JSON.stringify(portText)} is not a port number (1-65535)`);
    // A path that normalization would change could reach somewhere else than it says.
    if (/(^|\/)\.\.?(\/|$)|%2e|%2f|\/\//i.test(rest!)) return sendError(res, 400, 'INVALID_REQUEST', 'proxy path: dot segments, encoded separators and empty segments are refused');
    // From here on the answer may take a while: a client that half-closed is written interim answers until it starts.
    const gone = clientGoneFrom(req, res);
    let socket;
    try {
      socket = await service.openDataPlane(id!, Number(portText));
    } catch (error) {
      if (error instanceof LifecycleError) return sendError(res, error.status, error.code, error.message);
      return sendError(res, 502, 'BAD_GATEWAY', (error as Error).message);
    }
    const exchange = new GuestExchange(socket);
    const upstream = request({
      method: req.method,
      path: `${rest}${query}`,
      headers: { ...forwardable(req.headers, CONTROL_CREDENTIALS), host: 'sandbox' },
      createConnection: () => exchange,
    });
    const timer = setTimeout(() => {
      upstream.destroy();
      sendError(res, 504, 'UPSTREAM_TIMEOUT', `no response headers from port ${portText} within ${UPSTREAM_HEADERS_TIMEOUT_MS / 1000} s`);
    }, UPSTREAM_HEADERS_TIMEOUT_MS);
    upstream.on('response', (answer) => {
      clearTimeout(timer);
      if (answer.statusCode === 101) {
        upstream.destroy();
        return sendError(res, 502, 'BAD_GATEWAY', 'the upstream switched protocols');
      }
      res.writeHead(answer.statusCode ?? 502, forwardable(answer.headers, new Set()));
      res.flushHeaders();
      const length = bulkLength(req.method, answer);
      if (length === undefined || !res.socket) {
        exchange.parseBody();
        pipeline(answer, res, () => socket.destroy());
        return;
      }
      // A download: its bytes go from the guest's socket to the client's as they are, after the head
      // Node wrote (same socket, so in order). Node's HTTP server turns Nagle's algorithm off, which
      // sends each read as a segment of its own and wakes the client for it; for bulk data TCP may
      // coalesce. Streams (SSE, command output) and small answers keep it off: every event goes out at once.
      const client = res.socket;
      client.setNoDelay(false);
      exchange.sendBody(length, client, (error) => {
        if (error) return void res.destroy(error);
        // The connection may carry a stream next (kept alive): no-delay again, which also sends what TCP held.
        client.setNoDelay(true);
        res.end();
      });
      // The HTTP client waits for a body it will never see: let it go quietly.
      upstream.removeAllListeners('error');
      upstream.on('error', () => undefined);
      answer.on('error', () => undefined);
      upstream.destroy();
    });
    upstream.on('error', (error) => {
      clearTimeout(timer);
      sendError(res, 502, 'BAD_GATEWAY', `port ${portText}: ${error.message}`);
    });
    // A client that goes away (also while the connection was being opened) takes the upstream exchange with it.
    const leave = (): void => {
      clearTimeout(timer);
      upstream.destroy();
    };
    if (gone.aborted) leave();
    else gone.addEventListener('abort', leave, { once: true });
    pipeline(req, upstream, (error) => {
      if (error) upstream.destroy();
    });
  };
}
