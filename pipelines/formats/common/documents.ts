/**
 * The JSON documents of a source file with their exact bytes, for formats that come both as one
 * JSON document per file (`.json`) and as one per line (`.jsonl`, `.ndjson`). Each document's `raw`
 * follows the `DecodedDocument.raw` contract: concatenated in order they reproduce the file, blank
 * lines included (leading blank lines go with the next document, trailing ones with the last).
 */
import { Readable } from 'node:stream';
import type { Storyline } from '../../storyline/schema.js';
import { SourceError } from '../errors.js';
import type { DecodeContext, DecodedDocument, SourceFile } from '../types.js';
import { decodeUtf8, MAX_DOCUMENT_BYTES, parseJson, readAll, readLines } from '../lines.js';
import type { Fail } from './elements.js';
import { locatePointer } from './locate.js';
import { isJsonText } from './values.js';


export interface SourceJson {
  value: unknown;
  /** 1-based line where the document starts. */
  line: number;
  /** True for one document per line (JSONL framing). */
  perLine: boolean;
  /** Exact bytes (see above). */
  raw: Buffer;
}

/** Suffixes of compressed sources (`x.jsonl.gz`); the content is recognised by its magic bytes. */
export const COMPRESSED_SUFFIXES = ['.gz', '.zst'] as const;

/** The name of a file's content: without a compression suffix (`a/x.jsonl.gz` holds `a/x.jsonl`). */
export const contentName = (relPath: string): string => relPath.replace(/\.(gz|zst)$/i, '');

export const isJsonlPath = (relPath: string): boolean => /\.(jsonl|ndjson)$/i.test(contentName(relPath));

/**
 * The documents of a file. `.jsonl`/`.ndjson` are read line by line (bounded memory), `.json` as one
 * document. A file with another name (stdin) is JSONL when its first non-blank line is a JSON value
 * of its own (a one-line document reads the same either way), else one document.
 */
export async function* sourceDocuments(file: SourceFile): AsyncGenerator<SourceJson> {
  if (isJsonlPath(file.relPath)) {
    yield* jsonLines(file.open(), file.relPath);
    return;
  }
  let stream = file.open();
  if (!/\.json$/i.test(contentName(file.relPath))) {
    const { head, rest } = await firstLine(stream);
    stream = rest;
    if (head !== undefined && isJsonText(head)) {
      yield* jsonLines(stream, file.relPath);
      return;
    }
  }
  const bytes = await readAll(stream, file.relPath, MAX_DOCUMENT_BYTES);
  yield { value: parseJson(decodeUtf8(bytes, file.relPath), file.relPath), line: 1, perLine: false, raw: bytes };
}

/** Reads up to the end of the first non-blank line; `rest` replays everything from the start. */
async function firstLine(stream: Readable): Promise<{ head: string | undefined; rest: Readable }> {
  const iterator = (stream as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
  const seen: Buffer[] = [];
  let head: string | undefined;
  let text = '';
  for (;;) {
    const next = await iterator.next();
    if (next.done) {
      head = text.trim() === '' ? undefined : text;
      break;
    }
    seen.push(next.value);
    text += next.value.toString('utf8');
    const lines = text.split('\n');
    const complete = lines.slice(0, -1).find((l) => l.trim() !== '');
    if (complete !== undefined) {
      head = complete;
      break;
    }
    if (text.length > MAX_PROBE_CHARS) break;
  }
  const rest = Readable.from(
    (async function* () {
      yield* seen;
      for (let next = await iterator.next(); !next.done; next = await iterator.next()) yield next.value;
    })(),
  );
  return { head, rest };
}

/** A first line longer than this is not looked at: the input is read as one document. */
const MAX_PROBE_CHARS = 16 * 1024 * 1024;

async function* jsonLines(stream: Readable, relPath: string): AsyncGenerator<SourceJson> {
  let blanks: Buffer[] = [];
  let pending: SourceJson | undefined;
  for await (const line of readLines(stream, relPath)) {
    if (line.text.trim() === '') {
      blanks.push(line.bytes);
      continue;
    }
    if (pending) yield pending;
    const value = parseJson(line.text, relPath, line.number);
    pending = { value, line: line.number, perLine: true, raw: blanks.length ? Buffer.concat([...blanks, line.bytes]) : line.bytes };
    blanks = [];
  }
  if (pending) {
    if (blanks.length) pending.raw = Buffer.concat([pending.raw, ...blanks]);
    yield pending;
  }
}

/** Where one member of a source document is: its file, its line (JSONL), its pointer in the parsed value. */
export interface MemberLocation {
  relPath: string;
  /** Line of the document (JSONL) or undefined for a whole file. */
  line: number | undefined;
  /** Pointer of the member inside the parsed JSON value (`` for the root, `/3` in an array). */
  base: string;
}

/** Documents up to this size are scanned again to put a line and column on a problem's JSON Pointer. */
const LOCATE_MAX_BYTES = 64 * 1024 * 1024;

/**
 * A decoder's problem at a JSON Pointer inside `source` gets the line and column where the pointer's
 * value starts (or its nearest existing parent, for a missing member), so every refusal reads
 * `file:line:column at /pointer: reason`. Other errors are returned as they are.
 */
export function locatedIn(error: unknown, source: SourceJson): unknown {
  if (!(error instanceof SourceError) || error.location.pointer === undefined || error.location.column !== undefined) return error;
  if (source.raw.length > LOCATE_MAX_BYTES) return error;
  const text = source.raw.toString('utf8');
  // The raw bytes may start with blank lines that belong to this document; the text starts there.
  const leading = (text.match(/^\s*/)?.[0] ?? '').split('\n').length - 1;
  const { line, column } = locatePointer(text, error.location.pointer, source.line - leading);
  return new SourceError({ ...error.location, line, column }, error.reason, { hint: error.hint, cause: error });
}

/** Fails the document at a pointer relative to the member's `base`, naming its file and line. */
export function failAt(where: MemberLocation): Fail {
  return (pointer, reason) => {
    throw new SourceError({ relPath: where.relPath, line: where.line, pointer: where.base + pointer }, reason);
  };
}

/**
 * Decodes a file of JSON documents each holding one member or a JSON array of them (a trajectory,
 * a task document), each member with `decodeMember` at its location. An empty array fails with
 * `emptyArray` when given and holds nothing otherwise. Members are decoded as the consumer reads.
 */
export async function* decodeJsonMembers(
  file: SourceFile,
  ctx: DecodeContext,
  decodeMember: (value: unknown, where: MemberLocation, ctx: DecodeContext) => Storyline[],
  emptyArray?: string,
): AsyncGenerator<DecodedDocument> {
  let ordinal = 0;
  for await (const source of sourceDocuments(file)) {
    const line = source.perLine ? source.line : undefined;
    const members: Array<[unknown, string]> = Array.isArray(source.value) ? source.value.map((v, i) => [v, `/${i}`]) : [[source.value, '']];
    if (members.length === 0 && emptyArray !== undefined) throw new SourceError({ relPath: file.relPath, line }, emptyArray);
    const storylines = (function* () {
      for (const [value, base] of members) yield* decodeMember(value, { relPath: file.relPath, line, base }, ctx);
    })();
    try {
      yield* withRawOnce(storylines, ordinal, ctx.keepRaw ? source.raw : undefined);
    } catch (error) {
      throw locatedIn(error, source);
    }
    ordinal += 1;
  }
}

/**
 * The Storylines decoded from one source document, with its `raw` bytes on the first of them only
 * (see `DecodedDocument.raw`: the raws of a file concatenate to the file).
 */
export function* withRawOnce(storylines: Iterable<Storyline>, sourceDocument: number, raw: Buffer | undefined): Generator<DecodedDocument> {
  for (const storyline of storylines) {
    yield raw ? { storyline, sourceDocument, raw } : { storyline, sourceDocument };
    raw = undefined;
  }
}
