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
