/**
 * The client side of HTTP/2 between nodes (and of inspect): one pooled session per peer address,
 * over which requests are multiplexed as streams; cleartext (h2c, prior knowledge) or, with TLS
 * material, TLS with this node's certificate. Every request carries the cluster's name in
 * `x-actor-cluster`. Also `readBody`, which both sides use to read a whole body within limits.
 */
import http2 from 'node:http2';
import { endInSlices } from '../../lib/streams.js';
import { ActorError, reachFailure } from './errors.js';
import { DEFAULT_CLUSTER } from './members.js';
import type { ConnectionBudget } from './budget.js';
import { serverIdentityCheck, type TlsMaterial } from './tls.js';

const { NGHTTP2_CANCEL } = http2.constants;

/** The header that carries the cluster name on every request between nodes. */
export const CLUSTER_HEADER = 'x-actor-cluster';

/**
 * The HTTP/2 session (connection) flow-control window, raised far above the 64 KiB default so that
 * a busy call channel beside other streams never waits for WINDOW_UPDATE frames. Stream windows stay
 * at the default: with a raised initial stream window (8 MiB tried) Node's http2 stalled a channel
 * carrying a dozen 1 MiB calls for good (framework/test/remote.test.ts reproduces it), and the
 * default costs the bench nothing measurable.
 */
const SESSION_WINDOW = 64 * 1024 * 1024;

/** Largest reply body accepted from a peer. */
export const MAX_REPLY_BYTES = 64 * 1024 * 1024;

export interface Reply {
  status: number;
  headers: http2.IncomingHttpHeaders;
  body: Buffer;
}

export interface RequestOptions {
  method?: string;
  headers?: Record<string, string>;
  /** Pieces are sent one after the other (endInSlices). */
  body?: Buffer | string | readonly Buffer[];
  timeoutMs?: number;
  /** Leave the request side open (a long-lived stream such as the call channel); `body` is ignored. */
  keepOpen?: boolean;
}

/** How much of a body to read, and what it may take. */
export interface BodyLimits {
  /** More bytes than this fail with `too-large`. */
  maxBytes: number;
  /** The limit's name in that error (`max_call_bytes`, or what a fixed limit is for). */
  limitName: string;
  /** Bytes are charged here as they arrive and stay charged (the caller gives them back); while it is full, reading waits. */
  budget?: ConnectionBudget | undefined;
  /** The whole body must arrive within this time. */
  timeoutMs?: number | undefined;
}

/**
 * Reads a whole request or response body within `limits`. Bytes are charged to the budget as they
 * arrive; while it is full, reading stops (the stream is paused: HTTP/2 flow control stops the
 * sender) until bytes are given back somewhere on the node, so a flood of bodies is held at the
 * budget instead of being read, refused and read again. On failure the bytes read so far are given
 * back and dropped, and reading stops; answering and closing the stream is the caller's.
 */
export function readBody(stream: http2.Http2Stream, limits: BodyLimits): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const stop = (error: ActorError): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      stream.off('data', onData);
      stream.pause();
      limits.budget?.give(size);
      chunks.length = 0;
      reject(error);
    };
    const onData = (chunk: Buffer): void => {
      if (size + chunk.length > limits.maxBytes) return stop(new ActorError('too-large', `body exceeds ${limits.maxBytes} bytes (limit ${limits.limitName})`));
      size += chunk.length;
      chunks.push(chunk);
      if (!limits.budget) return;
      limits.budget.take(chunk.length);
      if (!limits.budget.full) return;
      stream.pause();
      limits.budget.whenRoom(() => stream.resume(), () => settled);
    };
    const timer = limits.timeoutMs ? setTimeout(() => stop(new ActorError('bad-request', `body did not arrive within ${limits.timeoutMs} ms`)), limits.timeoutMs) : undefined;
    stream.on('data', onData);
    stream.once('end', () => {
      // Node ends the readable side of a stream the peer reset, too: that body is cut short.
      if (stream.aborted || (stream.rstCode !== undefined && stream.rstCode !== 0)) return stop(new ActorError('cancelled', 'stream was reset before its body ended'));
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
    });
    stream.once('error', (error) => stop(new ActorError('cancelled', `stream failed: ${error.message}`)));
    // 'close' follows every stream: an error only when the body never ended.
    stream.once('close', () => stop(new ActorError('cancelled', 'stream closed before its body ended')));
  });
}

export interface TransportOptions {
  /** The cluster every request names. */
  cluster?: string;
  /** Speak TLS with this certificate, trusting peers of its CA (and of this cluster). */
  tls?: TlsMaterial | undefined;
}

export class Transport {
  private readonly sessions = new Map<string, http2.ClientHttp2Session>();
  /** Requests open on each session, other than call channels. */
  private readonly openRequests = new WeakMap<http2.Http2Session, number>();
  /** Lets go of the hold `holdOpen` took for a request (once, whichever comes first: settled or closed). */
  private readonly releases = new WeakMap<http2.ClientHttp2Stream, () => void>();
  /** Test-only fault hook: outgoing requests to these addresses fail as if the network dropped them. */
  readonly blocked = new Set<string>();
  private closed = false;
  readonly cluster: string;

  constructor(private readonly options: TransportOptions = {}) {
    this.cluster = options.cluster ?? DEFAULT_CLUSTER;
  }

  private session(addr: string): http2.ClientHttp2Session {
    const existing = this.sessions.get(addr);
    if (existing && !existing.closed && !existing.destroyed) return existing;
    const { tls } = this.options;
    const session = tls
      ? http2.connect(`https://${addr}`, { settings: { enablePush: false }, ...tls, checkServerIdentity: serverIdentityCheck(this.cluster) })
      : http2.connect(`http://${addr}`, { settings: { enablePush: false } });
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
    const headers = { ':method': options.method ?? 'POST', ':path': path, [CLUSTER_HEADER]: this.cluster, ...options.headers };
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
    this.holdOpen(request);
    if (options.body !== undefined) void endInSlices(request, options.body);
    else request.end();
    return request;
  }

  /**
   * A pooled session does not keep the process alive while idle, but does while a request on it is
   * open: a command waiting for a streamed reply must not end because nothing else is going on.
   * (Long-lived call channels do not count: their calls have timers of their own.)
   */
  private holdOpen(request: http2.ClientHttp2Stream): void {
    const session = request.session!;
    const open = (this.openRequests.get(session) ?? 0) + 1;
    this.openRequests.set(session, open);
    if (open === 1) session.ref();
    let held = true;
    const release = (): void => {
      if (!held) return;
      held = false;
      const left = (this.openRequests.get(session) ?? 1) - 1;
      this.openRequests.set(session, left);
      if (left === 0 && !session.destroyed) session.unref();
    };
    this.releases.set(request, release);
    // A cancelled request to a peer that stopped answering may not close for a long while: a timed
    // out request lets go when it settles (see `request`), not when its stream closes.
    request.once('close', release);
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
        this.releases.get(request)?.();
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
        if (size > MAX_REPLY_BYTES) finish(new ActorError('failed', `reply from ${addr}${path} exceeds ${MAX_REPLY_BYTES} bytes`));
        else chunks.push(chunk);
      });
      request.once('end', () => {
        if (!headers) return finish(new ActorError('unreachable', `${addr}: stream ended without a reply`));
        finish(undefined, { status: Number(headers[':status']), headers, body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks) });
      });
      // 'close' follows every request; build an error only when nothing settled it first.
      request.once('error', (error) => settled || finish(new ActorError('unreachable', `${addr}: ${reachFailure(error)}`)));
      request.once('close', () => settled || finish(new ActorError('unreachable', `${addr}: stream closed without a reply (code ${request.rstCode})`)));
    });
  }

  /** Closes the pooled sessions; requests after this fail with `unreachable`. */
  close(): void {
    this.closed = true;
    for (const session of this.sessions.values()) session.close();
    this.sessions.clear();
  }
}

/** The session window can only be raised once the session is connected. */
export function raiseSessionWindow(session: http2.Http2Session): void {
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
