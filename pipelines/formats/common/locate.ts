/**
 * Where a JSON Pointer's value starts in the text of a (valid) JSON document, so schema problems in
 * a multi-line `.json` file can name a line and column, not only a pointer. A pointer to a missing
 * member (a required key that is absent) is located at its nearest existing ancestor.
 */
import { lineAndColumn } from '../../../lib/text-position.js';
import { escapePointerToken } from '../../storyline/validate.js';

const STOP = Symbol('found');
const WHITESPACE = new Set([' ', '\t', '\n', '\r']);
const VALUE_END = new Set([',', ']', '}', ' ', '\t', '\n', '\r']);

/**
 * Visits the values of a valid JSON text in document order with their JSON Pointer and offset; the
 * walk ends when `visit` returns true. Recursive: callers walk only texts whose nesting is bounded.
 */
function walk(text: string, visit: (pointer: string, offset: number) => boolean): void {
  let i = 0;
  const ws = (): void => {
    while (i < text.length && WHITESPACE.has(text[i] as string)) i++;
  };
  const string = (): string => {
    const start = i;
    i++;
    while (i < text.length && text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
    i++;
    return JSON.parse(text.slice(start, i)) as string;
  };
  const value = (path: string): void => {
    ws();
    if (visit(path, i)) throw STOP;
    const ch = text[i];
    if (ch === '{' || ch === '[') {
      const close = ch === '{' ? '}' : ']';
      i++;
      ws();
      if (text[i] === close) {
        i++;
        return;
      }
      for (let index = 0; ; index++) {
        ws();
        let token = String(index);
        if (ch === '{') {
          token = escapePointerToken(string());
          ws();
          i++; // the colon
        }
        value(`${path}/${token}`);
        ws();
        if (text[i] === ',') {
          i++;
          continue;
        }
        i++;
        return;
      }
    }
    if (ch === '"') {
      string();
      return;
    }
    while (i < text.length && !VALUE_END.has(text[i] as string)) i++;
  };
  try {
    value('');
  } catch (error) {
    if (error !== STOP) throw error;
  }
}

function offsetOf(text: string, pointer: string): number | undefined {
  let found: number | undefined;
  walk(text, (path, offset) => {
    if (path !== pointer) return false;
    found = offset;
    return true;
  });
  return found;
}

const NUMBER_LITERAL = /-?\d+(\.\d+)?([eE][+-]?\d+)?/y;

/**
 * The pointer of the first number written as an integer (no fraction, no exponent) that a JavaScript
 * number cannot hold exactly (beyond ±(2^53 - 1)): JSON.parse rounds it without a word, so
 * keeping it would store a different number than the source wrote.
 */
export function firstInexactInteger(text: string): string | undefined {
  let found: string | undefined;
  walk(text, (path, offset) => {
    const ch = text[offset] as string;
    if (ch !== '-' && (ch < '0' || ch > '9')) return false;
    NUMBER_LITERAL.lastIndex = offset;
    const literal = NUMBER_LITERAL.exec(text);
    if (!literal || literal[1] !== undefined || literal[2] !== undefined || Number.isSafeInteger(Number(literal[0]))) return false;
    found = path;
    return true;
  });
  return found;
}

/** Line and column (1-based, columns in characters; `firstLine` is the line of the text's first character) of the pointer's value. */
export function locatePointer(text: string, pointer: string, firstLine = 1): { line: number; column: number } {
  let target = pointer;
  let offset = offsetOf(text, target);
  while (offset === undefined && target !== '') {
    target = target.slice(0, target.lastIndexOf('/'));
    offset = offsetOf(text, target);
  }
  return lineAndColumn(text, offset ?? 0, firstLine);
}
