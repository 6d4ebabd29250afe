/** Small helpers for byte streams. */
import type { Readable, Writable } from 'node:stream';

/** The whole of a stream, or undefined once it passes `maxBytes` (then the rest is not read). */
export async function readBounded(stream: Readable, maxBytes: number): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    total += chunk.length;
    if (total > maxBytes) return undefined;
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/**
 * Resolves when a writable stream has drained or closed, and leaves no listener behind either way
 * (a writer that waits often on a slow reader would otherwise pile up `close` listeners).
 */
export function drained(stream: NodeJS.EventEmitter): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      stream.off('drain', done);
      stream.off('close', done);
      resolve();
    };
    stream.once('drain', done);
    stream.once('close', done);
  });
}

/** How much of a body `endInSlices` hands a stream at a time: what an HTTP/2 stream buffers before it asks for 'drain'. */
const SLICE_BYTES = 64 * 1024;

/**
 * Writes `body` to `stream` and ends it, a slice at a time as the stream drains, where one write of
 * the whole body would be queued below at once: an HTTP/2 session counts what it has queued against
 * its memory cap (10 MB by default) and, past it, refuses everything arriving for it, the answer
 * to this very request too. Stops when the stream is destroyed meanwhile (the peer answered early).
 * A body given in pieces is written piece after piece, so that a large one is not copied to be joined.
 */
export async function endInSlices(stream: Writable, body: Buffer | string | readonly Buffer[]): Promise<void> {
  if (typeof body === 'string' && body.length <= SLICE_BYTES) return void stream.end(body);
  const pieces = typeof body === 'string' ? [Buffer.from(body)] : Buffer.isBuffer(body) ? [body] : body;
  const size = pieces.reduce((sum, piece) => sum + piece.length, 0);
  // A small body goes in one write, as one DATA frame.
  if (size <= SLICE_BYTES) return void stream.end(pieces.length === 1 ? pieces[0] : Buffer.concat(pieces, size));
  for (const piece of pieces) {
    for (let offset = 0; offset < piece.length; offset += SLICE_BYTES) {
      if (stream.destroyed) return;
      if (!stream.write(piece.subarray(offset, offset + SLICE_BYTES))) await drained(stream);
    }
  }
  if (!stream.destroyed) stream.end();
}
