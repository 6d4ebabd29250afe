/**
 * Serving calls. A call arrives one of two ways: as a record on a call channel (`POST /_channel`,
 * every call between nodes), or as an HTTP/2 stream of its own (`POST /named/<name>` or
 * `/actors/<id>`, for external clients). Both become one `ServedCall` and take one path: the body
 * is checked, the target found, the call delivered to its cell, and the outcome answered as a
 * status and JSON body (`{result}` or `{error: {code, message}}`), or for a stream call as items
 * (channel ITEM records, or frames on the call's own stream).
 */
import type http2 from 'node:http2';
import type { ActorCell, CallMode } from '../core/cell.js';
import type { ServerLimits } from '../core/limits.js';
import { BatchWriter } from '../core/batch-writer.js';
import { ServerChannel } from '../core/channel.js';
import { parseCallBody, toJson } from '../core/codec.js';
import { ActorError, STATUS_OF, errorMessage, knownCode, type ActorErrorCode } from '../core/errors.js';
import type { NodeMetrics } from '../core/metrics.js';
import type { Peer } from '../core/listener.js';
import type { LocalActors } from '../core/registry.js';
import { sendItems, stopProducer } from '../core/stream-out.js';
import { readBody } from '../core/transport.js';
import { refuseWithError, respondJson } from './route-table.js';

/**
 * Call channels one connection may hold open. A node opens one per peer (and a new one after a
 * break); each channel runs limits.max_streams stream calls, so a client opening a channel on every
 * HTTP/2 stream would run max_streams squared of them, with the state each holds.
 */
export const MAX_CHANNELS_PER_CONNECTION = 4;

/** One call to serve, whichever way it came. */
interface ServedCall {
  mode: CallMode;
  /** The path of the actor: `/named/<name>` or `/actors/<id>`. */
  target: string;
  body: Buffer;
  /** Answers the call; a call its caller gave up on is answered by nobody. */
  reply(status: number, json: string): void;
  /** The call no longer holds its body (answered, or for a tell handled): its bytes leave the budget. Called once. */
  release(): void;
  /** Set while the call runs: the caller's cancel (a CANCEL record, a reset stream) reaches it here. */
  onCancel?: (() => void) | undefined;
}

export interface CallServerOptions {
  nodeId: string;
  actors: LocalActors;
  metrics: NodeMetrics;
  limits: ServerLimits;
  /** The client on the other end of a stream's connection. */
  peerOf(stream: http2.ServerHttp2Stream): Peer;
  log(message: string): void;
}

export class CallServer {
  private readonly channels = new Set<ServerChannel>();
  /** Open channels by connection. */
  private readonly channelsOf = new WeakMap<Peer, number>();

  constructor(private readonly options: CallServerOptions) {}

  /** `POST /_channel`: the callee's end of a peer's call channel. */
  openChannel(stream: http2.ServerHttp2Stream): void {
    const peer = this.options.peerOf(stream);
    const open = this.channelsOf.get(peer) ?? 0;
    if (open >= MAX_CHANNELS_PER_CONNECTION) {
      const error = new ActorError('overloaded', `this connection has ${open} call channels open already; at most ${MAX_CHANNELS_PER_CONNECTION}`);
      return refuseWithError(stream, error);
    }
    this.channelsOf.set(peer, open + 1);
    const channel = new ServerChannel(stream, {
      budget: peer.budget,
      streamWindow: peer.streamWindow,
      maxRecordBytes: this.options.limits.maxCallBytes,
      maxStreams: this.options.limits.maxStreams,
      recordTimeoutMs: this.options.limits.bodyTimeoutMs,
      handle: (call) => this.serve(call, (iterable) => call.stream(iterable)),
      malformed: (problem) => {
        this.options.metrics.badRequests.inc({ path: 'channel' });
        this.options.log(`call channel reset: ${problem}`);
      },
      closed: (c) => {
        this.channels.delete(c);
        this.channelsOf.set(peer, (this.channelsOf.get(peer) ?? 1) - 1);
      },
    });
    this.channels.add(channel);
  }

  /** `POST /named/...` or `/actors/...`: one call on a stream of its own; the mode comes in `x-message-mode`. */
  async serveStream(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, path: string): Promise<void> {
    const mode = headers['x-message-mode'] ?? 'ask';
    if (mode !== 'ask' && mode !== 'tell' && mode !== 'stream') {
      this.options.metrics.badRequests.inc({ path: 'call' });
      return refuseWithError(stream, new ActorError('bad-request', `header x-message-mode must be ask, tell or stream, not '${String(mode)}'`));
    }
    const { budget } = this.options.peerOf(stream);
    const { maxCallBytes, bodyTimeoutMs } = this.options.limits;
    let body: Buffer;
    try {
      body = await readBody(stream, { maxBytes: maxCallBytes, limitName: 'max_call_bytes', budget, timeoutMs: bodyTimeoutMs });
    } catch (error) {
      this.options.metrics.badRequests.inc({ path: 'call' });
      return refuseWithError(stream, error);
    }
    let held = body.length;
    const call: ServedCall = {
      mode,
      target: path,
      body,
      reply: (status, json) => respondJson(stream, status, json),
      release: () => {
        budget.give(held);
        held = 0;
      },
    };
    // A caller that resets its stream cancels a call still waiting in the mailbox.
    stream.once('close', () => call.onCancel?.());
    this.serve(call, (value) => pump(stream, value));
  }

  /**
   * The one way every call is served; `streamReply` writes the reply of a `stream` call. Whatever
   * a call carries, its failure is its reply: nothing it does may throw into the transport.
   */
  private serve(call: ServedCall, streamReply: (iterable: AsyncIterable<unknown>) => Promise<void>): void {
    try {
      this.deliver(call, streamReply);
    } catch (error) {
      answer(call, 'failed', errorMessage(error));
    }
  }

  private deliver(call: ServedCall, streamReply: (iterable: AsyncIterable<unknown>) => Promise<void>): void {
    let body;
    try {
      body = parseCallBody(call.body);
    } catch (error) {
      this.options.metrics.badRequests.inc({ path: 'call' });
      return answer(call, 'bad-request', errorMessage(error));
    }
    const cell = this.cellAt(call.target);
    if (cell instanceof ActorError) return answer(call, cell.code, cell.message);
    const delivery = cell.deliver(body.method, body.args, call.mode);
    if (call.mode === 'tell') {
      // A tell is answered at once, but its body is held until the actor has handled it.
      delivery.result.then(call.release, (e) => {
        call.release();
        this.options.log(`tell ${cell.label}.${body.method} failed: ${errorMessage(e)}`);
      });
      return call.reply(202, '{}');
    }
    // The caller's cancel drops the call if still queued and aborts its signal if running.
    call.onCancel = () => delivery.cancel();
    delivery.result.then(
      (value) => {
        call.onCancel = undefined;
        if (call.mode === 'stream') {
          call.release();
          return void streamReply(value as AsyncIterable<unknown>);
        }
        let json: string;
        try {
          json = toJson({ result: value ?? null }, `the reply of ${cell.label}.${body.method}`);
        } catch (error) {
          return answer(call, 'failed', errorMessage(error));
        }
        call.release();
        call.reply(200, json);
      },
      (error) => {
        call.onCancel = undefined;
        const e = error instanceof ActorError ? error : new ActorError('failed', errorMessage(error));
        answer(call, e.code, e.message);
      },
    );
  }

  /** The local actor a call path (`/named/<name>` or `/actors/<id>`) names, or why there is none. */
  private cellAt(path: string): ActorCell | ActorError {
    let key: string;
    try {
      key = decodeURIComponent(path.slice(path.indexOf('/', 1) + 1));
    } catch {
      return new ActorError('bad-request', `path ${path} is not valid percent-encoding`);
    }
    const named = path.startsWith('/named/');
    if (!named && !path.startsWith('/actors/')) return new ActorError('bad-request', `call target ${path} is neither /named/<name> nor /actors/<id>`);
    const cell = named ? this.options.actors.named(key) : this.options.actors.withId(key);
    return cell ?? new ActorError('not-found', `no actor ${named ? `named '${key}'` : `with id ${key}`} on node ${this.options.nodeId}`);
  }

  /** Ends the channels (node shutdown); callers' pending calls fail and they reopen on their next call. */
  close(): void {
    for (const channel of this.channels) channel.end();
  }
}

/** Answers a call with an error; it holds its body no longer. */
function answer(call: ServedCall, code: ActorErrorCode, message: string): void {
  call.release();
  // An actor may throw an ActorError with a code of its own making.
  const known = knownCode(code);
  call.reply(STATUS_OF[known], errorJson(known, message));
}

function errorJson(code: ActorErrorCode, message: string): string {
  return JSON.stringify({ error: { code, message } });
}

/**
 * Writes a streamed reply as frames, the frames of one tick in one write, honouring HTTP/2 flow
 * control; a reset stream stops the producer.
 */
async function pump(stream: http2.ServerHttp2Stream, iterable: AsyncIterable<unknown>): Promise<void> {
  const iterator = iterable[Symbol.asyncIterator]();
  let closed = stream.closed;
  const onClose = (): void => {
    closed = true;
    stopProducer(iterator);
  };
  if (closed) return stopProducer(iterator);
  stream.once('close', onClose);
  stream.respond({ ':status': 200, 'content-type': 'application/octet-stream', 'x-response-type': 'stream' });
  const writer = new BatchWriter(stream);
  try {
    await sendItems(iterator, {
      get gone() {
        return closed;
      },
      room: () => (closed ? undefined : writer.room()),
      send: (frame) => writer.write(frame),
      last: (frame) => {
        writer.write(frame);
        writer.end();
      },
    });
  } finally {
    stream.off('close', onClose);
  }
}
