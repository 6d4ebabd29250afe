/**
 * Wire encodings. Calls and single replies are JSON. Streamed replies are binary frames:
 *   u32 BE length of what follows | u8 flags (0x01 END, 0x02 ERROR) | u16 type length | type |
 *   u32 data length | data | (ERROR only) u16 error length | error text
 * An END frame closes the stream; an ERROR frame carries the producer's failure.
 */
import { jsonDepthExceeds } from '../../lib/json-depth.js';
import { ActorError, errorMessage, type ActorErrorCode } from './errors.js';

export const FLAG_END = 0x01;
export const FLAG_ERROR = 0x02;
/** One frame may not exceed this; a larger length prefix means a corrupt or hostile stream. */
export const MAX_FRAME_BYTES = 64 * 1024 * 1024;

export interface Frame {
  flags: number;
  type: string;
  data: Buffer;
  error?: string;
}

export class FrameError extends Error {}

/** The body of an actor call. */
export interface CallBody {
  method: string;
  args: unknown[];
}

/** A buffer for one record of `bodyLength` bytes with its u32 BE length prefix written. */
export function allocRecord(bodyLength: number): Buffer {
  const out = Buffer.allocUnsafe(4 + bodyLength);
  out.writeUInt32BE(bodyLength, 0);
  return out;
}

export function encodeFrame(frame: Frame): Buffer {
  const type = Buffer.from(frame.type, 'utf8');
  const error = frame.flags & FLAG_ERROR ? Buffer.from(frame.error ?? '', 'utf8') : undefined;
  const length = 1 + 2 + type.length + 4 + frame.data.length + (error ? 2 + error.length : 0);
  const out = allocRecord(length);
  let at = out.writeUInt8(frame.flags, 4);
  at = out.writeUInt16BE(type.length, at);
  at += type.copy(out, at);
  at = out.writeUInt32BE(frame.data.length, at);
  at += frame.data.copy(out, at);
  if (error) {
    at = out.writeUInt16BE(error.length, at);
    error.copy(out, at);
  }
  return out;
}

export function jsonFrame(value: unknown): Buffer {
  return encodeFrame({ flags: 0, type: 'json', data: Buffer.from(toJson(value ?? null, 'a streamed item'), 'utf8') });
}
export const END_FRAME = encodeFrame({ flags: FLAG_END, type: '', data: Buffer.alloc(0) });
/** The error text of a frame has a u16 length: a longer message is cut (at a character boundary). */
const MAX_ERROR_BYTES = 0xffff;

export function errorFrame(message: string): Buffer {
  return encodeFrame({ flags: FLAG_ERROR | FLAG_END, type: '', data: Buffer.alloc(0), error: truncateUtf8(message, MAX_ERROR_BYTES) });
}

/** The longest prefix of `text` whose UTF-8 encoding fits `maxBytes`. */
export function truncateUtf8(text: string, maxBytes: number): string {
  if (Buffer.byteLength(text) <= maxBytes) return text;
  const bytes = Buffer.from(text).subarray(0, maxBytes);
  // A cut inside a multi-byte character leaves a replacement character at the end: drop it.
  return bytes.toString('utf8').replace(/\uFFFD$/, '');
}

/**
 * JSON of a value that crossed into this process from an actor: a value JSON cannot carry (a
 * cycle, a BigInt, a getter that throws, nesting deeper than the stack) is an ActorError naming
 * `what`, never an exception escaping into the transport.
 */
export function toJson(value: unknown, what: string, code: ActorErrorCode = 'failed'): string {
  try {
    return JSON.stringify(value) ?? 'null';
  } catch (error) {
    throw new ActorError(code, `${what} cannot be sent as JSON: ${errorMessage(error)}`);
  }
}

/**
 * Splits a byte stream into records of `u32 BE length | body`, the framing shared by streamed
 * replies and the call channel; `parse` turns one body into a value (and throws FrameError).
 */
export class LengthPrefixedDecoder<T> {
  /** Bytes of an incomplete record, kept as chunks so a large record is copied once, not per chunk. */
  private held: Buffer[] = [];
  private heldSize = 0;
  /** Bytes needed before the held record can be parsed (its header, then its whole length). */
  private need = 4;

  constructor(
    private readonly parse: (body: Buffer) => T,
    private readonly maxBytes = MAX_FRAME_BYTES,
  ) {}

  push(chunk: Buffer): T[] {
    if (this.heldSize) {
      this.held.push(chunk);
      this.heldSize += chunk.length;
      if (this.heldSize < this.need) return [];
      chunk = Buffer.concat(this.held, this.heldSize);
      this.held = [];
      this.heldSize = 0;
    }
    const records: T[] = [];
    let at = 0;
    while (chunk.length - at >= 4) {
      const length = chunk.readUInt32BE(at);
      if (length > this.maxBytes) throw new FrameError(`frame length ${length} exceeds ${this.maxBytes}`);
      if (chunk.length - at < 4 + length) break;
      records.push(this.parse(chunk.subarray(at + 4, at + 4 + length)));
      at += 4 + length;
    }
    if (at < chunk.length) {
      const rest = chunk.subarray(at);
      this.held = [rest];
      this.heldSize = rest.length;
      this.need = rest.length >= 4 ? 4 + rest.readUInt32BE(0) : 4;
    }
    return records;
  }

  /** True when bytes of an incomplete record are left over. */
  get pending(): boolean {
    return this.heldSize > 0;
  }

  /** Bytes of an incomplete record held until the rest arrives. */
  get heldBytes(): number {
    return this.heldSize;
  }
}

/** Incremental decoder of stream frames: feed chunks as they arrive, take whole frames out. */
export class FrameDecoder extends LengthPrefixedDecoder<Frame> {
  constructor() {
    super(parseFrame);
  }
}

/** Parses one frame's body (without its length prefix); throws FrameError naming what is wrong. */
export function parseFrame(body: Buffer): Frame {
  const need = (at: number, n: number, what: string): void => {
    if (at + n > body.length) throw new FrameError(`frame truncated in ${what}`);
  };
  need(0, 3, 'header');
  const flags = body.readUInt8(0);
  if (flags & ~(FLAG_END | FLAG_ERROR)) throw new FrameError(`unknown frame flags 0x${flags.toString(16)}`);
  const typeLength = body.readUInt16BE(1);
  need(3, typeLength + 4, 'type');
  const type = body.toString('utf8', 3, 3 + typeLength);
  let at = 3 + typeLength;
  const dataLength = body.readUInt32BE(at);
  at += 4;
  need(at, dataLength, 'data');
  const data = body.subarray(at, at + dataLength);
  at += dataLength;
  let error: string | undefined;
  if (flags & FLAG_ERROR) {
    need(at, 2, 'error length');
    const errorLength = body.readUInt16BE(at);
    need(at + 2, errorLength, 'error text');
    error = body.toString('utf8', at + 2, at + 2 + errorLength);
    at += 2 + errorLength;
  }
  if (at !== body.length) throw new FrameError(`frame has ${body.length - at} trailing bytes`);
  return error === undefined ? { flags, type, data } : { flags, type, data, error };
}

export function frameValue(frame: Frame): unknown {
  if (frame.type !== 'json') throw new FrameError(`unsupported frame type '${frame.type}'`);
  return JSON.parse(frame.data.toString('utf8'));
}

/** Deepest nesting of arrays and objects a call body may have (as trajstore's documents). */
export const MAX_CALL_DEPTH = 512;

/** Parses and checks a call body; the message names what is wrong. */
/** Most arguments a remote call may pass. */
export const MAX_CALL_ARGS = 1024;

export function parseCallBody(raw: Buffer): CallBody {
  if (jsonDepthExceeds(raw, MAX_CALL_DEPTH)) throw new FrameError(`body nests arrays and objects deeper than ${MAX_CALL_DEPTH} levels`);
  let value: unknown;
  try {
    value = JSON.parse(raw.toString('utf8'));
  } catch (error) {
    throw new FrameError(`body is not JSON: ${(error as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new FrameError('body must be a JSON object {method, args}');
  const { method, args } = value as Record<string, unknown>;
  if (typeof method !== 'string' || method === '') throw new FrameError('body field `method` must be a non-empty string');
  if (args !== undefined && !Array.isArray(args)) throw new FrameError('body field `args` must be an array');
  // Spread into the method's parameters: past some hundred thousand the call itself overflows the
  // stack, which would count as the actor's failure. A list belongs in one argument.
  if (Array.isArray(args) && args.length > MAX_CALL_ARGS) throw new FrameError(`body field \`args\` holds ${args.length} arguments; at most ${MAX_CALL_ARGS} (pass a list as one argument)`);
  return { method, args: (args as unknown[] | undefined) ?? [] };
}
