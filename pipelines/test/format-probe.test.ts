/**
 * Detection's probe (formats/probe.ts): the skeleton of a file's first JSON value, whatever its
 * size and however its bytes are cut into chunks, and detection by the root keys it keeps.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { probeOf } from '../formats/probe.js';
import { loadFormats } from '../formats/registry.js';

/** The bytes of `text` cut into chunks of `size` bytes. */
const chunked = (text: string, size: number): Buffer[] => {
  const bytes = Buffer.from(text);
  const out: Buffer[] = [];
  for (let i = 0; i < bytes.length; i += size) out.push(bytes.subarray(i, i + size));
  return out;
};

/** The skeleton of `text` read whole and in chunks of 1, 2, 3 and 7 bytes: all must agree. */
function skeleton(text: string): unknown {
  const whole = probeOf('x.json', [Buffer.from(text)]).value;
  for (const size of [1, 2, 3, 7]) assert.equal(probeOf('x.json', chunked(text, size)).value, whole, `chunks of ${size}`);
  return whole;
}

async function detectedFormat(text: string, relPath = 'doc.json'): Promise<string | undefined> {
  const probe = probeOf(relPath, chunked(text, 64 * 1024));
  let best: { name: string; confidence: number } | undefined;
  for (const format of await loadFormats()) {
    const d = format.detect(probe);
    if (d && d.confidence > (best?.confidence ?? 0)) best = { name: format.name, confidence: d.confidence };
  }
  return best?.name;
}

test('small values come back whole: scalars, escapes, unicode, nested objects', () => {
  const doc = { a: 1, b: -2.5e3, c: true, d: null, e: 'q"uo\\te\\\\', f: '\u00e9\u6f22\ud83d\ude00', g: { h: [] }, i: '' };
  assert.equal(skeleton(JSON.stringify(doc)), doc);
  assert.equal(skeleton(JSON.stringify(doc, null, 2)), doc);
  assert.equal(skeleton(' 42 '), 42);
  assert.equal(skeleton('"top"'), 'top');
});

test('arrays keep their first element, deep containers stay empty, long strings are cut', () => {
  const doc = { steps: [{ step_id: 1, tool_calls: [{ id: 'a' }] }, { step_id: 2 }], e: { f: { g: { h: { i: 1 } } } }, long: 'x'.repeat(10_000) };
  const seen = skeleton(JSON.stringify(doc)) as Record<string, unknown>;
  assert.equal(seen.steps, [{ step_id: 1, tool_calls: [{}] }]);
  assert.equal(seen.e, { f: { g: { h: {} } } });
  assert.is(seen.long, 'x'.repeat(4096));
  // A cut inside an escape drops the partial escape.
  const escaped = skeleton(JSON.stringify({ s: `${'y'.repeat(4094)}\u00e9\n` })) as { s: string };
  assert.ok(escaped.s.startsWith('y'.repeat(4094)) && escaped.s.length <= 4096, escaped.s.slice(4090));
});

test('root keys after a large value are seen; a JSONL file is read to the end of its first line only', () => {
  const big = JSON.stringify({ turns: [{ msg: 'z'.repeat(300_000), deep: [[[[['\\"']]]]] }], schema_version: 'storyline/v1' });
  assert.is((skeleton(big) as { schema_version: string }).schema_version, 'storyline/v1');
  const lines = [Buffer.from('{"type":"user","sessionId":"s"}\n{"other"'), Buffer.from(':1}\n')];
  function* once(): Generator<Buffer> {
    yield lines[0]!;
    throw new Error('read past the first value');
  }
  assert.equal(probeOf('x.jsonl', once()).value, { type: 'user', sessionId: 's' });
});

test('a cut or broken document keeps what was read before the problem; nothing parses -> no value', () => {
  assert.equal(skeleton('{"schema_version":"ATIF-v1.7","steps":[{"step_id":1,"message":"abc'), { schema_version: 'ATIF-v1.7', steps: [{ step_id: 1 }] });
  assert.equal(skeleton('{"a":1,"b":tru x}'), { a: 1 });
  assert.equal(skeleton('{"a":[1}'), { a: [1] });
  assert.is(probeOf('x', [Buffer.from('<<<<<<< HEAD\n')]).value, undefined);
  assert.is(probeOf('x', []).value, undefined);
});

test('detection decides by root keys wherever they are, for documents of any size', async () => {
  const turns = Array.from({ length: 400 }, (_, i) => ({ id: i + 1, src: 'user', msg: 'w'.repeat(300) }));
  // A Storyline converted from ATIF names ATIF in origin, before its own schema_version: still a Storyline.
  const storyline = { origin: { format: 'atif', schema_version: 'ATIF-v1.7' }, session: 's', agent: { id: 'a' }, turns, schema_version: 'storyline/v1' };
  assert.ok(JSON.stringify(storyline).length > 100_000);
  assert.is(await detectedFormat(JSON.stringify(storyline)), 'storyline');
  assert.is(await detectedFormat(JSON.stringify(storyline, null, 2)), 'storyline');
  const atif = { agent: { name: 'n', version: '1' }, steps: turns.map((t) => ({ step_id: t.id, source: 'user', message: t.msg })), schema_version: 'ATIF-v1.7' };
  assert.is(await detectedFormat(JSON.stringify(atif)), 'atif');
  const actf = { category: 'c', attempts: { 1: { correct: true, trajectory: { schema_version: 'ACTF_v1.0', steps: [] } } }, note: 'n'.repeat(100_000), task_id: 't' };
  assert.is(await detectedFormat(JSON.stringify(actf)), 'actf');
  const chat = { meta: 'm'.repeat(100_000), messages: [{ role: 'user', content: 'hi' }] };
  assert.is(await detectedFormat(`${JSON.stringify(chat)}\n`, 'rows.jsonl'), 'chat-messages');
});

test.run();
