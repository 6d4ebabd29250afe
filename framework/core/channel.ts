/**
 * The call channel: node-to-node calls ride one long-lived HTTP/2 stream per peer (`POST /_channel`
 * on the node's h2c listener, over the pooled session) instead of one stream per call. Opening,
 * HPACK-coding and closing a stream costs Node about 30 µs of CPU on each side, which caps a stream
 * per call near 30k calls/s; on the channel many calls share one write, and the items that the
 * streamed replies of one tick carry go out together.
 *
 * Records use the framing of codec.ts (`u32 BE length | body`); a body is
 *   u8 kind | u32 BE call id | by kind:
 *   CALL   (1): u8 mode (0 ask, 1 tell, 2 stream) | u16 BE target length | target | JSON {method, args}
 *   REPLY  (2): u16 BE status | JSON reply, as the per-message routes answer ({result} or {error});
 *               for a stream call, status 200 (body `{}`) says its items follow
 *   CANCEL (3): nothing; the caller gave up (abort, timeout, left the stream), the callee stops the call
 *   ITEM   (4): one frame of a streamed reply, as codec.ts encodes them (a value, END or ERROR)
 *   CREDIT (5): u32 BE bytes; the caller has read that many bytes of the stream's items
 * The target is the path of the per-message route (`/named/<name>` or `/actors/<id>`).
 *
 * A stream's items are flow-controlled on their own, as HTTP/2 streams are: the callee sends value
 * items while fewer than STREAM_WINDOW_BYTES of them are unread, so a slow reader holds back its own
 * stream only, never the channel. END and ERROR items need no window.
 */
import http2 from 'node:http2';
import { FLAG_END, FLAG_ERROR, FrameError, LengthPrefixedDecoder, allocRecord, frameValue, parseFrame, type Frame } from './codec.js';
import { BatchWriter } from './batch-writer.js';
import { ActorError } from './errors.js';
import type { ConnectionBudget } from './budget.js';
import { DEFAULT_LIMITS } from './limits.js';
import { decodeReply } from './remote.js';
import { MAX_REPLY_BYTES, type Reply, type Transport } from './transport.js';
import { sendItems, stopProducer } from './stream-out.js';

const { NGHTTP2_CANCEL, NGHTTP2_PROTOCOL_ERROR } = http2.constants;

export const CHANNEL_PATH = '/_channel';

/** A record carries one call body or reply plus its header and target (up to 64 KiB). */
const MAX_RECORD_OVERHEAD = 70 * 1024;

/** Decodes records whose body (a call or a reply) is at most `maxBodyBytes`. */
export const channelDecoder = (maxBodyBytes = MAX_REPLY_BYTES): LengthPrefixedDecoder<ChannelRecord> => new LengthPrefixedDecoder(parseChannelRecord, maxBodyBytes + MAX_RECORD_OVERHEAD);

export const CALL = 1;
export const REPLY = 2;
export const CANCEL = 3;
export const ITEM = 4;
export const CREDIT = 5;

/** Unread bytes of value items a stream may have in flight (HTTP/2's default stream window). */
export const STREAM_WINDOW_BYTES = 64 * 1024;

export type ChannelMode = 'ask' | 'tell' | 'stream';
const MODES: readonly ChannelMode[] = ['ask', 'tell', 'stream'];

export type ChannelRecord =
  | { kind: typeof CALL; id: number; mode: ChannelMode; target: string; body: Buffer }
  | { kind: typeof REPLY; id: number; status: number; body: Buffer }
  | { kind: typeof CANCEL; id: number }
  | { kind: typeof ITEM; id: number; frame: Frame; size: number }
  | { kind: typeof CREDIT; id: number; bytes: number };

export function encodeCall(id: number, mode: ChannelMode, target: string, json: string): Buffer {
  const targetLength = Buffer.byteLength(target);
  const out = allocRecord(1 + 4 + 1 + 2 + targetLength + Buffer.byteLength(json));
  let at = out.writeUInt8(CALL, 4);
  at = out.writeUInt32BE(id, at);
  at = out.writeUInt8(MODES.indexOf(mode), at);
  at = out.writeUInt16BE(targetLength, at);
  at += out.write(target, at);
  out.write(json, at);
  return out;
}

export function encodeReply(id: number, status: number, json: string): Buffer {
  const out = allocRecord(1 + 4 + 2 + Buffer.byteLength(json));
  let at = out.writeUInt8(REPLY, 4);
  at = out.writeUInt32BE(id, at);
  at = out.writeUInt16BE(status, at);
  out.write(json, at);
  return out;
}

export function encodeCancel(id: number): Buffer {
  const out = allocRecord(1 + 4);
  out.writeUInt8(CANCEL, 4);
  out.writeUInt32BE(id, 5);
  return out;
}

/** An ITEM record carrying `frame` (as codec.ts encodes it, length prefix included). */
export function encodeItem(id: number, frame: Buffer): Buffer {
  const out = allocRecord(1 + 4 + frame.length - 4);
  out.writeUInt8(ITEM, 4);
  out.writeUInt32BE(id, 5);
  frame.copy(out, 9, 4);
  return out;
}

export function encodeCredit(id: number, bytes: number): Buffer {
  const out = allocRecord(1 + 4 + 4);
  out.writeUInt8(CREDIT, 4);
  out.writeUInt32BE(id, 5);
  out.writeUInt32BE(bytes, 9);
  return out;
}

/** Parses one record body; throws FrameError naming what is wrong. */
export function parseChannelRecord(body: Buffer): ChannelRecord {
  if (body.length < 5) throw new FrameError(`channel record of ${body.length} bytes is shorter than its header`);
  const kind = body[0]!;
  const id = body.readUInt32BE(1);
  if (kind === CALL) {
    if (body.length < 8) throw new FrameError('CALL record truncated in its header');
    const mode = MODES[body[5]!];
    if (!mode) throw new FrameError(`CALL record has unknown mode ${body[5]}`);
    const targetLength = body.readUInt16BE(6);
    if (8 + targetLength > body.length) throw new FrameError('CALL record truncated in its target');
    return { kind, id, mode, target: body.toString('utf8', 8, 8 + targetLength), body: body.subarray(8 + targetLength) };
  }
  if (kind === REPLY) {
    if (body.length < 7) throw new FrameError('REPLY record truncated in its status');
    return { kind, id, status: body.readUInt16BE(5), body: body.subarray(7) };
  }
  if (kind === CANCEL) {
    if (body.length !== 5) throw new FrameError(`CANCEL record has ${body.length - 5} trailing bytes`);
    return { kind, id };
  }
  if (kind === ITEM) return { kind, id, frame: parseFrame(body.subarray(5)), size: body.length - 5 };
  if (kind === CREDIT) {
    if (body.length !== 9) throw new FrameError(`CREDIT record has ${body.length - 5} bytes where 4 belong`);
    return { kind, id, bytes: body.readUInt32BE(5) };
  }
  throw new FrameError(`unknown channel record kind ${kind}`);
}

interface Pending {
  resolve(reply: Reply): void;
  reject(error: ActorError): void;
  timer: NodeJS.Timeout;
  signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
}

const NO_HEADERS: http2.IncomingHttpHeaders = {};

/** A streamed reply being received: what arrived and is unread, and how the reader is woken. */
interface IncomingStream {
  target: string;
  /** The callee's REPLY 200 came: its items follow (until then the call's timeout runs). */
  started: boolean;
  /** The END or ERROR item came (or an error REPLY): the callee is done with the call. */
  ended: boolean;
  items: Array<{ frame: Frame; size: number }>;
  /** Why reading stops before the items run out: cancelled, timed out, the channel broke. */
  failure: ActorError | undefined;
  wake: (() => void) | undefined;
  /** The call's timeout, until its stream starts. */
  timer: NodeJS.Timeout | undefined;
  /** Bytes of value items received and not yet given back as CREDIT. */
  unacknowledged: number;
  /** Bytes of value items read since the last CREDIT. */
  read: number;
}

/** The caller's end of a channel to one peer. */
class ClientChannel {
  private readonly pending = new Map<number, Pending>();
  private readonly streams = new Map<number, IncomingStream>();
  /** Stream calls holding a slot (sent, or about to be), and those waiting for one: a freed slot goes to the first in line. */
  private streamSlots = 0;
  private readonly streamsWaiting: Array<(granted: boolean) => void> = [];
  private readonly writer: BatchWriter;
  private nextId = 1;
  private closed = false;

  constructor(
    private readonly addr: string,
    private readonly stream: http2.ClientHttp2Stream,
    /** Stream calls sent at once; more wait for one to end, as HTTP/2 holds streams past the peer's limit. */
    private readonly maxStreams: number,
    private readonly onClosed: (channel: ClientChannel) => void,
  ) {
    this.writer = new BatchWriter(stream);
    const decoder = channelDecoder();
    stream.on('response', (headers) => {
      const status = Number(headers[':status']);
      if (status !== 200) this.break(`${addr} refused the call channel (status ${status})`);
    });
    stream.on('data', (chunk: Buffer) => {
      let records: ChannelRecord[];
      try {
        records = decoder.push(chunk);
      } catch (error) {
        return this.break(`${addr} sent a malformed channel record: ${(error as Error).message}`, NGHTTP2_PROTOCOL_ERROR);
      }
      for (const record of records) {
        if (record.kind === REPLY) {
          const call = this.pending.get(record.id);
          if (call) {
            this.settle(record.id, call);
            call.resolve({ status: record.status, headers: NO_HEADERS, body: record.body });
          } else this.streamReply(record.id, record.status, record.body);
          // Neither: the call was cancelled or timed out and its late reply is dropped.
        } else if (record.kind === ITEM) {
          const problem = this.streamItem(record.id, record.frame, record.size);
          if (problem) return this.break(`${addr} ${problem}`, NGHTTP2_PROTOCOL_ERROR);
        } else return this.break(`${addr} sent a channel record of kind ${record.kind}; only REPLY and ITEM go this way`, NGHTTP2_PROTOCOL_ERROR);
      }
    });
    stream.once('end', () => this.break(`${addr} closed the call channel`));
    stream.once('close', () => this.break(`${addr}: call channel closed (code ${stream.rstCode ?? 'none'})`));
  }

  /** Ids wrap at 2^32; a call still pending after four billion others is long timed out. */
  private takeId(): number {
    const id = this.nextId;
    this.nextId = id === 0xffffffff ? 1 : id + 1;
    return id;
  }

  call(mode: 'ask' | 'tell', target: string, json: string, timeoutMs: number, signal: AbortSignal | undefined): Promise<Reply> {
    if (signal?.aborted) return Promise.reject(new ActorError('cancelled', `call to ${this.addr}${target} cancelled`));
    const id = this.takeId();
    this.writer.write(encodeCall(id, mode, target, json));
    return new Promise<Reply>((resolve, reject) => {
      const call: Pending = {
        resolve,
        reject,
        timer: setTimeout(() => this.giveUp(id, new ActorError('timeout', `no reply from ${this.addr}${target} within ${timeoutMs} ms`)), timeoutMs),
        signal,
        onAbort: undefined,
      };
      if (signal) {
        call.onAbort = () => this.giveUp(id, new ActorError('cancelled', `call to ${this.addr}${target} cancelled`));
        signal.addEventListener('abort', call.onAbort, { once: true });
      }
      this.pending.set(id, call);
    });
  }

  /**
   * A stream call: its items as they come. The timeout bounds the wait for the stream to start
   * (a free stream slot included, unless `queue`: then only the signal ends that wait), not its
   * length; the signal, or leaving the loop before the end, sends CANCEL.
   */
  async *streamCall(target: string, json: string, timeoutMs: number, signal: AbortSignal | undefined, queue = false): AsyncGenerator<unknown> {
    if (signal?.aborted) throw new ActorError('cancelled', `stream from ${this.addr}${target} cancelled`);
    const id = this.takeId();
    const fail = (error: ActorError): void => {
      if (s.ended || s.failure) return;
      s.failure = error;
      s.wake?.();
    };
    const s: IncomingStream = {
      target,
      started: false,
      ended: false,
      items: [],
      failure: undefined,
      wake: undefined,
      timer: undefined,
      unacknowledged: 0,
      read: 0,
    };
    const startTimer = (): void => {
      s.timer = setTimeout(() => fail(new ActorError('timeout', `${this.addr}${target} did not start its stream within ${timeoutMs} ms`)), timeoutMs);
    };
    if (!queue) startTimer();
    const onAbort = (): void => fail(new ActorError('cancelled', `stream from ${this.addr}${target} cancelled`));
    signal?.addEventListener('abort', onAbort, { once: true });
    let holdsSlot = false;
    try {
      if (this.streamSlots < this.maxStreams) this.streamSlots++;
      else if (!(await this.streamSlot(s))) throw s.failure ?? new ActorError('unreachable', `${this.addr}: the call channel closed while the stream waited to start`);
      holdsSlot = true;
      if (s.failure) throw s.failure;
      if (queue) startTimer();
      this.streams.set(id, s);
      this.writer.write(encodeCall(id, 'stream', target, json));
      for (;;) {
        if (s.failure) throw s.failure;
        const item = s.items.shift();
        if (!item) {
          await new Promise<void>((resolve) => (s.wake = resolve));
          s.wake = undefined;
          continue;
        }
        if (item.frame.flags & FLAG_ERROR) throw new ActorError('failed', item.frame.error ?? 'stream failed');
        if (item.frame.flags & FLAG_END) return;
        this.credit(id, s, item.size);
        let value: unknown;
        try {
          value = frameValue(item.frame);
        } catch (error) {
          throw new ActorError('failed', `${this.addr}${target} sent a stream item that is not JSON: ${(error as Error).message}`);
        }
        yield value;
      }
    } finally {
      clearTimeout(s.timer);
      signal?.removeEventListener('abort', onAbort);
      // Its CALL went out: the callee may still be running it.
      if (this.streams.delete(id) && !s.ended && !this.closed) this.writer.write(encodeCancel(id));
      if (holdsSlot) {
        const next = this.streamsWaiting.shift();
        if (next) next(true);
        else this.streamSlots--;
      }
    }
  }

  /** Resolves true when a slot is handed over, false when the stream fails (cancelled, timed out, channel broken) while it waits. */
  private streamSlot(s: IncomingStream): Promise<boolean> {
    return new Promise((resolve) => {
      const waiter = (granted: boolean): void => {
        s.wake = undefined;
        resolve(granted);
      };
      this.streamsWaiting.push(waiter);
      s.wake = () => {
        this.streamsWaiting.splice(this.streamsWaiting.indexOf(waiter), 1);
        waiter(false);
      };
    });
  }

  /** A stream call's REPLY: 200 starts its items; anything else is why it failed. */
  private streamReply(id: number, status: number, body: Buffer): void {
    const s = this.streams.get(id);
    if (!s || s.started || s.ended) return;
    clearTimeout(s.timer);
    if (status === 200) {
      s.started = true;
      return;
    }
    s.ended = true;
    try {
      decodeReply(status, body, this.addr);
      s.failure ??= new ActorError('failed', `${this.addr}${s.target} answered ${status}, not a stream`);
    } catch (error) {
      s.failure ??= error as ActorError;
    }
    s.wake?.();
  }

  /** Queues an ITEM for its reader; says what is wrong when the callee broke the protocol. */
  private streamItem(id: number, frame: Frame, size: number): string | undefined {
    const s = this.streams.get(id);
    // No reader: it left or gave up, and CANCEL is on its way.
    if (!s) return undefined;
    if (!s.started || s.ended) return `sent an item for call ${id}, ${s.ended ? 'after its end' : 'before its stream started'}`;
    if (frame.flags & (FLAG_END | FLAG_ERROR)) s.ended = true;
    else {
      if (s.unacknowledged >= STREAM_WINDOW_BYTES) return `sent past the window of stream ${id}`;
      s.unacknowledged += size;
    }
    s.items.push({ frame, size });
    s.wake?.();
    return undefined;
  }

  /** The reader took `size` bytes: once half the window is read, the callee may send that much more. */
  private credit(id: number, s: IncomingStream, size: number): void {
    s.read += size;
    if (s.read < STREAM_WINDOW_BYTES / 2 || s.ended || this.closed) return;
    this.writer.write(encodeCredit(id, s.read));
    s.unacknowledged -= s.read;
    s.read = 0;
  }

  /** The caller stopped waiting: fail the call now and tell the callee to abort it. */
  private giveUp(id: number, error: ActorError): void {
    const call = this.pending.get(id);
    if (!call) return;
    this.settle(id, call);
    call.reject(error);
    if (!this.closed) this.writer.write(encodeCancel(id));
  }

  private settle(id: number, call: Pending): void {
    this.pending.delete(id);
    clearTimeout(call.timer);
    if (call.onAbort) call.signal!.removeEventListener('abort', call.onAbort);
  }

  /** Fails every pending call and unfinished stream with `unreachable` (as a broken stream did) and drops the channel. */
  break(message: string, code = NGHTTP2_CANCEL): void {
    if (!this.closed) {
      this.closed = true;
      this.onClosed(this);
      if (!this.stream.closed) this.stream.close(code);
    }
    for (const [id, call] of this.pending) {
      this.settle(id, call);
      call.reject(new ActorError('unreachable', message));
    }
    for (const s of this.streams.values()) {
      if (s.ended || s.failure) continue;
      s.failure = new ActorError('unreachable', message);
      s.wake?.();
    }
    // Streams waiting for a slot fail too.
    for (const waiter of this.streamsWaiting.splice(0)) waiter(false);
  }
}

/** Channels of this node to its peers, one per address, opened on first use and after a break. */
export class ChannelPool {
  private readonly channels = new Map<string, ClientChannel>();

  constructor(
    private readonly transport: Transport,
    /** Stream calls one channel sends at once (the node's `limits.max_streams`). */
    private readonly maxStreams = DEFAULT_LIMITS.maxStreams,
  ) {}

  call(addr: string, mode: 'ask' | 'tell', target: string, json: string, timeoutMs: number, signal?: AbortSignal): Promise<Reply> {
    try {
      this.transport.assertReachable(addr);
      return this.channel(addr).call(mode, target, json, timeoutMs, signal);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** A streamed reply over the channel to `addr` (see ClientChannel.streamCall). */
  async *stream(addr: string, target: string, json: string, timeoutMs: number, signal?: AbortSignal, queue = false): AsyncGenerator<unknown> {
    this.transport.assertReachable(addr);
    yield* this.channel(addr).streamCall(target, json, timeoutMs, signal, queue);
  }

  private channel(addr: string): ClientChannel {
    const existing = this.channels.get(addr);
    if (existing) return existing;
    const stream = this.transport.open(addr, CHANNEL_PATH, { keepOpen: true, headers: { 'content-type': 'application/octet-stream' } });
    const channel = new ClientChannel(addr, stream, this.maxStreams, (c) => {
      if (this.channels.get(addr) === c) this.channels.delete(addr);
    });
    this.channels.set(addr, channel);
    return channel;
  }

  close(): void {
    for (const channel of [...this.channels.values()]) channel.break('transport is closed');
  }
}

/**
 * A call arriving on a channel; `reply` answers it (once), or for a stream call `stream` sends its
 * items; `onCancel` learns of the caller's CANCEL.
 */
export interface IncomingCall {
  mode: ChannelMode;
  target: string;
  body: Buffer;
  reply(status: number, json: string): void;
  /** Starts a stream call's reply and sends the items of `iterable`, within the stream's window, until it ends or the caller cancels. */
  stream(iterable: AsyncIterable<unknown>): Promise<void>;
  /** The call no longer holds its body: its bytes leave the connection's budget (once). */
  release(): void;
  /** Set by the handler for calls that keep running after it returns. */
  onCancel?: () => void;
}

/** A streamed reply being sent: bytes of its value items the caller has not read yet, and its sender's wake-up. */
interface OutgoingStream {
  unacknowledged: number;
  resume: (() => void) | undefined;
}

export interface ServerChannelOptions {
  /** Bytes of records being received and of calls not yet released are charged here; while it is full the channel stops reading. */
  budget: ConnectionBudget;
  /**
   * Unread bytes of streamed items that all the channels of this connection together may have out.
   * Each stream has its window, but a caller opening many channels with many stream calls and reading
   * none would otherwise make the node hold channels x streams x STREAM_WINDOW_BYTES of items.
   */
  streamWindow: ConnectionBudget;
  /** Largest CALL body; a longer record resets the channel. */
  maxRecordBytes: number;
  /** Stream calls one channel may run at once (as HTTP/2's concurrent streams); more are answered `overloaded`. */
  maxStreams: number;
  /** A record must arrive whole within this time from its first byte, as a per-message body must; else the channel is reset. */
  recordTimeoutMs: number;
  handle(call: IncomingCall): void;
  malformed(message: string): void;
  closed(channel: ServerChannel): void;
}

/**
 * The callee's end of a channel: dispatches CALLs, writes REPLYs and streamed ITEMs, forwards
 * CANCELs, takes CREDITs. A peer sending more than the budget allows is slowed, not refused: the
 * channel stops reading, so HTTP/2 flow control holds the peer's writes until calls are answered
 * and their bytes given back.
 */
export class ServerChannel {
  private readonly running = new Map<number, IncomingCall>();
  /** Streamed replies being sent, by call id. */
  private readonly sending = new Map<number, OutgoingStream>();
  /** Stream calls running (from their CALL to their end or the caller's CANCEL). */
  private streamCalls = 0;
  private readonly writer: BatchWriter;
  private readonly decoder: LengthPrefixedDecoder<ChannelRecord>;
  /** The caller ended its side: end ours once the calls still running have replied. */
  private draining = false;
  /** Bytes of this channel in the budget: an incomplete record plus the bodies of calls not released. */
  private charged = 0;
  /** The stream has closed and the channel's bytes have been given back. */
  private gone = false;
  /** Runs while a record is incomplete: its bytes are charged to the budget, and a peer that never finishes it would hold them for good. */
  private recordTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly stream: http2.ServerHttp2Stream,
    private readonly options: ServerChannelOptions,
  ) {
    // A caller that does not read its replies gets no more calls read: they would only pile up
    // replies here. Its flow-control window then stops it sending.
    this.writer = new BatchWriter(stream, (held) => (held ? stream.pause() : stream.resume()));
    this.decoder = new LengthPrefixedDecoder(parseChannelRecord, options.maxRecordBytes + MAX_RECORD_OVERHEAD);
    stream.respond({ ':status': 200, 'content-type': 'application/octet-stream' });
    stream.on('data', (chunk: Buffer) => this.receive(chunk));
    stream.once('end', () => {
      this.draining = true;
      this.endIfDrained();
    });
    stream.once('close', () => {
      clearTimeout(this.recordTimer);
      options.closed(this);
      for (const call of this.running.values()) call.onCancel?.();
      this.running.clear();
      this.streamCalls = 0;
      // Everything the channel held leaves the budget now; calls still finishing give back nothing more.
      this.give(this.charged);
      this.gone = true;
    });
  }

  private receive(chunk: Buffer): void {
    const { budget } = this.options;
    budget.take(chunk.length);
    this.charged += chunk.length;
    const heldBefore = this.decoder.heldBytes;
    let records: ChannelRecord[];
    try {
      records = this.decoder.push(chunk);
    } catch (error) {
      this.options.malformed((error as Error).message);
      return this.reset();
    }
    this.timeRecord(records.length > 0);
    // What the decoder no longer holds, less the bodies of the calls it produced, leaves the budget now.
    let kept = 0;
    for (const record of records) if (record.kind === CALL) kept += record.body.length;
    this.give(heldBefore + chunk.length - this.decoder.heldBytes - kept);
    for (const record of records) {
      if (record.kind === CALL) {
        if (this.running.has(record.id)) {
          this.options.malformed(`call id ${record.id} is already in use on this channel`);
          return this.reset();
        }
        if (record.mode === 'stream' && this.streamCalls >= this.options.maxStreams) {
          this.give(record.body.length);
          const error = { code: 'overloaded', message: `this channel runs ${this.options.maxStreams} stream calls already (limits.max_streams)` };
          this.writer.write(encodeReply(record.id, 503, JSON.stringify({ error })));
          continue;
        }
        const call = this.incoming(record.id, record.mode, record.target, record.body);
        this.running.set(record.id, call);
        this.options.handle(call);
      } else if (record.kind === CANCEL) {
        const call = this.running.get(record.id);
        if (call) this.finish(record.id, call);
        call?.onCancel?.();
      } else if (record.kind === CREDIT) {
        // No stream: it ended meanwhile and needs no more credit.
        const out = this.sending.get(record.id);
        if (!out) continue;
        if (record.bytes > out.unacknowledged) {
          this.options.malformed(`CREDIT of ${record.bytes} bytes for stream ${record.id}, which has ${out.unacknowledged} unread`);
          return this.reset();
        }
        out.unacknowledged -= record.bytes;
        this.options.streamWindow.give(record.bytes);
        out.resume?.();
      } else {
        this.options.malformed(`a ${record.kind === REPLY ? 'REPLY' : 'ITEM'} record (call ${record.id}) was sent to the callee`);
        return this.reset();
      }
    }
    if (!budget.full || this.stream.isPaused()) return;
    this.stream.pause();
    budget.whenRoom(() => this.stream.resume(), () => this.stream.closed);
  }

  /** Starts the deadline of an incomplete record when one begins (`completed`: the held bytes, if any, are a new record's). */
  private timeRecord(completed: boolean): void {
    if (completed || !this.decoder.pending) {
      clearTimeout(this.recordTimer);
      this.recordTimer = undefined;
    }
    if (!this.decoder.pending || this.recordTimer) return;
    const { recordTimeoutMs } = this.options;
    this.recordTimer = setTimeout(() => {
      this.options.malformed(`a record did not arrive whole within ${recordTimeoutMs} ms (limit body_timeout_ms); its ${this.decoder.heldBytes} bytes are given back`);
      this.reset();
    }, recordTimeoutMs);
  }

  private give(bytes: number): void {
    if (bytes <= 0 || this.gone) return;
    this.charged -= bytes;
    this.options.budget.give(bytes);
  }

  private incoming(id: number, mode: ChannelMode, target: string, body: Buffer): IncomingCall {
    let held = body.length;
    if (mode === 'stream') this.streamCalls++;
    const call: IncomingCall = {
      mode,
      target,
      body,
      reply: (status, json) => {
        // Answered once; a call cancelled by its caller (or whose channel closed) is no longer
        // running and nobody waits for its reply.
        if (this.running.get(id) !== call) return;
        this.finish(id, call);
        this.writer.write(encodeReply(id, status, json));
        this.endIfDrained();
      },
      stream: (iterable) => this.sendStream(id, call, iterable),
      release: () => {
        this.give(held);
        held = 0;
      },
    };
    return call;
  }

  /** A stream call's REPLY 200, then its items while the caller's window has room, then END (or ERROR). */
  private async sendStream(id: number, call: IncomingCall, iterable: AsyncIterable<unknown>): Promise<void> {
    const iterator = iterable[Symbol.asyncIterator]();
    // Cancelled, or the channel closed, while the call waited for its actor.
    if (this.running.get(id) !== call) return stopProducer(iterator);
    const { streamWindow } = this.options;
    const out: OutgoingStream = { unacknowledged: 0, resume: undefined };
    let stopped = false;
    call.onCancel = () => {
      stopped = true;
      stopProducer(iterator);
      out.resume?.();
    };
    this.sending.set(id, out);
    this.writer.write(encodeReply(id, 200, '{}'));
    try {
      await sendItems(iterator, {
        get gone() {
          return stopped;
        },
        // Any CREDIT of this stream (or the cancel) wakes the sender, which looks again; a CREDIT of
        // any stream on the connection does when the connection's window is what held it.
        room: () => {
          if (stopped || (out.unacknowledged < STREAM_WINDOW_BYTES && !streamWindow.full)) return undefined;
          return new Promise<void>((resolve) => {
            out.resume = resolve;
            if (streamWindow.full) streamWindow.whenRoom(resolve, () => stopped);
          });
        },
        send: (frame) => {
          out.unacknowledged += frame.length - 4;
          streamWindow.take(frame.length - 4);
          this.writer.write(encodeItem(id, frame));
        },
        last: (frame) => this.writer.write(encodeItem(id, frame)),
      });
    } finally {
      this.sending.delete(id);
      // Credit that comes later finds no stream: what is unread leaves the connection's window now.
      if (out.unacknowledged) streamWindow.give(out.unacknowledged);
      if (this.running.get(id) === call) this.finish(id, call);
      this.endIfDrained();
    }
  }

  /**
   * A running call is over for its caller: answered, ended, or cancelled. A stream call's slot is
   * free from then on, as the caller counts it, even while a cancelled producer winds down.
   */
  private finish(id: number, call: IncomingCall): void {
    this.running.delete(id);
    if (call.mode === 'stream') this.streamCalls--;
  }

  /** The caller ended its side: ours ends once no call is left running. */
  private endIfDrained(): void {
    if (this.draining && !this.running.size) this.writer.end();
  }

  private reset(): void {
    if (!this.stream.closed) this.stream.close(NGHTTP2_PROTOCOL_ERROR);
  }

  /** Ends the channel (node shutdown); the caller's pending calls fail and it reopens on its next call. */
  end(): void {
    this.writer.end();
  }
}
