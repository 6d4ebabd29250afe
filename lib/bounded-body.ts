/**
 * A fastify content-type parser for bodies read whole, undone from their Content-Encoding, up to
 * `maxBytes` (decoded), then parsed.
 *
 * A body that is refused (too large, in a coding not known here, or not valid in its coding) is
 * still read and dropped up to `drainBytes` sent, so that a client still sending gets its answer
 * rather than a connection closed under its upload (fastify's own parsers answer from
 * Content-Length before reading anything); past `drainBytes`, or past `timeoutMs`, it is answered
 * at once, and its connection closed LINGER_MS later. Decoding stops as soon as the decoded body
 * passes `maxBytes`, so a small compressed body that would inflate to gigabytes costs no more than
 * `maxBytes` of memory.
 *
 * Errors carry the status they answer: 413 too large, 415 an unknown coding, 400 a body that is
 * not what its coding says, 408 too slow (and whatever `parse` throws).
 */
import { isUtf8 } from 'node:buffer';
import type { IncomingHttpHeaders } from 'node:http';
import type { Transform } from 'node:stream';
import { createBrotliDecompress, createGunzip, createInflate } from 'node:zlib';
import { jsonDepthExceeds } from './json-depth.js';

export interface BodyLimits {
  /** Largest body taken, decoded. */
  maxBytes: number;
  /** Bytes sent that are read and dropped before a refused body's connection is closed. */
  drainBytes: number;
  /** When set, a body not all sent within this is answered 408 and its connection closed. */
  timeoutMs?: number;
}

type Done = (error: Error | null, body?: unknown) => void;

/** The content codings undone here (RFC 9110 §8.4.1; `x-gzip` is gzip's old name). */
const DECODERS = new Map<string, () => Transform>([
  ['gzip', createGunzip],
  ['x-gzip', createGunzip],
  ['deflate', createInflate],
  ['br', createBrotliDecompress],
]);

/**
 * How long a body cut short (past `drainBytes`, or late) is still read, and dropped, after its
 * answer: closing a socket with bytes unread resets it, and the reset can overtake the answer.
 */
const LINGER_MS = 1000;

/** Codings undone on one body (one is what clients send; two is already rare). */
const MAX_CODINGS = 2;

const failure = (statusCode: number, message: string): Error => Object.assign(new Error(message), { statusCode });

/**
 * The codings of a Content-Encoding header, in the order they were applied (`identity` dropped),
 * or the 415 that names one not known here.
 */
export function contentCodings(header: string | undefined): string[] | Error {
  const codings = (header ?? '')
    .split(',')
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== '' && c !== 'identity');
  const unknown = codings.find((c) => !DECODERS.has(c));
  if (unknown !== undefined) return failure(415, `Content-Encoding '${unknown.slice(0, 100)}' is not supported: send the body uncompressed, or as gzip, deflate or br`);
  // Each coding costs a decoder's memory: a header listing thousands must not buy thousands.
  if (codings.length > MAX_CODINGS) return failure(415, `Content-Encoding lists ${codings.length} codings; at most ${MAX_CODINGS} are undone`);
  return codings;
}

/**
 * A body as JSON; one that is not JSON is the client's error (400). JSON is UTF-8 (RFC 8259 §8.1):
 * bytes that are not would be read as U+FFFD, and kept as text the client never sent.
 */
export function jsonBody(raw: Buffer): unknown {
  if (!isUtf8(raw)) throw failure(400, 'the body is not valid JSON: it is not UTF-8');
  try {
    return JSON.parse(raw.toString('utf8')) as unknown;
  } catch (error) {
    throw failure(400, `the body is not valid JSON: ${(error as Error).message}`);
  }
}

/** `jsonBody` for a body that may nest arrays and objects at most `limit` deep (lib/json-depth.ts says why): 400 past it. */
export function depthBoundedJsonBody(limit: number): (raw: Buffer) => unknown {
  return (raw) => {
    if (jsonDepthExceeds(raw, limit)) throw failure(400, `the body nests arrays and objects deeper than ${limit} levels`);
    return jsonBody(raw);
  };
}

/**
 * jsonBody, refusing a key that merging the object into another would turn into a prototype
 * (`__proto__`, or `constructor` holding `prototype`), as fastify's own parser does.
 */
export function strictJsonBody(raw: Buffer): unknown {
  const refuse = (key: string): never => {
    throw failure(400, `the body holds a "${key}" key, which is refused (it would reach an object's prototype)`);
  };
  const value = jsonBody(raw);
  // A loop, not recursion: a body may nest as deep as its bytes allow.
  const pending: unknown[] = [value];
  while (pending.length) {
    const node = pending.pop();
    if (typeof node !== 'object' || node === null) continue;
    for (const [key, child] of Object.entries(node)) {
      if (key === '__proto__') refuse(key);
      if (key === 'constructor' && typeof child === 'object' && child !== null && 'prototype' in child) refuse(key);
      pending.push(child);
    }
  }
  return value;
}

/** `parse` gets the whole decoded body and throws errors carrying a `statusCode`. */
export function boundedBody(limits: BodyLimits, parse: (raw: Buffer) => unknown): (req: { headers: IncomingHttpHeaders; raw: { destroy(): void } }, payload: NodeJS.ReadableStream, done: Done) => void {
  return (req, payload, done) => {
    const codings = contentCodings(req.headers['content-encoding']);
    const decoder = Array.isArray(codings) && codings.length ? decoderChain(codings) : undefined;
    const chunks: Buffer[] = [];
    let sent = 0;
    let decoded = 0;
    let refused: Error | undefined = codings instanceof Error ? codings : undefined;
    /** Whether the whole body has been sent (a decoder may still be working on it). */
    let received = false;
    let settled = false;
    const settle = (error: Error | null, body?: unknown): void => {
      if (!settled) {
        settled = true;
        clearTimeout(timer);
        done(error, body);
      }
    };
    /** Answers at once, then reads on and drops a while before closing (see LINGER_MS). */
    const cutShort = (error: Error): void => {
      decoder?.destroy();
      settle(error);
      setTimeout(() => req.raw.destroy(), LINGER_MS).unref();
    };
    const timer = limits.timeoutMs === undefined ? undefined : setTimeout(() => cutShort(failure(408, `the body was not all sent within ${limits.timeoutMs! / 1000} s`)), limits.timeoutMs).unref();
    const refuse = (error: Error): void => {
      refused ??= error;
      decoder?.destroy();
      if (received) finish();
    };
    const take = (chunk: Buffer): void => {
      decoded += chunk.length;
      if (decoded <= limits.maxBytes) chunks.push(chunk);
      else refuse(failure(413, `the body is larger than ${limits.maxBytes} bytes${decoder ? ' decoded' : ''}`));
    };
    const finish = (): void => {
      if (refused) return settle(refused);
      try {
        settle(null, parse(Buffer.concat(chunks)));
      } catch (error) {
        settle(error as Error);
      }
    };

    if (decoder) {
      decoder.output.on('data', take);
      decoder.output.on('end', finish);
      decoder.onError((coding, error) => refuse(failure(400, `the body is not valid ${coding}: ${error.message}`)));
    }
    payload.on('data', (chunk: Buffer) => {
      sent += chunk.length;
      if (sent > limits.drainBytes) {
        if (!settled) cutShort(refused ?? failure(413, `the body is larger than ${limits.maxBytes} bytes`));
        return;
      }
      if (refused) return;
      if (decoder) decoder.input.write(chunk);
      else take(chunk);
    });
    payload.on('error', (error: Error) => settle(Object.assign(error, { statusCode: 400 })));
    // A client that leaves mid-body takes its decoders with it.
    payload.on('close', () => {
      if (!received) decoder?.destroy();
    });
    payload.on('end', () => {
      received = true;
      // A decoder ends once it has given out the last of its bytes, which finishes the body.
      if (decoder && !refused) decoder.input.end();
      else finish();
    });
  };
}

interface DecoderChain {
  input: Transform;
  output: Transform;
  destroy(): void;
  onError(handler: (coding: string, error: Error) => void): void;
}

/** Decoders for codings applied in order: the last one applied is undone first. */
function decoderChain(codings: string[]): DecoderChain {
  const stages = [...codings].reverse().map((coding) => ({ coding, stream: DECODERS.get(coding)!() }));
  for (let i = 1; i < stages.length; i++) stages[i - 1]!.stream.pipe(stages[i]!.stream);
  return {
    input: stages[0]!.stream,
    output: stages[stages.length - 1]!.stream,
    destroy: () => stages.forEach((s) => s.stream.destroy()),
    onError: (handler) => stages.forEach((s) => s.stream.on('error', (error: Error) => handler(s.coding, error))),
  };
}
