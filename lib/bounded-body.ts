/**
 * A fastify content-type parser for bodies read whole up to `maxBytes`, then parsed. A larger body is
 * read and dropped up to `drainBytes`, so that a client still sending gets its 413 rather than a
 * connection closed under its upload (fastify's own parsers answer from Content-Length before
 * reading anything); past `drainBytes` the connection is closed after the 413.
 */
export interface BodyLimits {
  maxBytes: number;
  drainBytes: number;
}

type Done = (error: Error | null, body?: unknown) => void;

/** `parse` gets the whole body and throws errors carrying a `statusCode`. */
export function boundedBody(limits: BodyLimits, parse: (raw: Buffer) => unknown): (req: { raw: { destroy(): void } }, payload: NodeJS.ReadableStream, done: Done) => void {
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
    const tooLarge = (): Error => Object.assign(new Error(`the body is larger than ${limits.maxBytes} bytes`), { statusCode: 413 });
    payload.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limits.maxBytes) chunks.push(chunk);
      else if (size > limits.drainBytes) {
        req.raw.destroy();
        settle(tooLarge());
      }
    });
    payload.on('error', (error: Error) => settle(Object.assign(error, { statusCode: 400 })));
    payload.on('end', () => {
      if (size > limits.maxBytes) return settle(tooLarge());
      try {
        settle(null, parse(Buffer.concat(chunks)));
      } catch (error) {
        settle(error as Error);
      }
    });
  };
}
