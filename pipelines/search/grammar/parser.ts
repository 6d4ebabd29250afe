/**
 * Recursive-descent parser for `find --match` expressions.
 *
 *   expr    := or
 *   or      := and ( OR and )*
 *   and     := not ( [AND] not )*          adjacent terms are ANDed
 *   not     := NOT not | primary
 *   primary := "(" expr ")" | STRING | WORD
 *            | #FIELD "(" (STRING | WORD) ")"
 *            | PATH OP value
 *            | #json "(" (STRING | PATH) ")" OP value
 *            | #json.COL "(" (STRING | PATH) ")" OP value
 *   value   := STRING | number | true | false | null | WORD (a bare word is a string)
 *
 * Keywords are case-insensitive; to search for the word "and" itself, quote it.
 */
import {
  COMPARE_OPS,
  JSON_COLUMNS,
  TEXT_FIELDS,
  TEXT_FIELD_ALIASES,
  type CompareOp,
  type Expr,
  type JsonColumn,
  type JsonNode,
  type JsonScalar,
  type Span,
  type TextField,
} from './ast.js';
import { ExpressionError } from './errors.js';
import { EXPRESSION_LIMITS } from '../limits.js';
import { readString, tokenize, type Token } from './tokens.js';

const KEYWORDS = new Set(['AND', 'OR', 'NOT']);

const NUMBER = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?$/;
const PLAIN_KEY = /^[A-Za-z_][A-Za-z0-9_]*$/;

export function parseExpression(source: string): Expr {
  return new Parser(source).parse();
}

class Parser {
  private readonly tokens: Token[];
  private pos = 0;
  private depth = 0;
  private terms = 0;

  constructor(private readonly source: string) {
    this.tokens = tokenize(source);
  }

  parse(): Expr {
    if (this.tokens.length === 0) throw this.error(0, 'empty expression', 'give a word, a "quoted phrase", #field("text") or $.path=value');
    const expr = this.parseOr();
    const extra = this.peek();
    if (extra) {
      throw extra.kind === 'rparen' ? this.error(extra.start, 'unmatched `)`') : this.error(extra.start, `unexpected \`${this.shown(extra)}\``);
    }
    return expr;
  }

  private parseOr(): Expr {
    const operands = [this.parseAnd()];
    while (this.isKeyword(this.peek(), 'OR')) {
      this.pos++;
      operands.push(this.parseAnd());
    }
    return this.combine('or', operands);
  }

  private parseAnd(): Expr {
    const operands = [this.parseNot()];
    for (;;) {
      const next = this.peek();
      if (this.isKeyword(next, 'AND')) {
        this.pos++;
        operands.push(this.parseNot());
      } else if (next && next.kind !== 'rparen' && !this.isKeyword(next, 'OR')) {
        operands.push(this.parseNot()); // implicit AND
      } else {
        return this.combine('and', operands);
      }
    }
  }

  private parseNot(): Expr {
    const token = this.peek();
    if (token && this.isKeyword(token, 'NOT')) {
      this.pos++;
      const operand = this.nested(token, () => this.parseNot());
      return { type: 'not', operand, span: { start: token.start, end: operand.span.end } };
    }
    return this.parsePrimary();
  }

  /** Parses one level deeper, refusing to go past the depth limit. */
  private nested(at: Token, parse: () => Expr): Expr {
    if (++this.depth > EXPRESSION_LIMITS.maxDepth) {
      throw this.error(at.start, `the expression nests deeper than ${EXPRESSION_LIMITS.maxDepth} levels of parentheses and NOT`, 'flatten it: adjacent terms are ANDed, and NOT NOT x is x');
    }
    try {
      return parse();
    } finally {
      this.depth--;
    }
  }

  /** Counts a search term, refusing more than the limit. */
  private term(at: Token): void {
    if (++this.terms > EXPRESSION_LIMITS.maxTerms) {
      throw this.error(at.start, `the expression has more than ${EXPRESSION_LIMITS.maxTerms} search terms`, 'split the search into several runs of find');
    }
  }

  private parsePrimary(): Expr {
    const token = this.next('a search term');
    if (token.kind !== 'lparen' && token.kind !== 'rparen' && token.kind !== 'op') this.term(token);
    switch (token.kind) {
      case 'lparen': {
        if (this.peek()?.kind === 'rparen') throw this.error(token.start, 'empty parentheses');
        const inner = this.nested(token, () => this.parseOr());
        const close = this.peek();
        if (close?.kind !== 'rparen') {
          throw close ? this.error(close.start, `expected \`)\`, found \`${this.shown(close)}\``) : this.error(token.start, 'unclosed `(`');
        }
        this.pos++;
        return { ...inner, span: { start: token.start, end: close.end } };
      }
      case 'rparen':
        throw this.error(token.start, 'unmatched `)`');
      case 'op':
        throw this.error(token.start, `unexpected \`${token.text}\``, 'a comparison needs a JSON path on its left: $.path=value or #json("$.path")=value');
      case 'string':
        if (token.text === '') throw this.error(token.start, 'empty phrase');
        return { type: 'text', field: 'content', text: token.text, quoted: true, span: this.span(token) };
      case 'word':
        if (KEYWORDS.has(token.text.toUpperCase())) {
          throw this.error(token.start, `\`${token.text}\` needs a term on each side`, `to search for the word itself, quote it: "${token.text}"`);
        }
        return { type: 'text', field: 'content', text: token.text, quoted: false, span: this.span(token) };
      case 'path':
        return this.comparison(token, null, this.jsonPath(token.text, token.start));
      case 'field':
        return this.field(token);
    }
  }

  /** `#name(...)`: a text field, `#json(...)` or `#json.COL(...)`. */
  private field(token: Token): Expr {
    const name = token.text;
    const lower = name.toLowerCase();
    if (lower === 'json' || lower.startsWith('json.')) {
      const column = lower === 'json' ? null : this.jsonColumn(lower.slice(5), token.start + 6);
      const { arg, at } = this.callArgument(token, 'a JSON path such as "$.key"');
      const path = this.jsonPath(arg, at);
      return this.comparison(token, column, path);
    }
    const field = (TEXT_FIELDS as readonly string[]).includes(lower) ? (lower as TextField) : TEXT_FIELD_ALIASES[lower];
    if (!field) {
      const known = [...TEXT_FIELDS, ...Object.keys(TEXT_FIELD_ALIASES), 'json', 'json.COLUMN'].map((f) => `#${f}`).join(' ');
      throw this.error(token.start, name === '' ? 'a field name must follow `#`' : `unknown field \`#${name}\``, `fields: ${known}; to search for text that starts with #, quote it: "#${name}"`);
    }
    const { arg, quoted } = this.callArgument(token, 'the text to search for');
    return { type: 'text', field, text: arg, quoted, span: { start: token.start, end: this.tokens[this.pos - 1]?.end ?? token.end } };
  }

  /** The single argument of `#name(...)`: a quoted string, or one bare word or path. */
  private callArgument(field: Token, what: string): { arg: string; quoted: boolean; at: number } {
    const open = this.peek();
    if (open?.kind !== 'lparen' || open.start !== field.end) {
      throw this.error(field.end, `\`#${field.text}\` must be followed by \`(\``, `write #${field.text}("...")`);
    }
    this.pos++;
    const arg = this.next(what);
    if (arg.kind === 'rparen') throw this.error(arg.start, `\`#${field.text}()\` is empty`, `put ${what} inside`);
    if (arg.kind !== 'string' && arg.kind !== 'word' && arg.kind !== 'path') throw this.error(arg.start, `expected ${what}, found \`${this.shown(arg)}\``);
    if (arg.kind === 'string' && arg.text === '') throw this.error(arg.start, `\`#${field.text}("")\` is empty`, `put ${what} inside`);
    const close = this.peek();
    if (close?.kind !== 'rparen') {
      if (!close) throw this.error(open.start, 'unclosed `(`');
      throw this.error(close.start, `expected \`)\`, found \`${this.shown(close)}\``, `quote text with several words: #${field.text}("...")`);
    }
    this.pos++;
    // A quoted path's offsets start after the quote.
    return { arg: arg.text, quoted: arg.kind === 'string', at: arg.kind === 'string' ? arg.start + 1 : arg.start };
  }

  private comparison(head: Token, column: JsonColumn | null, path: string): JsonNode {
    const opToken = this.peek();
    if (opToken?.kind !== 'op') {
      const at = opToken ? opToken.start : this.source.length;
      throw this.error(at, 'expected a comparison operator after the JSON path', 'use one of: = != > >= < <=  e.g. $.status="done"');
    }
    this.pos++;
    const op = opToken.text as CompareOp;
    if (!(COMPARE_OPS as readonly string[]).includes(op)) throw this.error(opToken.start, `unknown operator \`${op}\``);
    const valueToken = this.next(`a value after \`${op}\``);
    let value: JsonScalar;
    if (valueToken.kind === 'string') value = valueToken.text;
    else if (valueToken.kind === 'word' || valueToken.kind === 'path') value = literal(valueToken.text);
    else throw this.error(valueToken.start, `expected a value after \`${op}\`, found \`${this.shown(valueToken)}\``, 'a value is a number, true, false, null, a "string" or a bare word');
    if ((value === null || typeof value === 'boolean') && op !== '=' && op !== '!=') {
      throw this.error(opToken.start, `\`${op}\` cannot compare with ${String(value)}`, 'only = and != apply to true, false and null');
    }
    return { type: 'json', column, path, op, value, span: { start: head.start, end: valueToken.end } };
  }

  private jsonColumn(name: string, at: number): JsonColumn {
    if ((JSON_COLUMNS as readonly string[]).includes(name)) return name as JsonColumn;
    throw this.error(at, name === '' ? 'a column name must follow `#json.`' : `unknown JSON column \`${name}\``, `columns: ${JSON_COLUMNS.join(', ')}`);
  }

  /**
   * Checks a JSONPath (`$`, `.key`, `."any key"`, `[N]`, `["any key"]`) and writes it the way SQLite's
   * json_extract reads it. `at` is the offset of the path in the source, for the caret.
   */
  private jsonPath(text: string, at: number): string {
    if (!text.startsWith('$')) throw this.error(at, 'a JSON path starts with `$`', 'e.g. "$.metrics.tokens" or "$.tags[0]"');
    let out = '$';
    let i = 1;
    const key = (name: string, where: number): void => {
      if (name.includes('"')) throw this.error(at + where, 'a JSON path key cannot contain `"`');
      out += PLAIN_KEY.test(name) ? `.${name}` : `."${name}"`;
    };
    while (i < text.length) {
      const ch = text[i];
      if (ch === '.' && text[i + 1] === '"') {
        const { text: name, end } = this.pathString(text, i + 1, at);
        key(name, i + 1);
        i = end;
      } else if (ch === '.') {
        let j = i + 1;
        while (j < text.length && !'.["'.includes(text[j] ?? '')) j++;
        const name = text.slice(i + 1, j);
        if (name === '' || name.includes(']')) throw this.error(at + i + 1, 'expected a key after `.` in the JSON path');
        key(name, i + 1);
        i = j;
      } else if (ch === '[') {
        const close = text.indexOf(']', i);
        const inner = close < 0 ? '' : text.slice(i + 1, close);
        if (/^\d+$/.test(inner)) {
          out += `[${Number(inner)}]`;
          i = close + 1;
        } else if (text[i + 1] === '"') {
          const { text: name, end } = this.pathString(text, i + 1, at);
          if (text[end] !== ']') throw this.error(at + end, 'expected `]` in the JSON path');
          key(name, i + 1);
          i = end + 1;
        } else {
          throw this.error(at + i, 'expected `[N]` (an index from 0) or `["key"]` in the JSON path');
        }
      } else {
        throw this.error(at + i, `unexpected \`${ch}\` in the JSON path`, 'paths look like $.a.b, $.a[0], $."key with spaces"; to search for text that starts with $, quote it: "$100"');
      }
    }
    return out;
  }

  private pathString(text: string, quoteAt: number, at: number): { text: string; end: number } {
    try {
      return readString(text, quoteAt);
    } catch {
      throw this.error(at + quoteAt, 'unterminated quoted key in the JSON path');
    }
  }

  private combine(type: 'and' | 'or', operands: Expr[]): Expr {
    if (operands.length === 1) return operands[0] as Expr;
    const flat = operands.flatMap((o) => (o.type === type ? o.operands : [o]));
    return { type, operands: flat, span: { start: flat[0]?.span.start ?? 0, end: flat[flat.length - 1]?.span.end ?? 0 } };
  }

  private isKeyword(token: Token | undefined, keyword: string): boolean {
    return token?.kind === 'word' && token.text.toUpperCase() === keyword;
  }

  private peek(): Token | undefined {
    return this.tokens[this.pos];
  }

  private next(what: string): Token {
    const token = this.tokens[this.pos];
    if (!token) throw this.error(this.source.length, `unexpected end of expression: expected ${what}`);
    this.pos++;
    return token;
  }

  private span(token: Token): Span {
    return { start: token.start, end: token.end };
  }

  private shown(token: Token): string {
    return this.source.slice(token.start, token.end);
  }

  private error(offset: number, reason: string, hint?: string): ExpressionError {
    return new ExpressionError(this.source, offset, reason, undefined, hint);
  }
}

/** A bare value: a JSON number, true, false or null; any other word is a string. */
function literal(word: string): JsonScalar {
  if (word === 'true') return true;
  if (word === 'false') return false;
  if (word === 'null') return null;
  if (NUMBER.test(word)) return Number(word);
  return word;
}
