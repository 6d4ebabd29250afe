/**
 * Compressed sources (`session.jsonl.gz`, `traces.json.zst`), recognised by their magic bytes and
 * decompressed on the fly with Node's zlib; the decoders see the content as if it were the file.
 */
import { Readable } from 'node:stream';
import { createGunzip, createZstdDecompress } from 'node:zlib';
import { SourceError } from '../formats/errors.js';

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

/** The content of compressed bytes; damaged data is invalid input naming the file. */
export async function* decompressed(compression: Compression, chunks: Iterable<Buffer> | AsyncIterable<Buffer>, relPath: string): AsyncGenerator<Buffer> {
  const inflate = compression === 'gzip' ? createGunzip() : createZstdDecompress();
  const source = Readable.from(chunks, { objectMode: false });
  source.on('error', (error) => inflate.destroy(error));
  source.pipe(inflate);
  try {
    for await (const chunk of inflate as AsyncIterable<Buffer>) yield chunk;
  } catch (error) {
    if (/^(Z_|ZSTD_|ERR_ZSTD|ERR_ZLIB)/.test(String((error as { code?: unknown }).code ?? ''))) {
      throw new SourceError({ relPath }, `not valid ${compression} data: ${(error as Error).message}`);
    }
    throw error;
  } finally {
    source.destroy();
    inflate.destroy();
  }
}
