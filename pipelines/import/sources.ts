/**
 * The files of an import source: one file, a directory walked recursively (paths in byte order,
 * symbolic links not followed), or `-` for stdin. Files (and stdin) compressed with gzip or zstd are
 * read through their decompressor (compression.ts); `.gz`/`.zst` names join the walk. Detection reads a local file up to the end of its
 * first JSON value (formats/probe.ts); stdin's head is read once for detection and replayed in front
 * of the rest, so stdin too is read a single time.
 */
import { createReadStream, existsSync, lstatSync, openSync, readSync, closeSync, statSync, type Stats } from 'node:fs';
import { basename, join } from 'node:path';
import { Readable } from 'node:stream';
import { InvalidInputError, NotFoundError } from '../../lib/errors.js';
import { redactUserInfo } from '../../lib/redact.js';
import { undecodableName, walkFiles } from '../../lib/walk.js';
import { MANIFEST_KEY } from '../dataset/layout.js';
import type { SourceFile } from '../formats/types.js';
import { contentName } from '../formats/common/documents.js';
import { compressionOf, decompressed, type Compression } from './compression.js';

export const PROBE_BYTES = 64 * 1024;

export interface ImportFile extends SourceFile {
  /** Size in bytes when known (not for stdin). */
  size: number | undefined;
  /** The first bytes (up to PROBE_BYTES), for detection. */
  head(): Promise<Buffer>;
  /**
   * The bytes detection may read, from the start, to find the end of the first JSON value: the
   * whole file for a local file (read lazily), the head for stdin (which cannot be read twice).
   * Call after `head()`.
   */
  peek(): Iterable<Buffer>;
}

const byteOrder = (a: string, b: string): number => Buffer.compare(Buffer.from(a), Buffer.from(b));

const CHUNK_BYTES = 1 << 20;

/**
 * A local file's bytes, read synchronously in chunks. An import runs on a thread of its own, where a
 * read from the page cache costs less than the thread-pool round trips of an fs stream: three or four
 * per file, which left the import thread idle a fifth of the time over a directory of small session
 * logs (measured). Each chunk is a new buffer, as readers may keep views into earlier ones.
 */
function* chunksOf(path: string, size: number): Generator<Buffer> {
  const fd = openSync(path, 'r');
  try {
    for (let offset = 0; ; ) {
      // Sized by what the listing saw, plus room to notice a file that grew since (a live session log).
      const buffer = Buffer.allocUnsafe(Math.min(CHUNK_BYTES, Math.max(size - offset + 1, 64 * 1024)));
      const n = readSync(fd, buffer, 0, buffer.length, null);
      if (n === 0) return;
      offset += n;
      yield n < buffer.length ? buffer.subarray(0, n) : buffer;
    }
  } finally {
    closeSync(fd);
  }
}

/** `first`, then the rest of `chunks`. */
function* prepend(first: Buffer, chunks: Iterator<Buffer>): Generator<Buffer> {
  yield first;
  for (let next = chunks.next(); !next.done; next = chunks.next()) yield next.value;
}

/**
 * A file of the walk. A compressed file (gzip or zstd, by its magic bytes) is read through its
 * decompressor and, like stdin, detected from the head of its content; its size is then unknown.
 */
function localFile(path: string, relPath: string, size: number, name = relPath): ImportFile {
  let compression: Compression | undefined;
  let head: Buffer | undefined;
  return {
    path,
    relPath,
    name,
    get size() {
      return compression ? undefined : size;
    },
    open: () => {
      const chunks = chunksOf(path, size);
      const first = chunks.next();
      if (first.done) return Readable.from([], { objectMode: false });
      const all = prepend(first.value, chunks);
      compression = compressionOf(first.value);
      return Readable.from(compression ? decompressed(compression, all, relPath) : all, { objectMode: false });
    },
    peek: () => (compression ? (head ? [head] : []) : chunksOf(path, size)),
    head: async () => {
      const fd = openSync(path, 'r');
      let raw: Buffer;
      try {
        const buffer = Buffer.alloc(Math.min(PROBE_BYTES, size));
        raw = buffer.subarray(0, readSync(fd, buffer, 0, buffer.length, 0));
      } finally {
        closeSync(fd);
      }
      compression = compressionOf(raw);
      if (!compression) return raw;
      const parts: Buffer[] = [];
      let total = 0;
      for await (const chunk of decompressed(compression, chunksOf(path, size), relPath)) {
        parts.push(chunk);
        total += chunk.length;
        if (total >= PROBE_BYTES) break;
      }
      head = Buffer.concat(parts).subarray(0, PROBE_BYTES);
      return head;
    },
  };
}

/**
 * A file whose bytes were read already (sync reads each changed log once: the same bytes are
 * mirrored and converted). `path` is where they came from, for messages.
 */
export function bytesFile(path: string, relPath: string, bytes: Buffer): ImportFile {
  return {
    path,
    relPath,
    name: relPath,
    size: bytes.length,
    open: () => Readable.from(bytes.length > 0 ? [bytes] : [], { objectMode: false }),
    peek: () => [bytes],
    head: async () => bytes.subarray(0, PROBE_BYTES),
  };
}

/** Enough bytes for the longest magic (zstd's). */
const MAGIC_BYTES = 4;

/** The content of a stream (stdin, a pipe): its bytes, or what they decompress to when they are gzip or zstd, as a file's are. */
async function* streamContent(stdin: Readable, name: string): AsyncGenerator<Buffer> {
  const raw = (stdin as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
  const first: Buffer[] = [];
  for (let have = 0; have < MAGIC_BYTES; ) {
    const next = await raw.next();
    if (next.done) break;
    first.push(next.value);
    have += next.value.length;
  }
  const start = Buffer.concat(first);
  const all = (async function* () {
    if (start.length > 0) yield start;
    for (let next = await raw.next(); !next.done; next = await raw.next()) yield next.value;
  })();
  const compression = compressionOf(start);
  yield* compression ? decompressed(compression, all, name) : all;
}

/**
 * Stdin, or a pipe named by `-f` (`-f <(zcat a.gz b.gz)`, a FIFO), as an import file: read once, as
 * it comes; the head of its content is buffered for detection and replayed on `open`.
 */
function streamFile(stdin: Readable, path = '-'): ImportFile {
  const iterator = streamContent(stdin, path);
  let head: Buffer | undefined;
  let opened = false;
  const readHead = async (): Promise<Buffer> => {
    if (head) return head;
    const chunks: Buffer[] = [];
    let total = 0;
    while (total < PROBE_BYTES) {
      const next = await iterator.next();
      if (next.done) break;
      chunks.push(next.value);
      total += next.value.length;
    }
    head = Buffer.concat(chunks);
    return head;
  };
  return {
    path,
    relPath: path === '-' ? path : basename(path),
    name: path,
    size: undefined,
    head: async () => (await readHead()).subarray(0, PROBE_BYTES),
    peek: () => (head ? [head] : []),
    open: () => {
      if (opened) throw new Error('stdin can be read once only');
      opened = true;
      return Readable.from(
        (async function* () {
          const first = await readHead();
          if (first.length > 0) yield first;
          for (let next = await iterator.next(); !next.done; next = await iterator.next()) yield next.value;
        })(),
        { objectMode: false },
      );
    },
  };
}

/** The error of a file or directory whose name is not UTF-8 (undecodableName): it cannot be opened by the name Node gives it. */
function notUtf8(path: string, relPath: string): InvalidInputError | undefined {
  const shown = undecodableName(path);
  return shown === undefined ? undefined : new InvalidInputError(`${relPath.slice(0, relPath.lastIndexOf('/') + 1)}${shown}: the name is not UTF-8 (rename it to import it)`);
}

/**
 * A file or directory of the walk that cannot be read (no permission, a name that is not UTF-8): it
 * fails when the import comes to it, as an unreadable file does, so that it stops the import or,
 * with `--on-error skip`, is left out and named like any other file.
 */
function unreadableEntry(path: string, relPath: string, error: Error): ImportFile {
  const fail = (): never => {
    throw error;
  };
  return { path, relPath, name: relPath, size: undefined, head: async () => fail(), peek: fail, open: fail };
}

/** What a local source (`-f`) is; not found (exit 3) when nothing is there. */
export function statSource(from: string): Stats {
  try {
    return statSync(from);
  } catch {
    if (/^[a-z][a-z0-9+.-]*:\/\//i.test(from)) {
      throw new InvalidInputError(`-f ${redactUserInfo(from)}: import reads local files, directories or stdin, not a URI`, {
        hint: 'to copy an object-store dataset, export it to a local path first (trajstore export -f URI -t out/), then import that',
      });
    }
    throw new NotFoundError(`-f ${from}: no such file or directory`);
  }
}

/**
 * The files of a source, in byte order of their relative paths. `extensions` filters a directory
 * walk (a single named file is always taken).
 */
export function listSources(from: string, stdin: Readable, extensions: readonly string[]): ImportFile[] {
  if (from === '-') return [streamFile(stdin)];
  const stat = statSource(from);
  if (stat.isFile()) return [localFile(from, basename(from), stat.size, from)];
  if (stat.isFIFO()) return [streamFile(createReadStream(from), from)];
  if (!stat.isDirectory()) throw new InvalidInputError(`-f ${from}: not a file, directory or pipe`);
  // Its own files are no trajectories: the walk would fail on the first snapshot descriptor.
  if (existsSync(join(from, MANIFEST_KEY))) {
    throw new InvalidInputError(`-f ${from}: a trajstore dataset, not trajectory files`, {
      hint: `to copy its runs: trajstore export -f ${from} -t - -o storyline | trajstore import -f - -i storyline -t NEW (a compact store: export -o compact-jsonl to a file, then import that with -i compact-jsonl)`,
    });
  }
  const files: ImportFile[] = [];
  walkFiles(
    from,
    (relPath, entry, path) => {
      if (!entry.isFile() || !extensions.some((ext) => contentName(entry.name.toLowerCase()).endsWith(ext))) return;
      const undecodable = notUtf8(path, relPath);
      files.push(undecodable ? unreadableEntry(path, relPath, undecodable) : localFile(path, relPath, lstatSync(path).size));
    },
    (relPath, path, error) => files.push(unreadableEntry(path, relPath, notUtf8(path, relPath) ?? error)),
  );
  return files.sort((a, b) => byteOrder(a.relPath, b.relPath));
}
