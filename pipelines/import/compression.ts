/**
 * Compressed sources (`session.jsonl.gz`, `traces.json.zst`), recognised by their magic bytes and
 * decompressed on the fly with Node's zlib; the decoders see the content as if it were the file.
 */
import { Readable } from 'node:stream';
import { createGunzip, createZstdDecompress } from 'node:zlib';
import { SourceError } from '../formats/errors.js';
import { ZstdFrames } from './zstd-frames.js';

export type Compression = 'gzip' | 'zstd';

const GZIP_MAGIC = [0x1f, 0x8b];
const ZSTD_MAGIC = [0x28, 0xb5, 0x2f, 0xfd];
const starts = (bytes: Buffer, magic: readonly number[]): boolean => bytes.length >= magic.length && magic.every((b, i) => bytes[i] === b);

/** The compression of a file from its first bytes (at least 4), or undefined for plain content. */
export function compressionOf(first: Buffer): Compression | undefined {
  if (starts(first, GZIP_MAGIC)) return 'gzip';
  if (starts(first, ZSTD_MAGIC)) return 'zstd';
  return undefined;
}

/** The compressed bytes, each chunk shown to `frames` as it passes. */
async function* followed(chunks: Iterable<Buffer> | AsyncIterable<Buffer>, frames: ZstdFrames): AsyncGenerator<Buffer> {
  for await (const chunk of chunks) {
    frames.push(chunk);
    yield chunk;
  }
}

/**
 * The content of compressed bytes; damaged or truncated data is invalid input naming the file.
 * gzip's decoder finds a stream cut short by itself; zstd's does not (see zstd-frames.ts).
 */
export async function* decompressed(compression: Compression, chunks: Iterable<Buffer> | AsyncIterable<Buffer>, relPath: string): AsyncGenerator<Buffer> {
  const inflate = compression === 'gzip' ? createGunzip() : createZstdDecompress();
  const frames = compression === 'zstd' ? new ZstdFrames() : undefined;
  const source = Readable.from(frames ? followed(chunks, frames) : chunks, { objectMode: false });
  source.on('error', (error) => inflate.destroy(error));
  source.pipe(inflate);
  try {
    for await (const chunk of inflate as AsyncIterable<Buffer>) yield chunk;
    const problem = frames?.problem();
    if (problem) throw new SourceError({ relPath }, `not valid zstd data: ${problem}`);
  } catch (error) {
    if (error instanceof SourceError) throw error;
    if (/^(Z_|ZSTD_|ERR_ZSTD|ERR_ZLIB)/.test(String((error as { code?: unknown }).code ?? ''))) {
      throw new SourceError({ relPath }, `not valid ${compression} data: ${(error as Error).message}`);
    }
    throw error;
  } finally {
    source.destroy();
    inflate.destroy();
  }
}
