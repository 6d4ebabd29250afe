/**
 * HTTP/2 cleartext (h2c, prior knowledge) transport: one listener per node, and one pooled
 * session per peer over which calls are multiplexed as streams.
 */
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { parseAddr } from './address.js';
import { ActorError } from './errors.js';

const { NGHTTP2_CANCEL } = http2.constants;

/** Largest request or reply body accepted. */
export const MAX_BODY_BYTES = 16 * 1024 * 1024;

export type StreamHandler = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => void;

export interface Reply {
  status: number;
  headers: http2.IncomingHttpHeaders;
  body: Buffer;
}

export interface RequestOptions {
  method?: string;
  headers?: Record<string, string>;
  body?: Buffer | string;
  timeoutMs?: number;
  /** Leave the request side open (a long-lived stream such as the call channel); `body` is ignored. */
  keepOpen?: boolean;
}

/**
 * The HTTP/2 session (connection) flow-control window, raised far above the 64 KiB default so that
 * a busy call channel beside other streams never waits for WINDOW_UPDATE frames. Stream windows stay
 * at the default: with a raised initial stream window (8 MiB tried) Node's http2 stalled a channel
 * carrying a dozen 1 MiB calls for good (framework/test/remote.test.ts reproduces it), and the
 * default costs the bench nothing measurable.
 */
const SESSION_WINDOW = 64 * 1024 * 1024;

/** Reads a whole request/response body, refusing more than `limit` bytes. */
export function readBody(stream: http2.Http2Stream, limit = MAX_BODY_BYTES): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const fail = (error: () => Error): void => {
      if (settled) return;
      settled = true;
      reject(error());
    };
    stream.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        fail(() => new ActorError('bad-request', `body exceeds ${limit} bytes`));
        stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
        return;
      }
      chunks.push(chunk);
    });
    stream.once('end', () => {
      if (settled) return;
      settled = true;
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
    });
    stream.once('error', (error) => fail(() => error));
    // 'close' follows every stream: the error is built only when the body never ended.
    stream.once('close', () => fail(() => new ActorError('cancelled', 'stream closed before its body ended')));
  });
}

export class Transport {
  private server: http2.Http2Server | undefined;
  private readonly sessions = new Map<string, http2.ClientHttp2Session>();
  private readonly serverSessions = new Set<http2.ServerHttp2Session>();
  /** Test-only fault hook: outgoing requests to these addresses fail as if the network dropped them. */
  readonly blocked = new Set<string>();
  private closed = false;

  async listen(addr: string, handler: StreamHandler): Promise<{ host: string; port: number }> {
    const { host, port } = parseAddr(addr);
    const server = http2.createServer({ settings: { maxConcurrentStreams: 1000 } });
    server.on('stream', (stream, headers) => {
      // A peer that resets or breaks its stream must never take the node down.
      stream.on('error', () => {});
      try {
        handler(stream, headers);
      } catch (error) {
        if (!stream.destroyed && !stream.headersSent) {
          stream.respond({ ':status': 500, 'content-type': 'text/plain' });
          stream.end(error instanceof Error ? error.message : String(error));
        }
      }
    });
    server.on('session', (session) => {
      this.serverSessions.add(session);
      session.on('error', () => {});
      raiseSessionWindow(session);
      session.once('close', () => this.serverSessions.delete(session));
    });
    // Garbage instead of an HTTP/2 preface, or broken frames: nghttp2 answers GOAWAY; we keep serving.
    server.on('sessionError', () => {});
    server.on('unknownProtocol', (socket) => socket.destroy());
    server.on('error', () => {});
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    this.server = server;
    const bound = server.address() as AddressInfo;
    return { host, port: bound.port };
  }

  private session(addr: string): http2.ClientHttp2Session {
    const existing = this.sessions.get(addr);
    if (existing && !existing.closed && !existing.destroyed) return existing;
    const session = http2.connect(`http://${addr}`, { settings: { enablePush: false } });
    session.on('error', () => {});
    raiseSessionWindow(session);
    const forget = (): void => {
      if (this.sessions.get(addr) === session) this.sessions.delete(addr);
    };
    session.once('close', forget);
    session.once('goaway', forget);
    // An idle pooled session must not keep the process alive on its own.
    session.unref();
    this.sessions.set(addr, session);
    return session;
  }

  /** Opens a request stream; the caller reads the response (and times it out). Throws when blocked or closed. */
  open(addr: string, path: string, options: RequestOptions = {}): http2.ClientHttp2Stream {
    this.assertReachable(addr);
    const headers = { ':method': options.method ?? 'POST', ':path': path, ...options.headers };
    let request: http2.ClientHttp2Stream;
    try {
      request = this.session(addr).request(headers);
    } catch {
      // A session that cannot open more streams (ids used up, or closing): replace it once.
      this.sessions.get(addr)?.destroy();
      this.sessions.delete(addr);
      request = this.session(addr).request(headers);
    }
    request.on('error', () => {});
    if (options.keepOpen) return request;
    if (options.body !== undefined) request.end(options.body);
    else request.end();
    return request;
  }

  /** Throws `unreachable` when the transport is closed or the fault hook blocks `addr`. */
  assertReachable(addr: string): void {
    if (this.closed) throw new ActorError('unreachable', 'transport is closed');
    if (this.blocked.has(addr)) throw new ActorError('unreachable', `${addr} is unreachable (fault injected)`);
  }

  /** A request with a whole-body reply. */
  request(addr: string, path: string, options: RequestOptions = {}): Promise<Reply> {
    return new Promise<Reply>((resolve, reject) => {
      let request: http2.ClientHttp2Stream;
      try {
        request = this.open(addr, path, options);
      } catch (error) {
        reject(error);
        return;
      }
      let settled = false;
      const finish = (error: unknown, reply?: Reply): void => {
        if (settled) return;
        settled = true;
        if (timer) clearTimeout(timer);
        if (error) {
          if (!request.closed) request.close(NGHTTP2_CANCEL);
          reject(error);
        } else resolve(reply!);
      };
      const timer = options.timeoutMs ? setTimeout(() => finish(new ActorError('timeout', `no reply from ${addr}${path} within ${options.timeoutMs} ms`)), options.timeoutMs) : undefined;
      let headers: http2.IncomingHttpHeaders | undefined;
      const chunks: Buffer[] = [];
      let size = 0;
      request.once('response', (h) => (headers = h));
      request.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > MAX_BODY_BYTES) finish(new ActorError('failed', `reply from ${addr}${path} exceeds ${MAX_BODY_BYTES} bytes`));
        else chunks.push(chunk);
      });
      request.once('end', () => {
        if (!headers) return finish(new ActorError('unreachable', `${addr}: stream ended without a reply`));
        finish(undefined, { status: Number(headers[':status']), headers, body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks) });
      });
      // 'close' follows every request; build an error only when nothing settled it first.
      request.once('error', (error) => settled || finish(new ActorError('unreachable', `${addr}: ${error.message}`)));
      request.once('close', () => settled || finish(new ActorError('unreachable', `${addr}: stream closed without a reply (code ${request.rstCode})`)));
    });
  }

  address(): AddressInfo | undefined {
    return this.server?.address() as AddressInfo | undefined;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const session of this.sessions.values()) session.close();
    this.sessions.clear();
    const server = this.server;
    this.server = undefined;
    if (!server) return;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const session of this.serverSessions) session.close();
    // Sessions that do not finish their streams promptly are cut.
    const force = setTimeout(() => {
      for (const session of this.serverSessions) session.destroy();
    }, 1000);
    await closed;
    clearTimeout(force);
  }
}

/** The session window can only be raised once the session is connected. */
function raiseSessionWindow(session: http2.Http2Session): void {
  const raise = (): void => {
    try {
      if (!session.destroyed) session.setLocalWindowSize(SESSION_WINDOW);
    } catch {
      // A session torn down meanwhile needs no window.
    }
  };
  if (session.connecting) session.once('connect', raise);
  else raise();
}
