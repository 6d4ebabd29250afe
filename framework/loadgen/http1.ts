/**
 * A lean HTTP/1.1 client for the load generator, over node:net (node:tls for https): a keep-alive
 * connection pool, requests serialised once per distinct body, and an incremental response parser
 * that hands body bytes to the caller as views of the socket's own buffers.
 *
 * Why not node:http: its per-request machinery (IncomingMessage/ClientRequest streams, header
 * objects, agent bookkeeping, a timer and listeners per request) cost ~4x autocannon's CPU per
 * request, enough to make the load generator the bottleneck. This client does only what a
 * chat-completions benchmark needs: one request at a time per connection (no pipelining), POST
 * with a known body, and responses framed by Content-Length, chunked coding or connection close
 * (RFC 9112 section 6.3).
 */
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import tls from 'node:tls';

/** The response violates HTTP/1.1 framing; the connection cannot be trusted any more. */
export class FramingError extends Error {}

/**
 * Receives one response. `body` slices are views of the connection's read buffer, which the next
 * read overwrites: use them before returning, or copy what must be kept.
 */
export interface ResponseHandler {
  /** `location`: the Location field ('' without one), which says where a redirect points. */
  head(status: number, contentType: string, location: string): void;
  /** `at`: performance.now() when the socket delivered the bytes. */
  body(chunk: Buffer, at: number): void;
  end(at: number): void;
}

const enum State {
  StatusLine,
  HeaderLine,
  Body,
  ChunkSize,
  ChunkData,
  ChunkEnd,
  Trailer,
  UntilClose,
  Done,
}

/** Status line plus header fields (and, separately, one chunk-size line or trailer section) may not exceed this. */
const MAX_HEAD_BYTES = 64 * 1024;
/** 12 hex digits: 256 TiB, far beyond any chunk and well inside a double's exact integers. */
const MAX_CHUNK_SIZE_DIGITS = 12;

const HEX = new Int8Array(256).fill(-1);
for (let i = 0; i < 10; i++) HEX[48 + i] = i;
for (let i = 0; i < 6; i++) HEX[65 + i] = HEX[97 + i] = 10 + i;

/**
 * Incremental HTTP/1.1 response parser: fed the bytes as they arrive, split anywhere. Throws
 * FramingError on a response that breaks the framing rules; the caller then drops the connection.
 */
export class ResponseParser {
  private state = State.StatusLine;
  private handler: ResponseHandler | undefined;
  /** The start of a line split across chunks, copied. */
  private partial: Buffer | undefined;
  /** Bytes of the current head or trailer section so far, against MAX_HEAD_BYTES. */
  private sectionBytes = 0;
  private status = 0;
  private contentType = '';
  private location = '';
  private contentLength = -1;
  /** The last transfer coding named, '' when there was no Transfer-Encoding field. */
  private transferCoding = '';
  /** Body bytes left in the Content-Length body or the current chunk. */
  private remaining = 0;
  /** Whether the connection may carry another request once this response is complete. */
  keepAlive = true;

  /** Starts a new response (for the next request on the same connection). */
  reset(handler: ResponseHandler): void {
    this.handler = handler;
    this.state = State.StatusLine;
    this.partial = undefined;
    this.sectionBytes = 0;
    this.status = 0;
    this.contentType = '';
    this.location = '';
    this.contentLength = -1;
    this.transferCoding = '';
    this.remaining = 0;
    this.keepAlive = true;
  }

  get done(): boolean {
    return this.state === State.Done;
  }

  /** Whether any byte of the response has arrived. */
  get started(): boolean {
    return this.state !== State.StatusLine || this.partial !== undefined;
  }

  /** Consumes bytes up to the end of the response; returns how many were used (less than the chunk's length only once done). */
  execute(chunk: Buffer, at: number): number {
    let pos = 0;
    const length = chunk.length;
    while (pos < length) {
      switch (this.state) {
        case State.Done:
          return pos;
        case State.UntilClose:
          this.handler?.body(pos === 0 ? chunk : chunk.subarray(pos), at);
          return length;
        case State.Body:
        case State.ChunkData: {
          const n = Math.min(this.remaining, length - pos);
          this.handler?.body(n === length ? chunk : chunk.subarray(pos, pos + n), at);
          pos += n;
          this.remaining -= n;
          if (this.remaining === 0) {
            if (this.state === State.Body) this.complete(at);
            else this.state = State.ChunkEnd;
          }
          break;
        }
        default: {
          const newline = chunk.indexOf(10, pos);
          const lineEnd = newline < 0 ? length : newline;
          this.sectionBytes += lineEnd - pos + 1;
          if (this.sectionBytes > MAX_HEAD_BYTES) throw new FramingError(`a header section or chunk-size line is over ${MAX_HEAD_BYTES} bytes`);
          if (newline < 0) {
            // Copied: the read buffer is reused.
            const rest = chunk.subarray(pos);
            this.partial = this.partial ? Buffer.concat([this.partial, rest]) : Buffer.from(rest);
            return length;
          }
          if (this.partial) {
            const line = Buffer.concat([this.partial, chunk.subarray(pos, newline)]);
            this.partial = undefined;
            this.line(line, 0, line.length, at);
          } else {
            this.line(chunk, pos, newline, at);
          }
          pos = newline + 1;
        }
      }
    }
    return pos;
  }

  /**
   * The server closed the connection. Completes a body delimited by the close; otherwise the
   * response was cut short, and the return value says so (the caller reports a reset).
   */
  close(at: number): boolean {
    if (this.state === State.UntilClose) this.complete(at);
    return this.state === State.Done;
  }

  /** One line without its LF (a CR before the LF is dropped too: RFC 9112 lets recipients accept a bare LF). */
  private line(buf: Buffer, start: number, end: number, at: number): void {
    if (end > start && buf[end - 1] === 13) end--;
    switch (this.state) {
      case State.StatusLine:
        return this.statusLine(buf, start, end);
      case State.HeaderLine:
        if (end === start) return this.headEnd(at);
        return this.field(buf, start, end);
      case State.ChunkSize:
        return this.chunkSize(buf, start, end, at);
      case State.ChunkEnd:
        if (end !== start) throw new FramingError('a chunk is longer than its declared size');
        this.state = State.ChunkSize;
        this.sectionBytes = 0;
        return;
      case State.Trailer:
        // Trailer fields carry nothing a benchmark needs; the empty line ends the message.
        if (end === start) this.complete(at);
        return;
    }
  }

  private statusLine(buf: Buffer, start: number, end: number): void {
    // HTTP-version SP 3DIGIT [SP reason-phrase]
    const version = buf.toString('latin1', start, Math.min(start + 8, end));
    const d = (i: number): number => (buf[start + i] ?? 0) - 48;
    const digits = end - start >= 12 && buf[start + 8] === 32 && [9, 10, 11].every((i) => d(i) >= 0 && d(i) <= 9);
    if ((version !== 'HTTP/1.1' && version !== 'HTTP/1.0') || !digits || (end - start > 12 && buf[start + 12] !== 32)) {
      throw new FramingError(`not an HTTP/1.x status line: ${JSON.stringify(buf.toString('latin1', start, Math.min(end, start + 80)))}`);
    }
    this.status = d(9) * 100 + d(10) * 10 + d(11);
    if (this.status < 100 || this.status === 101) throw new FramingError(`unexpected status ${this.status}`);
    this.keepAlive = version === 'HTTP/1.1';
    this.state = State.HeaderLine;
  }

  private field(buf: Buffer, start: number, end: number): void {
    const colon = buf.indexOf(58, start);
    const first = buf[start];
    // No name, whitespace before the colon, or a folded line (obs-fold): all rejected by RFC 9112 section 5.
    if (colon < 0 || colon >= end || colon === start || first === 32 || first === 9 || buf[colon - 1] === 32 || buf[colon - 1] === 9) {
      throw new FramingError(`a malformed header line: ${JSON.stringify(buf.toString('latin1', start, Math.min(end, start + 80)))}`);
    }
    // Only five fields matter; compare names only when the length fits, to skip the rest cheaply.
    const nameLength = colon - start;
    if (nameLength !== 14 && nameLength !== 17 && nameLength !== 10 && nameLength !== 12 && nameLength !== 8) return;
    const name = buf.toString('latin1', start, colon).toLowerCase();
    const value = (): string => buf.toString('latin1', colon + 1, end).trim();
    switch (name) {
      case 'content-length': {
        for (const part of value().split(',')) {
          const text = part.trim();
          const n = /^\d{1,15}$/.test(text) ? Number(text) : NaN;
          if (Number.isNaN(n) || (this.contentLength >= 0 && n !== this.contentLength)) throw new FramingError(`an invalid Content-Length: ${JSON.stringify(value())}`);
          this.contentLength = n;
        }
        return;
      }
      case 'transfer-encoding': {
        const codings = value().toLowerCase().split(',');
        this.transferCoding = (codings[codings.length - 1] as string).trim();
        return;
      }
      case 'connection':
        for (const option of value().toLowerCase().split(',')) {
          const o = option.trim();
          if (o === 'close') this.keepAlive = false;
          else if (o === 'keep-alive') this.keepAlive = true;
        }
        return;
      case 'content-type':
        this.contentType = value();
        return;
      case 'location':
        this.location = value();
        return;
    }
  }

  private headEnd(at: number): void {
    if (this.status < 200) {
      // An interim response (100 Continue, 103 Early Hints): the real one follows.
      this.reset(this.handler as ResponseHandler);
      return;
    }
    this.handler?.head(this.status, this.contentType, this.location);
    this.sectionBytes = 0;
    if (this.status === 204 || this.status === 304) return this.complete(at);
    if (this.transferCoding !== '') {
      // Transfer-Encoding overrides Content-Length, and a message with both must not be reused.
      if (this.contentLength >= 0) this.keepAlive = false;
      if (this.transferCoding === 'chunked') {
        this.state = State.ChunkSize;
        return;
      }
      this.keepAlive = false;
      this.state = State.UntilClose;
      return;
    }
    if (this.contentLength >= 0) {
      this.remaining = this.contentLength;
      if (this.remaining === 0) this.complete(at);
      else this.state = State.Body;
      return;
    }
    this.keepAlive = false;
    this.state = State.UntilClose;
  }

  private chunkSize(buf: Buffer, start: number, end: number, at: number): void {
    // chunk-size [BWS ; chunk-ext]: the extensions are skipped.
    let size = 0;
    let i = start;
    for (; i < end; i++) {
      const v = HEX[buf[i] as number] as number;
      if (v < 0) break;
      size = size * 16 + v;
    }
    const digits = i - start;
    while (i < end && (buf[i] === 32 || buf[i] === 9)) i++;
    if (digits === 0 || digits > MAX_CHUNK_SIZE_DIGITS || (i < end && buf[i] !== 59)) {
      throw new FramingError(`an invalid chunk-size line: ${JSON.stringify(buf.toString('latin1', start, Math.min(end, start + 80)))}`);
    }
    this.sectionBytes = 0;
    if (size === 0) {
      this.state = State.Trailer;
      return;
    }
    this.remaining = size;
    this.state = State.ChunkData;
  }

  private complete(at: number): void {
    this.state = State.Done;
    this.handler?.end(at);
  }
}

/** What a connection failure is counted as; `malformed` is a FramingError. */
export type FailureKind = 'connection_reset' | 'connection_refused' | 'dns' | 'connection_error' | 'timeout' | 'malformed';

export interface Exchange extends ResponseHandler {
  /** `at`: performance.now() when the request is written to its connection, after any wait for a free one. */
  sent(at: number): void;
  /** Called at most once, instead of `end`, when the response cannot complete. */
  fail(kind: FailureKind, detail: string): void;
}

function failureKind(error: NodeJS.ErrnoException): FailureKind {
  switch (error.code) {
    case 'ECONNRESET':
    case 'EPIPE':
      return 'connection_reset';
    case 'ECONNREFUSED':
      return 'connection_refused';
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return 'dns';
    default:
      return 'connection_error';
  }
}

export interface PoolOptions {
  url: URL;
  /** Connections open at once; more requests wait for one to be free. Infinity in open loop, which must never queue. */
  maxConnections: number;
  /** Per request, from when it is written to the connection to its last byte; 0: none. */
  timeoutMs: number;
  /** Extra options for tls.connect (https only), e.g. a test's own CA. */
  tls?: tls.ConnectionOptions;
}

/**
 * Plain TCP reads land in one buffer shared by all connections (`onread`): a read is handled
 * whole before the next one starts, and it spares Node's per-read 64 KiB allocation and its
 * Readable-stream bookkeeping, most of the client's cost per streamed token.
 */
const READ_BUFFER_BYTES = 64 * 1024;

class Connection {
  readonly socket: net.Socket;
  private readonly parser = new ResponseParser();
  private exchange: Exchange | undefined;
  /** One timer per connection, re-armed per request with refresh(): no timer is created per request. */
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly pool: Http1Pool) {
    const { host, port, secure, options } = pool;
    if (secure) {
      this.socket = tls.connect({ host, port, servername: net.isIP(host) ? undefined : host, ALPNProtocols: ['http/1.1'], ...options.tls });
      this.socket.setNoDelay(true);
      this.socket.on('data', (chunk: Buffer) => this.data(chunk));
    } else {
      const callback = (bytes: number, buffer: Buffer): boolean => {
        this.data(buffer.subarray(0, bytes));
        return true;
      };
      this.socket = net.connect({ host, port, noDelay: true, onread: { buffer: pool.readBuffer, callback } });
    }
    this.socket.on('end', () => this.ended());
    this.socket.on('error', (error: NodeJS.ErrnoException) => this.failed(failureKind(error), error.code ? `${error.code}: ${error.message}` : error.message));
    this.socket.on('close', () => {
      clearTimeout(this.timer);
      this.failed('connection_reset', 'the connection closed before the response was complete');
      pool.closed(this);
    });
  }

  send(request: Buffer, exchange: Exchange): void {
    this.exchange = exchange;
    this.parser.reset(exchange);
    const timeoutMs = this.pool.options.timeoutMs;
    if (timeoutMs > 0) {
      if (this.timer) this.timer.refresh();
      else this.timer = setTimeout(() => this.timedOut(), timeoutMs).unref();
    }
    exchange.sent(performance.now());
    this.socket.write(request);
  }

  /** Gives up on the current exchange (cancelled, or its body was unusable): the connection is closed, as it is mid-response. */
  abort(): void {
    this.exchange = undefined;
    this.socket.destroy();
  }

  private timedOut(): void {
    // Every send re-arms the timer, so when it fires during an exchange, that exchange is overdue;
    // when it finds the connection idle, its request ended in time.
    if (this.exchange) this.failed('timeout', `no complete response within ${this.pool.options.timeoutMs} ms`);
  }

  private data(chunk: Buffer): void {
    const at = performance.now();
    const exchange = this.exchange;
    if (!exchange) {
      this.socket.destroy(); // bytes nobody asked for: the connection is out of step
      return;
    }
    let used: number;
    try {
      used = this.parser.execute(chunk, at);
    } catch (error) {
      if (!(error instanceof FramingError)) throw error;
      this.failed('malformed', `the HTTP response is malformed: ${error.message}`);
      return;
    }
    if (!this.parser.done || this.exchange !== exchange) return;
    this.exchange = undefined;
    if (used < chunk.length || !this.parser.keepAlive) this.socket.destroy();
    else this.pool.release(this);
  }

  private ended(): void {
    const exchange = this.exchange;
    if (exchange && this.parser.close(performance.now())) this.exchange = undefined;
    else if (exchange) {
      const what = this.parser.started ? 'mid-response' : 'before responding';
      this.failed('connection_reset', `the server closed the connection ${what}`);
    }
    this.socket.destroy();
  }

  private failed(kind: FailureKind, detail: string): void {
    const exchange = this.exchange;
    if (!exchange) return;
    this.exchange = undefined;
    this.socket.destroy();
    exchange.fail(kind, detail);
  }
}

/** A request waiting for a connection, and where it went once it got one (for cancelling it). */
interface Waiting {
  request: Buffer;
  exchange: Exchange;
  connection: Connection | undefined;
}

/** Keep-alive connections to one origin, reused most-recently-freed first. */
export class Http1Pool {
  readonly host: string;
  readonly port: number;
  readonly secure: boolean;
  private readonly connections = new Set<Connection>();
  private readonly idle: Connection[] = [];
  private readonly queue: Waiting[] = [];
  private readonly requests = new Map<string, Buffer>();
  private readonly head: string;
  private destroyed = false;
  readonly readBuffer = Buffer.allocUnsafe(READ_BUFFER_BYTES);

  constructor(
    readonly options: PoolOptions,
    headers: Record<string, string>,
  ) {
    const { url } = options;
    this.secure = url.protocol === 'https:';
    this.host = url.hostname.replace(/^\[|\]$/g, '');
    this.port = Number(url.port || (this.secure ? 443 : 80));
    let head = `POST ${url.pathname}${url.search} HTTP/1.1\r\nhost: ${url.host}\r\nconnection: keep-alive\r\n`;
    for (const [name, value] of Object.entries(headers)) {
      // A CR or LF would end the field early and let the value forge headers.
      if (/[\r\n\0]/.test(value)) throw new TypeError(`the ${name} header value contains a line break or NUL`);
      head += `${name}: ${value}\r\n`;
    }
    this.head = head;
  }

  /** The whole request for a body, serialised on first use and then reused byte for byte. */
  requestFor(body: string): Buffer {
    let request = this.requests.get(body);
    if (!request) {
      request = Buffer.from(`${this.head}content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      this.requests.set(body, request);
    }
    return request;
  }

  /** Sends a request; the exchange hears its response or failure. The returned function cancels it silently. */
  send(request: Buffer, exchange: Exchange): () => void {
    if (this.destroyed) {
      exchange.fail('connection_error', 'the client is shut down');
      return () => undefined;
    }
    let connection = this.idle.pop();
    if (!connection && this.connections.size < this.options.maxConnections) {
      connection = new Connection(this);
      this.connections.add(connection);
    }
    if (connection) {
      const used = connection;
      used.send(request, exchange);
      return () => used.abort();
    }
    const waiting: Waiting = { request, exchange, connection: undefined };
    this.queue.push(waiting);
    return () => {
      if (waiting.connection) waiting.connection.abort();
      else if (this.queue.includes(waiting)) this.queue.splice(this.queue.indexOf(waiting), 1);
    };
  }

  /** A connection finished its response and may be reused. */
  release(connection: Connection): void {
    if (this.destroyed) connection.socket.destroy();
    else if (!this.dispatch(connection)) this.idle.push(connection);
  }

  /** A connection's socket closed, for whatever reason. */
  closed(connection: Connection): void {
    this.connections.delete(connection);
    const at = this.idle.indexOf(connection);
    if (at >= 0) this.idle.splice(at, 1);
    // A queued request takes the freed slot on a new connection.
    if (this.queue.length > 0 && !this.destroyed) {
      const fresh = new Connection(this);
      this.connections.add(fresh);
      this.dispatch(fresh);
    }
  }

  private dispatch(connection: Connection): boolean {
    const next = this.queue.shift();
    if (!next) return false;
    next.connection = connection;
    connection.send(next.request, next.exchange);
    return true;
  }

  /** Closes every connection; requests still in flight or queued fail. */
  destroy(): void {
    this.destroyed = true;
    for (const waiting of this.queue.splice(0)) waiting.exchange.fail('connection_error', 'the client is shut down');
    for (const connection of this.connections) connection.socket.destroy();
    this.idle.length = 0;
  }
}
