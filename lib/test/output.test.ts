import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { InvalidInputError } from '../errors.js';
import { csvField, parseOutputFormat, renderRows, type Column, type Row } from '../output.js';

const columns: Column[] = [{ key: 'name' }, { key: 'count' }, { key: 'meta' }];
const rows: Row[] = [
  { name: 'plain', count: 1, meta: null },
  { name: 'comma, "quote"', count: 22, meta: { k: [1, 2] } },
  { name: '中文名字', count: 333n, meta: 'line\nbreak' },
  { name: 'émoji 🚀', count: 2n ** 70n, meta: true },
];

/** A small RFC 4180 reader, independent of the writer, to read the CSV back. */
function parseCsv(text: string): string[][] {
  const records: string[][] = [];
  let field = '';
  let record: string[] = [];
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (quoted) {
      if (ch === '"' && text[i + 1] === '"') (field += '"'), i++;
      else if (ch === '"') quoted = false;
      else field += ch;
    } else if (ch === '"') quoted = true;
    else if (ch === ',') record.push(field), (field = '');
    else if (ch === '\n') record.push(field), records.push(record), (record = []), (field = '');
    else field += ch;
  }
  return records;
}

test('json renders an array of the rows, bigints kept exact', () => {
  const parsed = JSON.parse(renderRows(rows, columns, 'json')) as Array<Record<string, unknown>>;
  assert.equal(parsed, [
    { name: 'plain', count: 1, meta: null },
    { name: 'comma, "quote"', count: 22, meta: { k: [1, 2] } },
    { name: '中文名字', count: 333, meta: 'line\nbreak' },
    { name: 'émoji 🚀', count: '1180591620717411303424', meta: true },
  ]);
  assert.is(renderRows([], columns, 'json'), '[]\n');
});

test('jsonl renders one object per line, in column order', () => {
  const lines = renderRows(rows, columns, 'jsonl').trimEnd().split('\n');
  assert.is(lines.length, 4);
  assert.is(lines[0], '{"name":"plain","count":1,"meta":null}');
  assert.equal(JSON.parse(lines[2] ?? ''), { name: '中文名字', count: 333, meta: 'line\nbreak' });
});

test('csv quotes commas, quotes and newlines and reads back to the same cells', () => {
  const text = renderRows(rows, columns, 'csv');
  assert.equal(parseCsv(text), [
    ['name', 'count', 'meta'],
    ['plain', '1', ''],
    ['comma, "quote"', '22', '{"k":[1,2]}'],
    ['中文名字', '333', 'line\nbreak'],
    ['émoji 🚀', '1180591620717411303424', 'true'],
  ]);
  assert.is(csvField('a"b'), '"a""b"');
  assert.is(csvField('x\r'), '"x\r"');
  assert.is(csvField('plain'), 'plain');
});

test('table aligns by display width: wide CJK and emoji take two columns', () => {
  const text = renderRows(rows, [{ key: 'name' }, { key: 'count' }], 'table');
  // The name column is 14 wide ('comma, "quote"'); '中文名字' and 'émoji 🚀' are 8 columns wide each.
  // Numbers align right in a column 22 wide (2^70).
  const line = (name: string, nameWidth: number, count: string) => `${name}${' '.repeat(14 - nameWidth)}  ${count.padStart(22)}`;
  assert.is(
    text,
    [
      line('NAME', 4, 'COUNT'),
      line('plain', 5, '1'),
      line('comma, "quote"', 14, '22'),
      line('中文名字', 8, '333'),
      line('émoji 🚀', 8, '1180591620717411303424'),
      '',
    ].join('\n'),
  );
});

test('table escapes control characters so rows stay on one line', () => {
  const text = renderRows([{ a: 'x\ny\tz' }], [{ key: 'a' }], 'table');
  assert.is(text, 'A\nx\\ny\\tz\n');
});

test('tables escape the controls a terminal acts on, C1 (8-bit CSI) included; json and csv keep the bytes', () => {
  const text = 'a\x1b]52;c;QQ==\x07b\u009b2Jc\x7f\u0085';
  const table = renderRows([{ [text]: text }], [{ key: text }], 'table');
  assert.is(table, 'A\\x1b]52;C;QQ==\\x07B\\x9b2JC\\x7f\\x85\na\\x1b]52;c;QQ==\\x07b\\x9b2Jc\\x7f\\x85\n');
  assert.not.match(table, /[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
  assert.equal(JSON.parse(renderRows([{ t: text }], [{ key: 't' }], 'json')), [{ t: text }]);
  assert.is(renderRows([{ t: text }], [{ key: 't' }], 'csv'), `t\n${text}\n`);
});

test('tables escape the bidirectional formatting characters that would reorder a row as shown', () => {
  const name = 'evil\u202egnp.exe\u2066x\u2069\u200f\u061c';
  const table = renderRows([{ name, n: 1 }], [{ key: 'name' }, { key: 'n' }], 'table');
  assert.ok(table.includes('evil\\u202egnp.exe\\u2066x\\u2069\\u200f\\u061c'), table);
  assert.not.match(table, /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/);
  assert.equal(JSON.parse(renderRows([{ name }], [{ key: 'name' }], 'json')), [{ name }]);
});

test('an unknown format is invalid input naming the flag', () => {
  assert.throws(() => parseOutputFormat('yaml'), (e: unknown) => e instanceof InvalidInputError && /--format "yaml"/.test(e.message));
  assert.is(parseOutputFormat('csv'), 'csv');
});

test.run();
