/** Small helpers for byte streams. */
import type { Readable } from 'node:stream';

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
