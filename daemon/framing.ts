/**
 * Control framing shared with the VMM and the guest (Rust crate `vmm-rs/control-frame`):
 * a u32 big-endian byte length, then that many bytes of UTF-8 JSON. A frame whose declared
 * length exceeds the maximum is rejected from its header alone, before its body is buffered.
 */
import { Transform, type TransformCallback } from 'node:stream';

export const HEADER_LEN = 4;
/** Default largest body accepted: 1 MiB is far above any control message. */
export const DEFAULT_MAX_FRAME = 1 << 20;

export type FrameErrorKind = 'oversized' | 'truncated' | 'not_utf8' | 'not_json';

export class FrameError extends Error {
  constructor(
    readonly kind: FrameErrorKind,
    message: string,
  ) {
    super(message);
    this.name = 'FrameError';
  }
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

export function encodeFrame(value: unknown, maxFrameSize = DEFAULT_MAX_FRAME): Buffer {
  const body = Buffer.from(JSON.stringify(value), 'utf8');
  if (body.length > maxFrameSize) throw new FrameError('oversized', `frame of ${body.length} bytes exceeds the maximum of ${maxFrameSize}`);
  const frame = Buffer.allocUnsafe(HEADER_LEN + body.length);
  frame.writeUInt32BE(body.length, 0);
  body.copy(frame, HEADER_LEN);
  return frame;
}

function parseBody(body: Buffer): unknown {
  let text: string;
  try {
    text = utf8.decode(body);
  } catch {
    throw new FrameError('not_utf8', 'frame body is not valid UTF-8');
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new FrameError('not_json', `frame body is not JSON: ${(error as Error).message}`);
  }
}

/** Sans-IO decoder: push bytes in pieces of any size, take whole frames out. */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private buffered = 0;

  constructor(private readonly maxFrameSize = DEFAULT_MAX_FRAME) {}

  push(bytes: Buffer): void {
    if (bytes.length === 0) return;
    this.chunks.push(bytes);
    this.buffered += bytes.length;
  }

  /** The next complete frame's value, or `undefined` when more bytes are needed. */
  next(): { value: unknown } | undefined {
    if (this.buffered < HEADER_LEN) return undefined;
    const length = this.peek(HEADER_LEN).readUInt32BE(0);
    if (length > this.maxFrameSize) throw new FrameError('oversized', `frame of ${length} bytes exceeds the maximum of ${this.maxFrameSize}`);
    if (this.buffered < HEADER_LEN + length) return undefined;
    const frame = this.take(HEADER_LEN + length);
    return { value: parseBody(frame.subarray(HEADER_LEN)) };
  }

  /** Call at end of stream: an unfinished frame is an error. */
  finish(): void {
    if (this.buffered === 0) return;
    const expected = this.buffered >= HEADER_LEN ? HEADER_LEN + this.peek(HEADER_LEN).readUInt32BE(0) : HEADER_LEN;
    throw new FrameError('truncated', `stream ended inside a frame: ${this.buffered} of ${expected} bytes`);
  }

  /** The first `n` buffered bytes as one buffer, merging chunks only as far as needed. */
  private peek(n: number): Buffer {
    const first = this.chunks[0];
    if (first && first.length >= n) return first;
    const merged = Buffer.concat(this.chunks, this.buffered);
    this.chunks = [merged];
    return merged;
  }

  private take(n: number): Buffer {
    const all = this.peek(n);
    const taken = all.subarray(0, n);
    const rest = all.subarray(n);
    this.chunks = rest.length > 0 ? [rest] : [];
    this.buffered -= n;
    return taken;
  }
}

/** A pipeline stage: bytes in, decoded frame values out (object mode). */
export function frameDecoderStream(maxFrameSize = DEFAULT_MAX_FRAME): Transform {
  const decoder = new FrameDecoder(maxFrameSize);
  return new Transform({
    readableObjectMode: true,
    transform(chunk: Buffer, _encoding, callback: TransformCallback) {
      try {
        decoder.push(chunk);
        for (let frame = decoder.next(); frame; frame = decoder.next()) this.push(frame.value);
        callback();
      } catch (error) {
        callback(error as Error);
      }
    },
    flush(callback: TransformCallback) {
      try {
        decoder.finish();
        callback();
      } catch (error) {
        callback(error as Error);
      }
    },
  });
}
