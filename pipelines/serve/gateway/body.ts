/**
 * Request bodies of the gateway listener, whatever their encoding: read whole up to MAX_BODY_BYTES,
 * then parsed. A larger one is read and dropped up to DRAIN_LIMIT_BYTES, so that a client still
 * sending gets its 413; past that, the connection is closed after the 413.
 */
import type { FastifyRequest } from 'fastify';
import { MAX_BODY_BYTES } from './events.js';

export const DRAIN_LIMIT_BYTES = 8 * MAX_BODY_BYTES;

type Done = (error: Error | null, body?: unknown) => void;

/** A fastify content-type parser that reads the body within those bounds and hands it to `parse` (which throws errors with a statusCode). */
export function boundedBody(parse: (raw: Buffer) => unknown): (req: FastifyRequest, payload: NodeJS.ReadableStream, done: Done) => void {
  return (req, payload, done) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const settle = (error: Error | null, body?: unknown): void => {
      if (!settled) {
        settled = true;
        done(error, body);
      }
    };
    const tooLarge = (): Error => Object.assign(new Error(`the body is larger than ${MAX_BODY_BYTES} bytes`), { statusCode: 413 });
    payload.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_BODY_BYTES) chunks.push(chunk);
      else if (size > DRAIN_LIMIT_BYTES) {
        req.raw.destroy();
        settle(tooLarge());
      }
    });
    payload.on('error', (error: Error) => settle(Object.assign(error, { statusCode: 400 })));
    payload.on('end', () => {
      if (size > MAX_BODY_BYTES) return settle(tooLarge());
      try {
        settle(null, parse(Buffer.concat(chunks)));
      } catch (error) {
        settle(error as Error);
      }
    });
  };
}
