/**
 * Splits a `find --match` expression into tokens. Bare words end at white space, parentheses,
 * quotes and comparison characters, so `$.status=ok` needs no spaces. Quoted strings take the
 * JSON escapes (`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`, `\uXXXX`); any other escape is an error.
 */
import { ExpressionError } from './errors.js';

export type TokenKind = 'lparen' | 'rparen' | 'string' | 'word' | 'field' | 'path' | 'op';

export interface Token {
  kind: TokenKind;
  /** Decoded text: the string's content, the word, the field name without `#`, the operator. */
  text: string;
  start: number;
  end: number;
}

const OP_CHARS = '=!<>';
const WORD_STOP = /[\s()"=!<>]/u;
const SIMPLE_ESCAPES: Readonly<Record<string, string>> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };

export function tokenize(source: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < source.length) {
    const ch = source[i] ?? '';
    if (/\s/u.test(ch)) {
      i++;
      continue;
    }
    const start = i;
    if (ch === '(' || ch === ')') {
      tokens.push({ kind: ch === '(' ? 'lparen' : 'rparen', text: ch, start, end: ++i });
    } else if (ch === '"') {
      const { text, end } = readString(source, i);
      tokens.push({ kind: 'string', text, start, end });
      i = end;
    } else if (OP_CHARS.includes(ch)) {
      const two = source.slice(i, i + 2);
      if (two === '==' || two === '<>' || (ch === '!' && two !== '!=')) {
        throw new ExpressionError(source, i, `unknown operator \`${ch === '!' ? ch : two}\``, undefined, 'use one of: = != > >= < <=');
      }
      const op = ['!=', '>=', '<='].includes(two) ? two : ch;
      i += op.length;
      tokens.push({ kind: 'op', text: op, start, end: i });
    } else {
      // A bare word; `#name` is a field selector and `$...` a JSON path, which may hold quoted keys (`$."a b"`).
      while (i < source.length) {
        const c = source[i] ?? '';
        if (c === '"' && ch === '$') i = readString(source, i).end;
        else if (WORD_STOP.test(c)) break;
        else i++;
      }
      const word = source.slice(start, i);
      if (ch === '#') tokens.push({ kind: 'field', text: word.slice(1), start, end: i });
      else if (ch === '$') tokens.push({ kind: 'path', text: word, start, end: i });
      else tokens.push({ kind: 'word', text: word, start, end: i });
    }
  }
  return tokens;
}

/** Reads the quoted string that starts at `at`; returns its decoded text and the offset after it. */
export function readString(source: string, at: number): { text: string; end: number } {
  let text = '';
  let i = at + 1;
  while (i < source.length) {
    const ch = source[i] ?? '';
    if (ch === '"') return { text, end: i + 1 };
    if (ch !== '\\') {
      text += ch;
      i++;
      continue;
    }
    const next = source[i + 1];
    if (next === undefined) break;
    const simple = SIMPLE_ESCAPES[next];
    if (simple !== undefined) {
      text += simple;
      i += 2;
    } else if (next === 'u') {
      const hex = source.slice(i + 2, i + 6);
      if (!/^[0-9a-fA-F]{4}$/.test(hex)) throw new ExpressionError(source, i, '`\\u` needs four hexadecimal digits');
      text += String.fromCharCode(parseInt(hex, 16));
      i += 6;
    } else {
      throw new ExpressionError(source, i, `unknown escape \`\\${next}\` in a quoted string`, undefined, 'escapes: \\" \\\\ \\n \\t \\r \\b \\f \\/ \\uXXXX');
    }
  }
  throw new ExpressionError(source, at, 'unterminated quoted string', undefined, 'close it with `"`; write a quote inside as `\\"`');
}
