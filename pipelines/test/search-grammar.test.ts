import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ExitCode } from '../../lib/errors.js';
import type { Expr } from '../search/grammar/ast.js';
import { ExpressionError } from '../search/grammar/errors.js';
import { parseExpression } from '../search/grammar/parser.js';
import { EXPRESSION_LIMITS } from '../search/limits.js';

/** A compact, unambiguous rendering of a tree: `(AND a (NOT b))`, `user:"x"`, `extra|$.a>=1`. */
function show(expr: Expr): string {
  switch (expr.type) {
    case 'text':
      return `${expr.field}:${JSON.stringify(expr.text)}${expr.quoted ? 'q' : ''}`;
    case 'json':
      return `${expr.column ?? '*'}|${expr.path}${expr.op}${JSON.stringify(expr.value)}`;
    case 'not':
      return `(NOT ${show(expr.operand)})`;
    case 'and':
    case 'or':
      return `(${expr.type.toUpperCase()} ${expr.operands.map(show).join(' ')})`;
  }
}

const VALID: Array<[string, string]> = [
  // terms, phrases, implicit AND
  ['disk', 'content:"disk"'],
  ['"disk full"', 'content:"disk full"q'],
  ['disk full', '(AND content:"disk" content:"full")'],
  ['  disk\tfull\n', '(AND content:"disk" content:"full")'],
  // precedence: () > NOT > AND > OR; keywords in any case
  ['a OR b AND c', '(OR content:"a" (AND content:"b" content:"c"))'],
  ['a AND b OR c', '(OR (AND content:"a" content:"b") content:"c")'],
  ['(a OR b) AND c', '(AND (OR content:"a" content:"b") content:"c")'],
  ['NOT a AND b', '(AND (NOT content:"a") content:"b")'],
  ['NOT (a AND b)', '(NOT (AND content:"a" content:"b"))'],
  ['NOT NOT a', '(NOT (NOT content:"a"))'],
  ['a or b and not c', '(OR content:"a" (AND content:"b" (NOT content:"c")))'],
  ['a Or b', '(OR content:"a" content:"b")'],
  ['a b OR c d', '(OR (AND content:"a" content:"b") (AND content:"c" content:"d"))'],
  ['a OR b OR c', '(OR content:"a" content:"b" content:"c")'],
  ['((a))', 'content:"a"'],
  // quoting keywords and escapes
  ['"AND"', 'content:"AND"q'],
  ['"say \\"hi\\""', 'content:"say \\"hi\\""q'],
  ['"back\\\\slash"', 'content:"back\\\\slash"q'],
  ['"tab\\there"', 'content:"tab\\there"q'],
  ['"\\u00e9t\\u00E9"', 'content:"été"q'],
  ['"a (b) OR c"', 'content:"a (b) OR c"q'],
  ['"#tag" "$100" "$.a=1"', '(AND content:"#tag"q content:"$100"q content:"$.a=1"q)'],
  // unicode
  ['日志', 'content:"日志"'],
  ['"检查 服务器"', 'content:"检查 服务器"q'],
  ['#user(日志文件)', 'user:"日志文件"'],
  ['café 🚀', '(AND content:"café" content:"🚀")'],
  // scoped fields, quoted or one bare word
  ['#system(prompt)', 'system:"prompt"'],
  ['#user("disk full")', 'user:"disk full"q'],
  ['#assistant(ok) #agent(ok)', '(AND assistant:"ok" assistant:"ok")'],
  ['#USER(x)', 'user:"x"'],
  ['#content(a) #message(b) #reasoning(c) #observation(d) #prompt(e) #model(gpt-4o) #all(f)', '(AND content:"a" message:"b" reasoning:"c" observation:"d" prompt:"e" model:"gpt-4o" all:"f")'],
  // JSON predicates
  ['$.status=done', '*|$.status="done"'],
  ['$.status = "done"', '*|$.status="done"'],
  ['$.n>=5', '*|$.n>=5'],
  ['$.n != -1.5e2', '*|$.n!=-150'],
  ['$.ok=true', '*|$.ok=true'],
  ['$.gone = null', '*|$.gone=null'],
  ['$.v="42"', '*|$.v="42"'],
  ['$.a.b[0].c < 3', '*|$.a.b[0].c<3'],
  ['$."odd key".x=1', '*|$."odd key".x=1'],
  ['$["odd key"]=1', '*|$."odd key"=1'],
  ['$.名字=张三', '*|$."名字"="张三"'],
  ['#json("$.status")=done', '*|$.status="done"'],
  ['#json($.status)=done', '*|$.status="done"'],
  ['#json.metrics("$.prompt_tokens") > 100', 'metrics|$.prompt_tokens>100'],
  ['#json.final_metrics($.total_steps)<=3', 'final_metrics|$.total_steps<=3'],
  ['disk AND $.score > 0.5', '(AND content:"disk" *|$.score>0.5)'],
  ['NOT $.status=done', '(NOT *|$.status="done")'],
  ['($.a=1 OR $.b=2) disk', '(AND (OR *|$.a=1 *|$.b=2) content:"disk")'],
];

for (const [source, expected] of VALID) {
  test(`parses ${JSON.stringify(source)}`, () => {
    assert.is(show(parseExpression(source)), expected);
  });
}

/** [expression, expected message part, expected 1-based column]. */
const INVALID: Array<[string, string, number]> = [
  ['', 'empty expression', 1],
  ['   ', 'empty expression', 1],
  ['disk AND', 'unexpected end of expression', 9],
  ['OR disk', '`OR` needs a term on each side', 1],
  ['a OR OR b', '`OR` needs a term on each side', 6],
  ['NOT', 'unexpected end of expression', 4],
  ['(a OR b', 'unclosed `(`', 1],
  ['a OR b)', 'unmatched `)`', 7],
  [')', 'unmatched `)`', 1],
  ['()', 'empty parentheses', 1],
  ['"unterminated', 'unterminated quoted string', 1],
  ['ok "bad \\q escape"', 'unknown escape `\\q`', 9],
  ['"\\u12"', '`\\u` needs four hexadecimal digits', 2],
  ['""', 'empty phrase', 1],
  ['#nope(x)', 'unknown field `#nope`', 1],
  ['#(x)', 'a field name must follow `#`', 1],
  ['#user', '`#user` must be followed by `(`', 6],
  ['#user (x)', '`#user` must be followed by `(`', 6],
  ['#user()', '`#user()` is empty', 7],
  ['#user("")', '`#user("")` is empty', 7],
  ['#user(two words)', 'expected `)`, found `words`', 11],
  ['#user("x"', 'unclosed `(`', 6],
  ['= x', 'unexpected `=`', 1],
  ['$.a', 'expected a comparison operator', 4],
  ['$.a disk', 'expected a comparison operator', 5],
  ['$.a =', 'unexpected end of expression: expected a value after `=`', 6],
  ['$.a == 1', 'unknown operator `==`', 5],
  ['$.a <> 1', 'unknown operator `<>`', 5],
  ['$.a ! 1', 'unknown operator `!`', 5],
  ['$.a > true', '`>` cannot compare with true', 5],
  ['$.a < null', '`<` cannot compare with null', 5],
  ['$.a = (', 'expected a value after `=`, found `(`', 7],
  ['$..a=1', 'expected a key after `.`', 3],
  ['$.a[x]=1', 'expected `[N]`', 4],
  ['$100', 'unexpected `1` in the JSON path', 2],
  ['$.a.=1', 'expected a key after `.`', 5],
  ['#json("status")=1', 'a JSON path starts with `$`', 8],
  ['#json.bogus("$.a")=1', 'unknown JSON column `bogus`', 7],
  ['#json.("$.a")=1', 'a column name must follow `#json.`', 7],
  ['#json("$.a")', 'expected a comparison operator', 13],
  ['日志 AND', 'unexpected end of expression', 7],
];

for (const [source, reason, column] of INVALID) {
  test(`rejects ${JSON.stringify(source)} at column ${column}`, () => {
    let caught: unknown;
    try {
      parseExpression(source);
    } catch (error) {
      caught = error;
    }
    assert.ok(caught instanceof ExpressionError, `expected an ExpressionError, got ${String(caught)}`);
    const error = caught as ExpressionError;
    assert.is(error.exitCode, ExitCode.InvalidInput);
    assert.match(error.message, reason);
    assert.match(error.message, `at column ${column}:`);
    // The caret line sits under the reported column (ASCII sources: one column per character).
    const [, shown, caret] = error.message.split('\n');
    assert.is(shown, `  ${source.replace(/[\u0000-\u001f]/g, ' ')}`);
    if (/^[\x20-\x7e]*$/.test(source)) assert.is(caret, `  ${' '.repeat(column - 1)}^`);
  });
}

test('the caret counts wide characters twice so it sits under the spot on a terminal', () => {
  try {
    parseExpression('日志 AND');
    assert.unreachable();
  } catch (error) {
    const [, shown, caret] = (error as Error).message.split('\n');
    assert.is(shown, '  日志 AND');
    // 日志 is 4 terminal columns, then " AND" is 4 more: the caret goes after them.
    assert.is(caret, `  ${' '.repeat(8)}^`);
  }
});

test('an error from the second of several --match names it', () => {
  try {
    parseExpression('a (');
    assert.unreachable();
  } catch (error) {
    const numbered = (error as ExpressionError).numbered(2);
    assert.match(numbered.message, /^invalid --match #2 expression at column 4: unexpected end of expression/);
  }
});
test('nesting and size limits: 64 levels and 256 terms parse, one more is refused with a caret near the spot', () => {
  const { maxDepth, maxTerms } = EXPRESSION_LIMITS;
  const parens = (n: number) => `${'('.repeat(n)}x${')'.repeat(n)}`;
  const nots = (n: number) => `${'NOT '.repeat(n)}x`;
  const terms = (n: number) => Array.from({ length: n }, (_, i) => `w${i}`).join(' OR ');
  assert.is(show(parseExpression(parens(maxDepth))), 'content:"x"');
  assert.is(show(parseExpression(nots(maxDepth))), `${'(NOT '.repeat(maxDepth)}content:"x"${')'.repeat(maxDepth)}`);
  assert.is((parseExpression(terms(maxTerms)) as { operands: unknown[] }).operands.length, maxTerms);
  // Mixed: each NOT and each parenthesis is a level.
  assert.ok(parseExpression(`${'(NOT '.repeat(maxDepth / 2)}x${')'.repeat(maxDepth / 2)}`));
  const refused: Array<[string, RegExp]> = [
    [parens(maxDepth + 1), /nests deeper than 64 levels/],
    [parens(3000), /nests deeper than 64 levels/],
    [nots(maxDepth + 1), /nests deeper than 64 levels/],
    [nots(20_000), /nests deeper than 64 levels/],
    [`${'(NOT '.repeat(maxDepth / 2 + 1)}x${')'.repeat(maxDepth / 2 + 1)}`, /nests deeper than 64 levels/],
    [terms(maxTerms + 1), /more than 256 search terms/],
    [Array.from({ length: 5000 }, (_, i) => `$.a${i}=1`).join(' '), /more than 256 search terms/],
  ];
  for (const [expression, reason] of refused) {
    try {
      parseExpression(expression);
      assert.unreachable(expression.slice(0, 40));
    } catch (error) {
      assert.instance(error, ExpressionError);
      assert.is((error as ExpressionError).exitCode, ExitCode.InvalidInput);
      assert.match((error as Error).message, reason);
      // The excerpt is cut around the spot, so the caret stays on screen.
      const [, shown, caret] = (error as Error).message.split('\n');
      assert.ok((shown as string).length <= 2 + 1 + 60 + 60 + 1, `excerpt of ${(shown as string).length} characters`);
      assert.ok((caret as string).length <= 2 + 1 + 60 + 1);
    }
  }
});

test('fuzz: 3000 random expressions (fixed seed) parse or fail with ExpressionError, never anything else', () => {
  let seed = 20261125;
  const rand = (): number => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed / 0x7fffffff;
  };
  const vocabulary = ['a', '"a b"', 'AND', 'OR', 'NOT', '(', ')', '#user(', '#json(', '#json.metrics(', '"$.x"', '$.x', '$.a[0]', '=', '!=', '>=', '1', 'true', 'null', '"', '\\', '#', '日志', '$', '[', ']', '.', ',', '\u0000'];
  let parsed = 0;
  for (let i = 0; i < 3000; i++) {
    const length = 1 + Math.floor(rand() * 12);
    const expression = Array.from({ length }, () => vocabulary[Math.floor(rand() * vocabulary.length)]).join(rand() < 0.5 ? ' ' : '');
    try {
      parseExpression(expression);
      parsed++;
    } catch (error) {
      if (!(error instanceof ExpressionError)) assert.unreachable(`${JSON.stringify(expression)}: ${(error as Error).stack}`);
    }
  }
  assert.ok(parsed > 100 && parsed < 2900, `${parsed} of 3000 parsed: the vocabulary should make both kinds`);
});

test.run();
