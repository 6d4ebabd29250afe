/**
 * Framing shared by the decoders: lines of a JSONL file with their exact bytes and numbers, and
 * JSON parsing whose errors point at file:line:column. Memory is bounded by the longest line.
 */
import type { Readable } from 'node:stream';
import { SourceError } from './errors.js';
import { readBounded } from '../../lib/streams.js';

export interface Line {
  /** 1-based line number. */
  number: number;
  /** The line's text without its terminator (`\n` or `\r\n`). */
  text: string;
  /** The line's exact bytes including its terminator (the last line may have none). */
  bytes: Buffer;
}

export const DEFAULT_MAX_LINE_BYTES = 256 * 1024 * 1024;
const NEWLINE = 0x0a;
const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Lines of a stream; rejects invalid UTF-8 and lines longer than `maxLineBytes` with their line number. */
export async function* readLines(stream: Readable, relPath: string, maxLineBytes = DEFAULT_MAX_LINE_BYTES): AsyncGenerator<Line> {
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
    return { number, text, bytes };
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
  return new SourceError({ relPath, line }, `line is longer than ${max} bytes`);
}

/** Whole-stream bytes, bounded: for formats whose unit is one JSON document per file. */
export async function readAll(stream: Readable, relPath: string, maxBytes: number): Promise<Buffer> {
  const bytes = await readBounded(stream, maxBytes);
  if (bytes === undefined) throw new SourceError({ relPath }, `document is larger than ${maxBytes} bytes`);
  return bytes;
}

/**
 * JSON.parse with a located error. `firstLine` is the line number of the text's first line, so
 * multi-line documents report the line and column of the syntax error.
 */
export function parseJson(text: string, relPath: string, firstLine = 1): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    // V8 does not always say where (e.g. "Unexpected token"), so find the offset ourselves.
    const { offset, reason } = jsonSyntaxError(text);
    const { line, column } = positionOf(text, offset, firstLine);
    throw new SourceError({ relPath, line, column }, `invalid JSON: ${reason}`, { cause: error });
  }
}

function positionOf(text: string, offset: number, firstLine: number): { line: number; column: number } {
  let line = firstLine;
  let lineStart = 0;
  for (let i = text.indexOf('\n'); i !== -1 && i < offset; i = text.indexOf('\n', i + 1)) {
    line += 1;
    lineStart = i + 1;
  }
  return { line, column: offset - lineStart + 1 };
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
    for (const ch of word) if (text[i++] !== ch) fail(describe(), i - 1);
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
