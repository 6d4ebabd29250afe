import { Readable } from 'node:stream';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { SourceError } from '../formats/errors.js';
import { ExitCode, type ToolError } from '../../lib/errors.js';
import { parseJson, readLines } from '../formats/lines.js';

/** A stream that delivers the bytes in chunks of `size`, to cross line boundaries. */
const chunked = (bytes: Buffer, size: number) =>
  Readable.from((function* () {
    for (let i = 0; i < bytes.length; i += size) yield bytes.subarray(i, i + size);
  })());

const collect = async (bytes: Buffer, size: number) => {
  const out = [];
  for await (const line of readLines(chunked(bytes, size), 'f.jsonl')) out.push(line);
  return out;
};

test('lines keep their exact bytes (LF, CRLF, no final newline) across any chunking', async () => {
  const input = Buffer.from('{"a":1}\r\n\n{"b":"é"}\n{"c":3}', 'utf8');
  for (const size of [1, 2, 3, 7, 64]) {
    const lines = await collect(input, size);
    assert.equal(lines.map((l) => l.text), ['{"a":1}', '', '{"b":"é"}', '{"c":3}'], `chunk ${size}`);
    assert.equal(lines.map((l) => l.number), [1, 2, 3, 4]);
    assert.ok(Buffer.concat(lines.map((l) => l.bytes)).equals(input), 'bytes reproduce the input');
  }
});

test('invalid UTF-8 names the file and line', async () => {
  const input = Buffer.concat([Buffer.from('{"ok":1}\n{"bad":"'), Buffer.from([0xc3, 0x28]), Buffer.from('"}\n')]);
  try {
    await collect(input, 5);
    assert.unreachable('should throw');
  } catch (error) {
    assert.instance(error, SourceError);
    assert.is((error as Error).message, 'f.jsonl:2: invalid UTF-8');
  }
});

test('an over-long line is refused before it is buffered whole', async () => {
  const lines = readLines(chunked(Buffer.alloc(100, 0x61), 10), 'big.jsonl', 32);
  try {
    for await (const _ of lines) assert.unreachable('no line fits');
    assert.unreachable('should throw');
  } catch (error) {
    assert.is((error as Error).message, 'big.jsonl:1: line is longer than 32 bytes, the largest document trajstore takes');
    assert.is((error as ToolError).exitCode, ExitCode.ResourceLimit);
  }
});

test('JSON errors point at line and column', () => {
  try {
    parseJson('{\n  "a": 1,\n  "b": ]\n}', 'doc.json');
    assert.unreachable('should throw');
  } catch (error) {
    assert.instance(error, SourceError);
    assert.match((error as Error).message, /^doc\.json:3:8: invalid JSON: /);
  }
  try {
    parseJson('{"a": "cut', 'cut.json', 7);
    assert.unreachable('should throw');
  } catch (error) {
    assert.is((error as Error).message, 'cut.json:7:11: invalid JSON: unterminated string');
  }
});

test('the column of a JSON error is where the character it names is, counted in characters', () => {
  const cases: Array<[string, string]> = [
    ['not-json', '1:2: invalid JSON: unexpected "o"'],
    ['nope', '1:2: invalid JSON: unexpected "o"'],
    ['[tru]', '1:5: invalid JSON: unexpected "]"'],
    ['{"a":"😀"x}', `1:9: invalid JSON: expected ',' or '}', unexpected "x"`],
    ['{"中文":1,}', '1:9: invalid JSON: expected a property name, unexpected "}"'],
  ];
  for (const [text, message] of cases) {
    try {
      parseJson(text, 'p.jsonl');
      assert.unreachable('should throw');
    } catch (error) {
      assert.is((error as Error).message, `p.jsonl:${message}`, text);
    }
  }
});

test('the column of a pointer counts characters too', async () => {
  const { locatePointer } = await import('../formats/common/locate.js');
  assert.equal(locatePointer('{"a":"😀","b":[1]}', '/b'), { line: 1, column: 14 });
  assert.equal(locatePointer('{\n "😀": {"x": 1}}', '/😀/x', 3), { line: 4, column: 13 });
});

test('the syntax scan names the first error of each kind', async () => {
  const { jsonSyntaxError } = await import('../formats/lines.js');
  const cases: Array<[string, number, string]> = [
    ['{"a":1,}', 7, `expected a property name, unexpected "}"`],
    ['[1 2]', 3, `expected ',' or ']', unexpected "2"`],
    ['{"a" 1}', 5, `expected ':', unexpected "1"`],
    ['tru', 3, 'unexpected end of input'],
    ['{"a":"\\x"}', 6, 'bad escape'],
    ['{} {}', 3, 'unexpected "{" after the value'],
    ['', 0, 'unexpected end of input'],
  ];
  for (const [text, offset, reason] of cases) {
    assert.throws(() => JSON.parse(text), undefined, text);
    assert.equal(jsonSyntaxError(text), { offset, reason }, text);
  }
});

test.run();
