/**
 * Documents at and past trajstore's limits, through the real command: nesting (512 levels import and
 * export in every format; one more is refused with its pointer), integers (exact up to ±(2^53 - 1);
 * a larger integer literal is refused with its pointer, a run's sums too), and size (a document of
 * 40 MB imports and exports; one past 256 MiB, or one whose parse would not fit the heap, exits 5).
 * A refused import leaves nothing behind.
 */
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { MAX_DOCUMENT_BYTES, MAX_JSON_DEPTH } from '../formats/lines.js';
import { OUTPUT_FORMATS } from '../formats/registry.js';
import { sandbox } from './helpers/sandbox.js';

const s = sandbox('document-limits');

/** An ATIF trajectory of a few steps; `extra` and the first step's message are the knobs. */
function trajectory(session: string, extra: string, message = '"Look at the logs."', tokens = '120'): string {
  return `{"schema_version":"ATIF-v1.7","session_id":"${session}","agent":{"name":"a","version":"1"},"extra":${extra},"steps":[
    {"step_id":1,"source":"user","message":${message}},
    {"step_id":2,"source":"agent","message":"Done.","metrics":{"prompt_tokens":${tokens},"completion_tokens":5}}]}`;
}

/** `[[[...]]]` with `levels` levels of arrays. */
const nested = (levels: number): string => `${'['.repeat(levels)}${']'.repeat(levels)}`;

/** Nothing of a refused import: no dataset and no hidden build or lock beside it. */
function nothingLeft(name: string): void {
  assert.equal(readdirSync(s.home).filter((f) => f === name || f.startsWith(`.${name}`)), [], `leftovers of ${name}`);
}

test('512 levels of nesting import and export in every format; 513 are refused with exit 2 and the pointer', async () => {
  // The document is level 1 and `extra` level 2, so its value may nest MAX_JSON_DEPTH - 2 more levels.
  writeFileSync(s.path('deepest.json'), trajectory('deepest', `{"deep":${nested(MAX_JSON_DEPTH - 2)}}`));
  const imported = await s.run(['import', '-f', s.path('deepest.json'), '-t', s.path('deepest')]);
  assert.is(imported.code, 0, imported.stderr);
  for (const format of OUTPUT_FORMATS) {
    const out = s.path(`deepest.${format}.jsonl`);
    const exported = await s.run(['export', '-f', s.path('deepest'), '-o', format, '-t', out]);
    assert.is(exported.code, 0, `${format}: ${exported.stderr}`);
    const again = await s.run(['import', '-f', out, '-t', s.path(`deepest-${format}`), '-i', format]);
    assert.is(again.code, 0, `${format} re-import: ${again.stderr}`);
  }
  const sql = await s.run(['query', s.path('deepest'), '--sql', "SELECT json_valid(extra_json) AS ok FROM runs", '--format', 'csv']);
  assert.is(sql.stdout, 'ok\n1\n', sql.stderr);

  for (const levels of [MAX_JSON_DEPTH - 1, 100_000]) {
    writeFileSync(s.path('deeper.json'), trajectory('deeper', `{"deep":${nested(levels)}}`));
    const r = await s.run(['import', '-f', s.path('deeper.json'), '-t', s.path('deeper')]);
    assert.is(r.code, 2, r.stderr);
    assert.match(r.stderr, /deeper\.json:1:\d+ at \/extra\/deep\/0\/0\/0\/0\/0\/0\/…: nested deeper than 512 levels/);
    nothingLeft('deeper');
  }
});

test('integers: exact up to 2^53 - 1; a larger integer literal exits 2 with its pointer; a float stays a float', async () => {
  writeFileSync(s.path('edge.json'), trajectory('edge', `{"id":${Number.MAX_SAFE_INTEGER}}`, undefined, String(Number.MAX_SAFE_INTEGER)));
  const edge = await s.run(['import', '-f', s.path('edge.json'), '-t', s.path('edge')]);
  assert.is(edge.code, 0, edge.stderr);
  const tokens = await s.run(['query', s.path('edge'), '--sql', 'SELECT prompt_tokens, extra_json FROM runs', '--format', 'json']);
  assert.equal(JSON.parse(tokens.stdout), [{ prompt_tokens: Number.MAX_SAFE_INTEGER, extra_json: `{"id":${Number.MAX_SAFE_INTEGER}}` }]);

  for (const [extra, tokenText, pointer] of [
    ['{}', '99999999999999999999999', '/steps/1/metrics/prompt_tokens'],
    ['{"ids":[1,12345678901234567890]}', '7', '/extra/ids/1'],
    ['{"n":-9007199254740993}', '7', '/extra/n'],
  ] as const) {
    writeFileSync(s.path('huge.json'), trajectory('huge', extra, undefined, tokenText));
    const r = await s.run(['import', '-f', s.path('huge.json'), '-t', s.path('huge')]);
    assert.is(r.code, 2, r.stderr);
    assert.match(r.stderr, `huge.json:`);
    assert.match(r.stderr, ` at ${pointer}: integer out of range`);
    nothingLeft('huge');
  }

  // Written as a float it is a measure, kept as the source wrote it: not a count, so not summed.
  writeFileSync(s.path('float.json'), trajectory('float', '{"big":1e300}', undefined, '1e23'));
  const float = await s.run(['import', '-f', s.path('float.json'), '-t', s.path('float')]);
  assert.is(float.code, 0, float.stderr);
  const back = await s.run(['export', '-f', s.path('float'), '-o', 'atif', '-t', '-']);
  const doc = JSON.parse(back.stdout) as { extra: { big: number }; steps: Array<{ metrics?: { prompt_tokens?: number } }> };
  assert.is(doc.extra.big, 1e300);
  assert.is(doc.steps[1]?.metrics?.prompt_tokens, 1e23);

  // Each count exact, their sum not: the run's total cannot be stored, and the import says so.
  const steps = [1, 2].map((n) => `{"step_id":${n + 1},"source":"agent","message":"m","metrics":{"prompt_tokens":${Number.MAX_SAFE_INTEGER}}}`);
  writeFileSync(s.path('sum.json'), `{"schema_version":"ATIF-v1.7","session_id":"sum","agent":{"name":"a","version":"1"},"steps":[{"step_id":1,"source":"user","message":"q"},${steps.join(',')}]}`);
  const sum = await s.run(['import', '-f', s.path('sum.json'), '-t', s.path('sum')]);
  assert.is(sum.code, 2, sum.stderr);
  assert.match(sum.stderr, 'prompt_tokens summed over its turns');
  nothingLeft('sum');
});

test('a 40 MB message imports and exports; a document past 256 MiB, or one whose parse would not fit, exits 5 and leaves nothing', async () => {
  const message = 'x'.repeat(40 * 1024 * 1024);
  writeFileSync(s.path('long.json'), trajectory('long', '{}', JSON.stringify(message)));
  const imported = await s.run(['import', '-f', s.path('long.json'), '-t', s.path('long')]);
  assert.is(imported.code, 0, imported.stderr);
  const exported = await s.run(['export', '-f', s.path('long'), '-o', 'atif', '-t', s.path('long-out.json')]);
  assert.is(exported.code, 0, exported.stderr);

  // Seven million empty arrays: 20 MB of text, over 250 MB once parsed.
  writeFileSync(s.path('dense.json'), trajectory('dense', `{"a":[${Array(7_000_000).fill('[]').join(',')}]}`));
  const dense = await s.run(['import', '-f', s.path('dense.json'), '-t', s.path('dense')]);
  assert.is(dense.code, 5, dense.stderr);
  assert.match(dense.stderr, /dense\.json:1: decoding this document needs about \d+ MB of memory \(7000\d+ arrays and objects\)/);
  nothingLeft('dense');

  const padding = ' '.repeat(MAX_DOCUMENT_BYTES);
  writeFileSync(s.path('huge.jsonl'), `${trajectory('huge', '{}').replace(/\n/g, ' ')}${padding}\n`);
  const huge = await s.run(['import', '-f', s.path('huge.jsonl'), '-t', s.path('huge-line')]);
  assert.is(huge.code, 5, huge.stderr);
  assert.match(huge.stderr, 'huge.jsonl:1: line is longer than 256 MiB, the largest document trajstore takes');
  nothingLeft('huge-line');
});

test('ids of 512 KiB: 40 such runs import (their Parquet statistics are left out, not kept until the part closes) and read back whole', async () => {
  const src = s.path('long-ids');
  mkdirSync(src);
  const ids = Array.from({ length: 40 }, (_, i) => `${String(i).padStart(2, '0')}-${'x'.repeat(512 * 1024)}`);
  ids.forEach((id, i) => writeFileSync(join(src, `${i}.jsonl`), `${JSON.stringify({ conversation_id: id, model: 'm', messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }] })}\n`));
  const imported = await s.run(['import', '-f', src, '-t', s.path('long-ids-ds')]);
  assert.is(imported.code, 0, imported.stderr);
  const sql = await s.run(['query', s.path('long-ids-ds'), '--sql', 'SELECT session_id FROM runs ORDER BY session_id', '--format', 'jsonl']);
  assert.is(sql.code, 0, sql.stderr);
  assert.equal(sql.stdout.trim().split('\n').map((line) => (JSON.parse(line) as { session_id: string }).session_id), ids);
  const exported = await s.run(['export', '-f', s.path('long-ids-ds'), '-o', 'atif', '-t', '-']);
  assert.is(exported.code, 0, exported.stderr);
  assert.equal(exported.stdout.trim().split('\n').map((line) => (JSON.parse(line) as { session_id: string }).session_id).sort(), ids);
});

test.run();
