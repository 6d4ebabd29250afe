/**
 * The call channel: node-to-node asks and tells ride one long-lived HTTP/2 stream per peer
 * (`POST /_channel` on the node's h2c listener, over the pooled session) instead of one stream per
 * call. Opening, HPACK-coding and closing a stream costs Node about 30 µs of CPU on each side, which
 * caps a stream per call near 30k calls/s; on the channel many calls share one write.
 *
 * Records use the framing of codec.ts (`u32 BE length | body`); a body is
 *   u8 kind | u32 BE call id | by kind:
 *   CALL   (1): u8 mode (0 ask, 1 tell) | u16 BE target length | target | JSON {method, args}
 *   REPLY  (2): u16 BE status | JSON reply, as the per-message routes answer ({result} or {error})
 *   CANCEL (3): nothing; the caller gave up (abort or timeout), the callee aborts the call's signal
 * The target is the path of the per-message route (`/named/<name>` or `/actors/<id>`).
 * Streamed replies do not ride the channel: they stay one HTTP/2 stream per call.
 */
import http2 from 'node:http2';
import { FrameError, LengthPrefixedDecoder, allocRecord } from './codec.js';
import { ActorError } from './errors.js';
import type { ConnectionBudget } from './budget.js';
import { MAX_REPLY_BYTES, type Reply, type Transport } from './transport.js';

const { NGHTTP2_CANCEL, NGHTTP2_PROTOCOL_ERROR } = http2.constants;

export const CHANNEL_PATH = '/_channel';

/** A record carries one call body or reply plus its header and target (up to 64 KiB). */
const MAX_RECORD_OVERHEAD = 70 * 1024;

/** Decodes records whose body (a call or a reply) is at most `maxBodyBytes`. */
export const channelDecoder = (maxBodyBytes = MAX_REPLY_BYTES): LengthPrefixedDecoder<ChannelRecord> => new LengthPrefixedDecoder(parseChannelRecord, maxBodyBytes + MAX_RECORD_OVERHEAD);

export const CALL = 1;
export const REPLY = 2;
export const CANCEL = 3;

export type ChannelMode = 'ask' | 'tell';

export type ChannelRecord =
  | { kind: typeof CALL; id: number; mode: ChannelMode; target: string; body: Buffer }
  | { kind: typeof REPLY; id: number; status: number; body: Buffer }
  | { kind: typeof CANCEL; id: number };

export function encodeCall(id: number, mode: ChannelMode, target: string, json: string): Buffer {
  const targetLength = Buffer.byteLength(target);
  const out = allocRecord(1 + 4 + 1 + 2 + targetLength + Buffer.byteLength(json));
  let at = out.writeUInt8(CALL, 4);
  at = out.writeUInt32BE(id, at);
  at = out.writeUInt8(mode === 'ask' ? 0 : 1, at);
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

/** Parses one record body; throws FrameError naming what is wrong. */
export function parseChannelRecord(body: Buffer): ChannelRecord {
  if (body.length < 5) throw new FrameError(`channel record of ${body.length} bytes is shorter than its header`);
  const kind = body[0]!;
  const id = body.readUInt32BE(1);
  if (kind === CALL) {
    if (body.length < 8) throw new FrameError('CALL record truncated in its header');
    const mode = body[5]!;
    if (mode > 1) throw new FrameError(`CALL record has unknown mode ${mode}`);
    const targetLength = body.readUInt16BE(6);
    if (8 + targetLength > body.length) throw new FrameError('CALL record truncated in its target');
    return { kind, id, mode: mode === 0 ? 'ask' : 'tell', target: body.toString('utf8', 8, 8 + targetLength), body: body.subarray(8 + targetLength) };
  }
  if (kind === REPLY) {
    if (body.length < 7) throw new FrameError('REPLY record truncated in its status');
    return { kind, id, status: body.readUInt16BE(5), body: body.subarray(7) };
  }
  if (kind === CANCEL) {
    if (body.length !== 5) throw new FrameError(`CANCEL record has ${body.length - 5} trailing bytes`);
    return { kind, id };
  }
  throw new FrameError(`unknown channel record kind ${kind}`);
}

/**
 * Writes records of one tick as one HTTP/2 DATA write (the queue is flushed on process.nextTick,
 * after the microtasks that produced the records); on backpressure it holds records until 'drain'.
 */
class BatchWriter {
  private queue: Buffer[] = [];
  private size = 0;
  private scheduled = false;
  private waiting = false;
  private ending = false;

  constructor(private readonly stream: http2.Http2Stream) {}

  write(record: Buffer): void {
    this.queue.push(record);
    this.size += record.length;
    if (this.scheduled || this.waiting) return;
    this.scheduled = true;
    process.nextTick(this.flush);
  }

  /** Ends the stream once the records queued so far are written. */
  end(): void {
    this.ending = true;
    if (!this.scheduled && !this.waiting) this.flush();
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    if (this.stream.destroyed || this.stream.closed || this.stream.writableEnded) return;
    if (this.queue.length) {
      const data = this.queue.length === 1 ? this.queue[0]! : Buffer.concat(this.queue, this.size);
      this.queue = [];
      this.size = 0;
      if (!this.stream.write(data)) return this.waitForDrain();
    }
    if (this.ending) this.stream.end();
  };

  private waitForDrain(): void {
    this.waiting = true;
    const resume = (): void => {
      this.stream.off('drain', resume);
      this.stream.off('close', resume);
      this.waiting = false;
      this.flush();
    };
    this.stream.on('drain', resume);
    this.stream.on('close', resume);
  }
}

interface Pending {
  resolve(reply: Reply): void;
  reject(error: ActorError): void;
  timer: NodeJS.Timeout;
  signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
}

const NO_HEADERS: http2.IncomingHttpHeaders = {};

/** The caller's end of a channel to one peer. */
class ClientChannel {
  private readonly pending = new Map<number, Pending>();
  private readonly writer: BatchWriter;
  private nextId = 1;
  private closed = false;

  constructor(
    private readonly addr: string,
    private readonly stream: http2.ClientHttp2Stream,
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
        if (record.kind !== REPLY) return this.break(`${addr} sent a channel record of kind ${record.kind}; only REPLY goes this way`, NGHTTP2_PROTOCOL_ERROR);
        const call = this.pending.get(record.id);
        // No pending call: it was cancelled or timed out and its late reply is dropped.
        if (!call) continue;
        this.settle(record.id, call);
        call.resolve({ status: record.status, headers: NO_HEADERS, body: record.body });
      }
    });
    stream.once('end', () => this.break(`${addr} closed the call channel`));
    stream.once('close', () => this.break(`${addr}: call channel closed (code ${stream.rstCode ?? 'none'})`));
  }

  call(mode: ChannelMode, target: string, json: string, timeoutMs: number, signal: AbortSignal | undefined): Promise<Reply> {
    if (signal?.aborted) return Promise.reject(new ActorError('cancelled', `call to ${this.addr}${target} cancelled`));
    // Ids wrap at 2^32; a call still pending after four billion others is long timed out.
    const id = this.nextId;
    this.nextId = id === 0xffffffff ? 1 : id + 1;
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

  /** Fails every pending call with `unreachable` (as a broken stream did) and drops the channel. */
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
  }
}

/** Channels of this node to its peers, one per address, opened on first use and after a break. */
export class ChannelPool {
  private readonly channels = new Map<string, ClientChannel>();

  constructor(private readonly transport: Transport) {}

  call(addr: string, mode: ChannelMode, target: string, json: string, timeoutMs: number, signal?: AbortSignal): Promise<Reply> {
    try {
      this.transport.assertReachable(addr);
      return this.channel(addr).call(mode, target, json, timeoutMs, signal);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  private channel(addr: string): ClientChannel {
    const existing = this.channels.get(addr);
    if (existing) return existing;
    const stream = this.transport.open(addr, CHANNEL_PATH, { keepOpen: true, headers: { 'content-type': 'application/octet-stream' } });
    const channel = new ClientChannel(addr, stream, (c) => {
      if (this.channels.get(addr) === c) this.channels.delete(addr);
    });
    this.channels.set(addr, channel);
    return channel;
  }

  close(): void {
    for (const channel of [...this.channels.values()]) channel.break('transport is closed');
  }
}

/** A call arriving on a channel; `reply` answers it (once), `onCancel` learns of the caller's CANCEL. */
export interface IncomingCall {
  mode: ChannelMode;
  target: string;
  body: Buffer;
  reply(status: number, json: string): void;
  /** The call no longer holds its body: its bytes leave the connection's budget (once). */
  release(): void;
  /** Set by the handler for calls that keep running after it returns. */
  onCancel?: () => void;
}

export interface ServerChannelOptions {
  /** Bytes of records being received and of calls not yet released are charged here; while it is full the channel stops reading. */
  budget: ConnectionBudget;
  /** Largest CALL body; a longer record resets the channel. */
  maxRecordBytes: number;
  handle(call: IncomingCall): void;
  malformed(message: string): void;
  closed(channel: ServerChannel): void;
}

/**
 * The callee's end of a channel: dispatches CALLs, writes REPLYs, forwards CANCELs. A peer sending
 * more than the budget allows is slowed, not refused: the channel stops reading, so HTTP/2 flow
 * control holds the peer's writes until calls are answered and their bytes given back.
 */
export class ServerChannel {
  private readonly running = new Map<number, IncomingCall>();
  private readonly writer: BatchWriter;
  private readonly decoder: LengthPrefixedDecoder<ChannelRecord>;
  /** The caller ended its side: end ours once the calls still running have replied. */
  private draining = false;
  /** Bytes of this channel in the budget: an incomplete record plus the bodies of calls not released. */
  private charged = 0;
  /** The stream has closed and the channel's bytes have been given back. */
  private gone = false;

  constructor(
    private readonly stream: http2.ServerHttp2Stream,
    private readonly options: ServerChannelOptions,
  ) {
    this.writer = new BatchWriter(stream);
    this.decoder = new LengthPrefixedDecoder(parseChannelRecord, options.maxRecordBytes + MAX_RECORD_OVERHEAD);
    stream.respond({ ':status': 200, 'content-type': 'application/octet-stream' });
    stream.on('data', (chunk: Buffer) => this.receive(chunk));
    stream.once('end', () => {
      this.draining = true;
      if (!this.running.size) this.writer.end();
    });
    stream.once('close', () => {
      options.closed(this);
      for (const call of this.running.values()) call.onCancel?.();
      this.running.clear();
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
        const call = this.incoming(record.id, record.mode, record.target, record.body);
        this.running.set(record.id, call);
        this.options.handle(call);
      } else if (record.kind === CANCEL) {
        const call = this.running.get(record.id);
        this.running.delete(record.id);
        call?.onCancel?.();
      } else {
        this.options.malformed(`a REPLY record (call ${record.id}) was sent to the callee`);
        return this.reset();
      }
    }
    if (!budget.full || this.stream.isPaused()) return;
    this.stream.pause();
    budget.whenRoom(() => this.stream.resume(), () => this.stream.closed);
  }

  private give(bytes: number): void {
    if (bytes <= 0 || this.gone) return;
    this.charged -= bytes;
    this.options.budget.give(bytes);
  }

  private incoming(id: number, mode: ChannelMode, target: string, body: Buffer): IncomingCall {
    let held = body.length;
    const call: IncomingCall = {
      mode,
      target,
      body,
      reply: (status, json) => {
        // Answered once; a call cancelled by its caller (or whose channel closed) is no longer
        // running and nobody waits for its reply.
        if (this.running.get(id) !== call) return;
        this.running.delete(id);
        this.writer.write(encodeReply(id, status, json));
        if (this.draining && !this.running.size) this.writer.end();
      },
      release: () => {
        this.give(held);
        held = 0;
      },
    };
    return call;
  }

  private reset(): void {
    if (!this.stream.closed) this.stream.close(NGHTTP2_PROTOCOL_ERROR);
  }

  /** Ends the channel (node shutdown); the caller's pending calls fail and it reopens on its next call. */
  end(): void {
    this.writer.end();
  }
}
