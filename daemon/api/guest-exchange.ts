/**
 * The guest's side of one proxied exchange, as the socket Node's HTTP client talks through, with a
 * way around that client for large bodies.
 *
 * Node's HTTP client copies every body chunk it parses, and its response stream adds a tick per
 * chunk: for a download that is twice the CPU of moving the bytes (bench/sandboxd: a proxied 1 GiB
 * download at 0.6-0.74 of the direct throughput on a 2-core machine). So the client is given the
 * response's head only: the status line and headers (and any 1xx heads before them) are parsed and
 * checked by Node, as before. Then the proxy decides: a body of known length large enough to be
 * bulk data is sent raw (`sendBody`: exactly that many bytes, from the guest's socket to the client's);
 * anything else goes on through the client's parser (`parseBody`: chunked and streamed answers,
 * small ones, HEAD, 204, 304), which frames and checks it as it always did.
 */
import { Duplex } from 'node:stream';
import type { Socket } from 'node:net';
import { optionalNative } from '../../lib/native.js';

/** splice-relay.c; where it is not built the body goes through Node. */
interface SpliceRelay {
  relay(guestFd: number, clientFd: number, length: number, done: (error: string | undefined, moved: number) => void): object;
  cancel(handle: object): void;
}

/** Whether downloads can move inside the kernel here (the tests check that the module loads). */
export function kernelRelayLoaded(): boolean {
  return nativeRelay() !== undefined;
}

const nativeRelay = (): SpliceRelay | undefined => optionalNative<SpliceRelay>('daemon', 'api', 'splice-relay.node');

/** The descriptor of a plain socket (never a TLS one: its bytes must go through TLS), or undefined. */
function descriptorOf(socket: Socket): number | undefined {
  if ('encrypted' in socket) return undefined;
  const fd = (socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
  return typeof fd === 'number' && fd >= 0 ? fd : undefined;
}

/** The head may not grow past this (Node's own limit for the headers it parses is 16 KiB). */
const MAX_HEAD_BYTES = 64 * 1024;
const HEAD_END = Buffer.from('\r\n\r\n');

export class GuestExchange extends Duplex {
  /** Bytes received and not handed on yet: a head being read, or, after the final head, the body's start. */
  private pending: Buffer = Buffer.alloc(0);
  private mode: 'head' | 'waiting' | 'parsed' | 'raw' = 'head';
  private readonly onData = (chunk: Buffer): void => this.receive(chunk);

  constructor(private readonly guest: Socket) {
    super({ allowHalfOpen: true });
    guest.on('data', this.onData);
    guest.on('end', () => {
      if (this.mode !== 'raw') this.push(null);
    });
    guest.on('error', (error) => this.destroy(error));
    guest.on('close', () => {
      if (this.mode !== 'raw') this.destroy();
    });
  }

  /** The body goes on through Node's parser: what was held back first, then everything that comes. */
  parseBody(): void {
    if (this.mode !== 'waiting') return;
    this.mode = 'parsed';
    const held = this.pending;
    this.pending = Buffer.alloc(0);
    // Not from inside the 'response' event: that runs in the parser's own call, which must not be
    // handed more bytes until it returns. The guest stays paused until then, so the order holds.
    process.nextTick(() => {
      if (held.length > 0) this.push(held);
      this.guest.resume();
    });
  }

  /**
   * Sends the body to `out` as raw bytes, exactly `length` of them, from here on (the parser sees
   * nothing more), at `out`'s pace. `done` is called once: with an error when the guest stopped
   * short, sent more than it announced, or `out` closed first; the guest's socket is closed then.
   * The bytes move inside the kernel (splice-relay.c) where the module is built and both sockets
   * are plain ones; else through Node (`through: 'node'` asks for that, as the tests do).
   */
  sendBody(length: number, out: Socket, done: (error?: Error) => void, through: 'kernel' | 'node' = 'kernel'): void {
    this.mode = 'raw';
    const native = through === 'kernel' ? nativeRelay() : undefined;
    const guestFd = descriptorOf(this.guest);
    const clientFd = descriptorOf(out);
    if (native && guestFd !== undefined && clientFd !== undefined) return this.spliceBody(native, guestFd, clientFd, length, out, done);
    this.relayBody(length, out, done);
  }

  /**
   * The body in the kernel. Node stops reading the guest, and what it has read already (the
   * body's start) goes to the client through Node; once Node has written everything it holds for
   * the client, the relay's thread moves the rest between the two descriptors.
   */
  private spliceBody(native: SpliceRelay, guestFd: number, clientFd: number, length: number, out: Socket, done: (error?: Error) => void): void {
    const guest = this.guest;
    guest.off('data', this.onData);
    guest.pause();
    const held = [this.pending];
    this.pending = Buffer.alloc(0);
    // What the socket buffered after its pause; reading it must come before stopping the reads (read() may restart them).
    for (let chunk: Buffer | null; (chunk = guest.read() as Buffer | null) !== null; ) held.push(chunk);
    (guest as unknown as { _handle?: { readStop?: () => number } })._handle?.readStop?.();
    const start = Buffer.concat(held);
    let finished = false;
    let handle: object | undefined;
    const finish = (error?: Error): void => {
      if (finished) return;
      finished = true;
      out.off('close', onClose);
      guest.destroy();
      done(error);
    };
    const onClose = (): void => (handle ? native.cancel(handle) : finish(new Error('the client went away')));
    out.once('close', onClose);
    if (start.length > length) return finish(new Error(`the guest sent more than the ${length} bytes it announced`));
    // The callback runs once this and everything written before it is with the kernel: only then may the thread write.
    out.write(start, (error) => {
      if (finished) return;
      if (error) return finish(error);
      try {
        handle = native.relay(guestFd, clientFd, length - start.length, (failure) => finish(failure === undefined ? undefined : new Error(failure)));
      } catch (error) {
        finish(error as Error);
      }
    });
  }

  /** The body through Node: read from the guest, written to the client, the guest paused while the client lags. */
  private relayBody(length: number, out: Socket, done: (error?: Error) => void): void {
    let left = length;
    let finished = false;
    const finish = (error?: Error): void => {
      if (finished) return;
      finished = true;
      this.guest.off('data', take);
      out.off('drain', resume);
      this.guest.destroy();
      done(error);
    };
    const resume = (): void => void this.guest.resume();
    const take = (chunk: Buffer): void => {
      if (chunk.length > left) return finish(new Error(`the guest sent more than the ${length} bytes it announced`));
      left -= chunk.length;
      if (chunk.length > 0 && !out.write(chunk)) this.guest.pause();
      if (left === 0) finish();
    };
    this.guest.off('data', this.onData);
    this.guest.on('data', take);
    this.guest.once('close', () => finish(left === 0 ? undefined : new Error(`the guest closed the body ${left} bytes short of ${length}`)));
    out.on('drain', resume);
    out.once('close', () => finish(left === 0 ? undefined : new Error('the client went away')));
    const held = this.pending;
    this.pending = Buffer.alloc(0);
    if (held.length > 0 || length === 0) take(held);
    if (!finished) this.guest.resume();
  }

  private receive(chunk: Buffer): void {
    if (this.mode === 'parsed') {
      if (!this.push(chunk)) this.guest.pause();
      return;
    }
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    // Heads go to the parser one at a time: after a 1xx another follows; after the final one the
    // proxy decides how the body travels, and until then the guest is not read further.
    while (this.mode === 'head') {
      const end = this.pending.indexOf(HEAD_END);
      if (end < 0) {
        if (this.pending.length > MAX_HEAD_BYTES) this.destroy(new Error(`the guest's response head is larger than ${MAX_HEAD_BYTES} bytes`));
        return;
      }
      const head = this.pending.subarray(0, end + HEAD_END.length);
      this.pending = this.pending.subarray(end + HEAD_END.length);
      // The parser checks the head; here only whether another follows (a 1xx other than 101 is interim).
      if (!/^HTTP\/1\.[01] 1(?!01)\d\d /.test(head.subarray(0, 13).toString('latin1'))) {
        this.mode = 'waiting';
        this.guest.pause();
      }
      this.push(head);
    }
  }

  override _read(): void {
    if (this.mode === 'head' || this.mode === 'parsed') this.guest.resume();
  }

  override _write(chunk: Buffer, encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.guest.write(chunk, encoding, callback);
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.guest.end(callback);
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    if (this.mode !== 'raw') this.guest.destroy();
    callback(error);
  }
}
