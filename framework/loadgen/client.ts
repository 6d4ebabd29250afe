/**
 * One chat-completions request on a pooled keep-alive connection, timed to the chunk: the
 * lean HTTP/1.1 client in http1.ts (not node:http, whose per-request cost made the load
 * generator a bottleneck) hands the body's bytes straight to the SSE parser, stamped with
 * when the socket delivered them.
 */
import { performance } from 'node:perf_hooks';
import { Http1Pool, type Exchange, type FailureKind } from './http1.js';
import { SseLimitError, SseParser } from './sse.js';
import { isJsonObject } from '../../lib/json-object.js';

export interface Endpoint {
  pool: Http1Pool;
  stream: boolean;
}

export interface Usage {
  promptTokens: number | undefined;
  completionTokens: number | undefined;
}

export interface RequestResult {
  /**
   * performance.now() when the request was written to its connection. A wait for a free one (its
   * last response still ending) is the client's, not the server's: it is not part of any latency.
   */
  startMs: number;
  e2eMs: number;
  /** Undefined without streaming or when no content arrived. */
  ttftMs: number | undefined;
  /** Gaps between successive content chunks. */
  itlMs: number[];
  text: string;
  chunks: number;
  usage: Usage | undefined;
  /** Undefined on success; otherwise `http_<status>`, `timeout`, `connection_reset`, ... */
  error: string | undefined;
  errorDetail: string | undefined;
}

export function chatEndpoint(base: string): URL {
  const url = new URL(base);
  if (!url.pathname.endsWith('/chat/completions')) {
    const path = url.pathname.replace(/\/+$/, '');
    url.pathname = path.endsWith('/v1') ? `${path}/chat/completions` : `${path}/v1/chat/completions`;
  }
  return url;
}

/**
 * The connection pool for an endpoint: as many connections as users (Infinity in open loop,
 * which must never queue), with the request headers, bearer token included, serialised once.
 */
export function createPool(url: URL, connections: number, headers: Record<string, string>, timeoutMs: number): Http1Pool {
  return new Http1Pool({ url, maxConnections: Math.max(connections, 1), timeoutMs }, headers);
}

/** How much of an error body is kept. Details stay whole here: the run redacts the API key before it shortens them. */
const ERROR_BODY_LIMIT = 64 * 1024;

/**
 * Most bytes kept of one whole (non-streamed) response body, and of one server-sent event while it
 * arrives. A chat completion of 100k tokens is well under a megabyte; a server pouring an endless body
 * or a line that never ends would otherwise grow the load generator's memory until it is killed.
 */
export const MAX_RESPONSE_BYTES = 16 * 1024 * 1024;

/**
 * How long the body may go on after `data: [DONE]` before its connection is dropped. The request is
 * complete at [DONE]; a server that then never ends the body would otherwise hold the connection,
 * and with it the next request of a closed-loop user, until the timeout.
 */
const AFTER_DONE_MS = 1000;

interface ChunkShape {
  choices?: Array<{ delta?: { content?: unknown; reasoning_content?: unknown }; message?: { content?: unknown }; finish_reason?: unknown }>;
  usage?: { prompt_tokens?: unknown; completion_tokens?: unknown } | null;
  error?: unknown;
}

function usageOf(value: ChunkShape['usage']): Usage | undefined {
  if (!value || typeof value !== 'object') return undefined;
  // A count is a whole number of tokens: anything else would make the report's sums and rates wrong.
  const num = (v: unknown): number | undefined => (Number.isSafeInteger(v) && (v as number) >= 0 ? (v as number) : undefined);
  return { promptTokens: num(value.prompt_tokens), completionTokens: num(value.completion_tokens) };
}

/**
 * The requests in flight, each with a way to cancel it: one abort listener for the run
 * rather than one per request (EventTarget listeners are costly at thousands per second).
 */
export type InFlight = Set<() => void>;

const enum Body {
  /** Not 200: kept (up to a limit) for the error detail. */
  Error,
  Sse,
  Json,
}

/** One request's life: the pool calls head/body/end or fail; the first outcome settles it. */
class ChatExchange implements Exchange {
  readonly result: RequestResult = {
    startMs: performance.now(),
    e2eMs: 0,
    ttftMs: undefined,
    itlMs: [],
    text: '',
    chunks: 0,
    usage: undefined,
    error: undefined,
    errorDetail: undefined,
  };
  private settled = false;
  /** The response is still arriving: a failure found here must drop its connection. */
  private receiving = true;
  /** `data: [DONE]` has arrived. */
  private done = false;
  private status = 0;
  private contentType = '';
  /** Where a redirect points, for the error's detail: the load generator follows none. */
  private location = '';
  private kind = Body.Json;
  private parts: Buffer[] = [];
  private size = 0;
  private sse: SseParser | undefined;
  /** When the bytes being parsed arrived: every event in one chunk shares it. */
  private chunkAt = 0;
  private lastChunk = 0;
  cancel: () => void = () => undefined;

  constructor(
    private readonly stream: boolean,
    private readonly inFlight: InFlight,
    private readonly resolve: (result: RequestResult) => void,
  ) {}

  readonly interrupt = (): void => this.finish('cancelled', 'the run was interrupted');

  sent(at: number): void {
    this.result.startMs = at;
  }

  head(status: number, contentType: string, location: string): void {
    this.status = status;
    this.contentType = contentType;
    this.location = location;
    if (status !== 200) this.kind = Body.Error;
    else if (this.stream && contentType.includes('text/event-stream')) {
      this.kind = Body.Sse;
      this.sse = new SseParser((data) => this.event(data), MAX_RESPONSE_BYTES);
    }
  }

  body(chunk: Buffer, at: number): void {
    if (this.settled) return;
    if (this.kind === Body.Sse) {
      this.chunkAt = at;
      try {
        this.sse?.push(chunk);
      } catch (error) {
        if (!(error instanceof SseLimitError)) throw error;
        this.finish('malformed_stream', `${error.message}; the stream is dropped`, at);
      }
      return;
    }
    if (this.kind === Body.Json && this.size + chunk.length > MAX_RESPONSE_BYTES) {
      return this.finish('malformed_response', `the response body is over ${MAX_RESPONSE_BYTES} bytes; it is dropped`, at);
    }
    this.parts.push(Buffer.from(chunk)); // copied: the slice is a view of the reused read buffer
    this.size += chunk.length;
    // The status is the error; once the detail has enough of the body, a body that goes on (or never ends) is not waited for.
    if (this.kind === Body.Error && this.size >= ERROR_BODY_LIMIT) this.finishError(at);
  }

  private finishError(at: number): void {
    const where = this.location === '' ? '' : ` (Location: ${this.location})`;
    this.finish(`http_${this.status}`, `HTTP ${this.status}${where}: ${this.text()}`, at);
  }

  private text(): string {
    return this.parts.length === 1 ? (this.parts[0] as Buffer).toString() : Buffer.concat(this.parts).toString();
  }

  end(at: number): void {
    this.receiving = false;
    if (this.settled) return;
    switch (this.kind) {
      case Body.Error:
        return this.finishError(at);
      case Body.Sse:
        this.sse?.push('\n\n'); // a final event without its blank line still counts
        if (this.settled) return;
        if (!this.done) return this.finish('malformed_stream', 'the stream ended before `data: [DONE]`', at);
        return this.finish(undefined, undefined, at);
      case Body.Json: {
        const body = this.text();
        let parsed: ChunkShape | null;
        try {
          parsed = JSON.parse(body) as ChunkShape | null;
        } catch {
          // A stream asked for and answered otherwise: the type says why its events were not read as such.
          const type = this.stream ? ` (Content-Type: ${this.contentType || 'none'}; a stream is text/event-stream)` : '';
          return this.finish('malformed_response', `the response is not JSON${type}: ${body}`, at);
        }
        const message = parsed?.choices?.[0]?.message;
        if (typeof message?.content !== 'string') return this.finish('malformed_response', 'the response has no choices[0].message.content', at);
        this.result.text = message.content;
        this.result.usage = usageOf(parsed?.usage);
        return this.finish(undefined, undefined, at);
      }
    }
  }

  fail(kind: FailureKind, detail: string): void {
    this.receiving = false; // the pool has dropped the connection already
    // Broken HTTP framing is a malformed body, named as the mode names it.
    this.finish(kind === 'malformed' ? (this.stream ? 'malformed_stream' : 'malformed_response') : kind, detail);
  }

  private event(data: string): void {
    if (this.settled || this.done) return;
    if (data === '[DONE]') {
      this.done = true;
      this.finish(undefined, undefined, this.chunkAt);
      // Usually the body's end is in this read or the next: look again once this read is handled.
      setImmediate(() => this.receiving && setTimeout(() => this.receiving && this.cancel(), AFTER_DONE_MS).unref());
      return;
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(data);
    } catch {
      return this.finish('malformed_stream', `an event is not JSON: ${data}`);
    }
    if (!isJsonObject(parsed)) return this.finish('malformed_stream', `an event is not a JSON object: ${data}`);
    const event = parsed as ChunkShape;
    if (event.error !== undefined) return this.finish('stream_error', `the server sent an error event: ${JSON.stringify(event.error)}`);
    const usage = usageOf(event.usage);
    if (usage) this.result.usage = usage;
    const delta = event.choices?.[0]?.delta;
    if (!delta) return;
    const piece = typeof delta.content === 'string' ? delta.content : '';
    const reasoning = typeof delta.reasoning_content === 'string' ? delta.reasoning_content : '';
    if (piece.length === 0 && reasoning.length === 0) return;
    const result = this.result;
    const now = this.chunkAt;
    if (result.chunks === 0) result.ttftMs = now - result.startMs;
    else result.itlMs.push(now - this.lastChunk);
    this.lastChunk = now;
    result.chunks++;
    result.text += reasoning + piece;
  }

  /** Settles once; an error while the response is still arriving also drops its connection. */
  private finish(error: string | undefined, detail: string | undefined, at = performance.now()): void {
    if (this.settled) return;
    this.settled = true;
    this.inFlight.delete(this.interrupt);
    const result = this.result;
    result.e2eMs = at - result.startMs;
    if (error !== undefined) {
      result.error = error;
      result.errorDetail = detail;
      if (this.receiving) this.cancel();
    }
    this.resolve(result);
  }
}

export function sendChatRequest(endpoint: Endpoint, body: string, inFlight: InFlight): Promise<RequestResult> {
  return new Promise((resolve) => {
    const exchange = new ChatExchange(endpoint.stream, inFlight, resolve);
    inFlight.add(exchange.interrupt);
    exchange.cancel = endpoint.pool.send(endpoint.pool.requestFor(body), exchange);
  });
}
