/**
 * Framing shared by the decoders: lines of a JSONL file with their exact bytes and numbers, and
 * JSON parsing whose errors point at file:line:column. Memory is bounded by the longest line.
 */
import type { Readable } from 'node:stream';
import { getHeapStatistics } from 'node:v8';
import { SourceError } from './errors.js';
import { ExitCode } from '../../lib/errors.js';
import { readBounded } from '../../lib/streams.js';
import { lineAndColumn } from '../../lib/text-position.js';
import { firstInexactInteger, locatePointer } from './common/locate.js';

export interface Line {
  /** 1-based line number. */
  number: number;
  /** The line's text without its terminator (`\n` or `\r\n`). */
  text: string;
  /** The line's exact bytes including its terminator (the last line may have none). */
  bytes: Buffer;
  /** False for a last line without a newline: in a log still being written, a partial line. */
  terminated: boolean;
}

/**
 * The largest JSON document trajstore takes: a `.json` file, or one line of JSONL. A document is
 * decoded whole, and the import's heaps are sized for the largest one a source may hold
 * (import/memory.ts); beyond this a document is refused (exit 5) before it is read.
 */
export const MAX_DOCUMENT_BYTES = 256 * 1024 * 1024;
const SPLIT_HINT = 'split it into several documents (one JSON document per line of a .jsonl file)';
const NEWLINE = 0x0a;
const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Lines of a stream; rejects invalid UTF-8 and lines longer than `maxLineBytes` with their line number. */
export async function* readLines(stream: Readable, relPath: string, maxLineBytes = MAX_DOCUMENT_BYTES): AsyncGenerator<Line> {
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let number = 0;
  const lineOf = (bytes: Buffer): Line => {
    number += 1;
    let end = bytes.length;
    if (end > 0 && bytes[end - 1] === NEWLINE) end -= 1;
    if (end > 0 && bytes[end - 1] === 0x0d) end -= 1;
    let text: string;
    try {
      text = utf8.decode(bytes.subarray(0, end));
    } catch {
      throw new SourceError({ relPath, line: number }, 'invalid UTF-8');
    }
    return { number, text, bytes, terminated: bytes[bytes.length - 1] === NEWLINE };
  };
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    let start = 0;
    for (let nl = chunk.indexOf(NEWLINE, start); nl !== -1; nl = chunk.indexOf(NEWLINE, start)) {
      const piece = chunk.subarray(start, nl + 1);
      const bytes = pending.length === 0 ? Buffer.from(piece) : Buffer.concat([...pending, piece]);
      pending = [];
      pendingBytes = 0;
      if (bytes.length > maxLineBytes) throw tooLong(relPath, number + 1, maxLineBytes);
      yield lineOf(bytes);
      start = nl + 1;
    }
    if (start < chunk.length) {
      pending.push(chunk.subarray(start));
      pendingBytes += chunk.length - start;
      if (pendingBytes > maxLineBytes) throw tooLong(relPath, number + 1, maxLineBytes);
    }
  }
  if (pendingBytes > 0) yield lineOf(Buffer.concat(pending));
}

function tooLong(relPath: string, line: number, max: number): SourceError {
  return new SourceError({ relPath, line }, `line is longer than ${mebibytes(max)}, the largest document trajstore takes`, { hint: SPLIT_HINT, exitCode: ExitCode.ResourceLimit });
}

const mebibytes = (bytes: number): string => (bytes % MB === 0 ? `${bytes / MB} MiB` : `${bytes} bytes`);

/** Whole-stream bytes, bounded: for formats whose unit is one JSON document per file. */
export async function readAll(stream: Readable, relPath: string, maxBytes: number): Promise<Buffer> {
  const bytes = await readBounded(stream, maxBytes);
  if (bytes === undefined) throw new SourceError({ relPath }, `document is larger than ${mebibytes(maxBytes)}, the largest document trajstore takes`, { hint: SPLIT_HINT, exitCode: ExitCode.ResourceLimit });
  return bytes;
}

/** Documents from this size on are measured before they are parsed. */
const MEASURED_FROM_CHARS = 1024 * 1024;
const MB = 1024 * 1024;
/** What the thread needs besides the document (code, buffers, the batch being written). */
const THREAD_BASE_BYTES = 128 * MB;

/**
 * JSON.parse runs to its end inside V8, where running out of heap aborts the whole process rather
 * than failing the thread; a text of N bytes may become anything from N to 13 N bytes of heap (an
 * array of empty arrays). So a large document is measured first: its text (up to two bytes a
 * character), about 40 bytes per array or object and 8 per other value, an upper bound found by
 * measuring parsed documents of each shape. With room for as much again for decoding it (the
 * Storyline, its rows and their JSON text), it must fit the thread's heap, else it is refused (exit 5).
 */
function checkMemory(text: string, relPath: string, firstLine: number): void {
  let containers = 0;
  let scalars = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      scalars++;
      for (i++; i < text.length; i++) {
        const d = text.charCodeAt(i);
        if (d === 0x5c) i++;
        else if (d === 0x22) break;
      }
    } else if (c === 0x7b || c === 0x5b) containers++;
    else if (c === 0x2c) scalars++; // a separator: at most one more value than there are commas
  }
  const needed = 2 * (2 * text.length + 40 * containers + 8 * scalars);
  const available = getHeapStatistics().heap_size_limit - THREAD_BASE_BYTES;
  if (needed > available) {
    throw new SourceError(
      { relPath, line: firstLine },
      `decoding this document needs about ${Math.ceil(needed / MB)} MB of memory (${containers} arrays and objects), more than the ${Math.floor(available / MB)} MB this import has for one document`,
      { hint: SPLIT_HINT, exitCode: ExitCode.ResourceLimit },
    );
  }
}

/**
 * How deeply a document's arrays and objects may nest (the document itself is level 1). Everything
 * imported must export again and stay readable by SQLite's JSON functions (which stop at 1000
 * levels), and the recursive code on the way (JSON.stringify among it) must never run out of stack.
 */
export const MAX_JSON_DEPTH = 512;

/**
 * JSON.parse with a located error. `firstLine` is the line number of the text's first line, so
 * multi-line documents report the line and column (in characters) of the syntax error: where the
 * character the message names is. A document nested deeper
 * than MAX_JSON_DEPTH is refused at the first value too deep, with its pointer.
 */
export function parseJson(text: string, relPath: string, firstLine = 1): unknown {
  if (text.length >= MEASURED_FROM_CHARS) checkMemory(text, relPath, firstLine);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    // V8 does not always say where (e.g. "Unexpected token"), so find the offset ourselves.
    const { offset, reason } = jsonSyntaxError(text);
    const { line, column } = lineAndColumn(text, offset, firstLine);
    throw new SourceError({ relPath, line, column }, `invalid JSON: ${reason}`, { cause: error });
  }
  const pointer = tooDeep(value);
  if (pointer !== undefined) {
    // The pointer has hundreds of tokens; its start says where the nesting begins.
    const shown = `${pointer.split('/').slice(0, 9).join('/')}/…`;
    throw new SourceError({ relPath, ...locatePointer(text, pointer, firstLine), pointer: shown }, `nested deeper than ${MAX_JSON_DEPTH} levels of arrays and objects`, {
      hint: 'trajstore keeps documents it can export again; flatten the value or store it as a JSON string',
    });
  }
  // Rare: only a number beyond ±(2^53 - 1) makes it look at how the source wrote its numbers.
  const inexact = sawLargeNumber ? firstInexactInteger(text) : undefined;
  if (inexact !== undefined) {
    throw new SourceError({ relPath, ...locatePointer(text, inexact, firstLine), pointer: inexact }, `integer out of range: beyond ±${Number.MAX_SAFE_INTEGER} it cannot be stored exactly`, {
      hint: 'write it as a string if it is an id, or as a float (with an exponent) if it is a measure',
    });
  }
  return value;
}

/** Whether a parsed value nests no deeper than MAX_JSON_DEPTH levels. */
export const withinDepth = (value: unknown): boolean => firstTooDeep(value, 1) === undefined;

/**
 * Whether `value`, parsed from the JSON `text`, holds what the text says: no deeper than
 * MAX_JSON_DEPTH and no integer that parsing rounded (beyond ±(2^53 - 1)). JSON inside strings
 * (tool call arguments) is kept as its text when this is false, rather than refused as a document is.
 */
export function parsedExactly(value: unknown, text: string): boolean {
  if (tooDeep(value) !== undefined) return false;
  return !sawLargeNumber || firstInexactInteger(text) === undefined;
}

/** Set by the last walk when it met a number beyond ±(2^53 - 1) (which may be a rounded integer). */
let sawLargeNumber = false;

/** The JSON Pointer of the first container nested deeper than MAX_JSON_DEPTH, or undefined. */
function tooDeep(value: unknown): string | undefined {
  sawLargeNumber = false;
  const tokens = firstTooDeep(value, 1);
  return tokens && `/${tokens.reverse().map((t) => t.replace(/~/g, '~0').replace(/\//g, '~1')).join('/')}`;
}

/** The path (leaf first) to the first container deeper than the limit; allocates only when there is one. */
function firstTooDeep(value: unknown, depth: number): string[] | undefined {
  if (typeof value !== 'object' || value === null) {
    if (typeof value === 'number' && (value > Number.MAX_SAFE_INTEGER || value < -Number.MAX_SAFE_INTEGER)) sawLargeNumber = true;
    return undefined;
  }
  if (depth > MAX_JSON_DEPTH) return [];
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const path = firstTooDeep(value[i], depth + 1);
      if (path) return (path.push(String(i)), path);
    }
    return undefined;
  }
  for (const key in value) {
    const path = firstTooDeep((value as Record<string, unknown>)[key], depth + 1);
    if (path) return (path.push(key), path);
  }
  return undefined;
}

/**
 * Offset and reason of the first syntax error of a text that JSON.parse rejected: a small
 * recursive-descent scan (RFC 8259), run only on the error path.
 */
export function jsonSyntaxError(text: string): { offset: number; reason: string } {
  let i = 0;
  class Stop {
    constructor(readonly offset: number, readonly reason: string) {}
  }
  const fail = (reason: string, at = i): never => {
    throw new Stop(at, reason);
  };
  const describe = () => (i >= text.length ? 'unexpected end of input' : `unexpected ${JSON.stringify(text[i])}`);
  const ws = () => {
    while (i < text.length && ' \t\n\r'.includes(text[i] as string)) i += 1;
  };
  const literal = (word: string) => {
    for (const ch of word) {
      if (text[i] !== ch) fail(describe());
      i += 1;
    }
  };
  const string = () => {
    i += 1;
    for (;;) {
      if (i >= text.length) fail('unterminated string');
      const ch = text.charCodeAt(i);
      if (ch === 0x22) return void (i += 1);
      if (ch < 0x20) fail('control character in string');
      if (ch === 0x5c) {
        const esc = text[i + 1];
        if (esc === 'u') {
          if (!/^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) fail('bad \\u escape');
          i += 6;
        } else if (esc !== undefined && '"\\/bfnrt'.includes(esc)) i += 2;
        else fail('bad escape');
      } else i += 1;
    }
  };
  const number = () => {
    const match = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(i, i + 400));
    if (!match || match[0] === '' || match[0] === '-') fail('bad number');
    i += (match as RegExpExecArray)[0].length;
  };
  const value = (depth: number): void => {
    if (depth > 10_000) fail('nesting too deep');
    ws();
    const ch = text[i];
    if (ch === '{') {
      i += 1;
      ws();
      if (text[i] === '}') return void (i += 1);
      for (;;) {
        ws();
        if (text[i] !== '"') fail(`expected a property name, ${describe()}`);
        string();
        ws();
        if (text[i] !== ':') fail(`expected ':', ${describe()}`);
        i += 1;
        value(depth + 1);
        ws();
        if (text[i] === ',') { i += 1; continue; }
        if (text[i] === '}') return void (i += 1);
        fail(`expected ',' or '}', ${describe()}`);
      }
    }
    if (ch === '[') {
      i += 1;
      ws();
      if (text[i] === ']') return void (i += 1);
      for (;;) {
        value(depth + 1);
        ws();
        if (text[i] === ',') { i += 1; continue; }
        if (text[i] === ']') return void (i += 1);
        fail(`expected ',' or ']', ${describe()}`);
      }
    }
    if (ch === '"') return string();
    if (ch === 't') return literal('true');
    if (ch === 'f') return literal('false');
    if (ch === 'n') return literal('null');
    if (ch === '-' || (ch !== undefined && ch >= '0' && ch <= '9')) return number();
    fail(i >= text.length ? 'unexpected end of input' : `expected a value, ${describe()}`);
  };
  try {
    value(0);
    ws();
    if (i < text.length) fail(`unexpected ${JSON.stringify(text[i])} after the value`);
  } catch (stop) {
    if (stop instanceof Stop) return { offset: stop.offset, reason: stop.reason };
    throw stop;
  }
  return { offset: text.length, reason: 'not valid JSON' };
}

/** UTF-8 text of a whole document, rejecting invalid bytes (with the line of the first bad byte). */
export function decodeUtf8(bytes: Buffer, relPath: string): string {
  try {
    return utf8.decode(bytes);
  } catch {
    // Find the line of the first invalid sequence for the message.
    const good = Buffer.from(bytes.toString('utf8').split('\uFFFD')[0] ?? '', 'utf8');
    const line = good.toString('utf8').split('\n').length;
    throw new SourceError({ relPath, line }, 'invalid UTF-8');
  }
}
