/** The `storyline` format module: detection, decode with located problems, raw bytes, identity encode. */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { storyline } from '../formats/storyline/index.js';
import { locatePointer } from '../formats/common/locate.js';
import { SourceError } from '../formats/errors.js';
import { loadFormat } from '../formats/registry.js';
import { bytesSource, decodeAll, encodeAll, fileSource, probeOf } from './helpers/format-harness.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';

const DIR = join(SHARED_FIXTURES, 'synthetic', 'storyline');
const files = readdirSync(DIR).sort();

test('detects Storyline documents and nothing else', async () => {
  for (const f of files) assert.is(storyline.detect(probeOf(join(DIR, f), f))?.confidence, 1, f);
  assert.is(storyline.detect(probeOf(join(SHARED_FIXTURES, 'synthetic', 'bad', 'wrong-shape.json'), 'wrong-shape.json')), undefined);
  assert.is(storyline.detect(probeOf(join(SHARED_FIXTURES, 'persisting', 'atif', 'dialogue_10.json'), 'dialogue_10.json')), undefined);
  assert.is(await loadFormat('storyline'), storyline, 'registered');
});

test('decodes one document per .json file with its exact bytes, and encodes back to equal documents', async () => {
  for (const f of files) {
    const { docs, storylines } = await decodeAll(storyline, fileSource(join(DIR, f), f), true);
    assert.is(docs.length, 1);
    assert.equal(docs[0]?.raw, readFileSync(join(DIR, f)));
    const encoded = await encodeAll(storyline, storylines);
    assert.equal(encoded[0]?.value, JSON.parse(readFileSync(join(DIR, f), 'utf8')));
    assert.match(encoded[0]?.name ?? '', /\.storyline\.json$/);
  }
});

test('JSONL: one document per line, ordinals in order, blank lines kept in the raws', async () => {
  const docs = files.map((f) => JSON.stringify(JSON.parse(readFileSync(join(DIR, f), 'utf8'))));
  const text = `\n${docs[0]}\r\n\n${docs[1]}\n\n`;
  const { docs: decoded } = await decodeAll(storyline, bytesSource(text, 'two.jsonl'), true);
  assert.equal(decoded.map((d) => d.sourceDocument), [0, 1]);
  assert.is(Buffer.concat(decoded.map((d) => d.raw!)).toString('utf8'), text);
});

test('a schema problem names the file, line, column and JSON Pointer', async () => {
  const doc = JSON.parse(readFileSync(join(DIR, files[0]!), 'utf8'));
  doc.turns[1].src = 'robot';
  const pretty = JSON.stringify(doc, null, 2);
  try {
    await decodeAll(storyline, bytesSource(pretty, 'x.storyline.json'));
    assert.unreachable('should have thrown');
  } catch (error) {
    assert.instance(error, SourceError);
    const e = error as SourceError;
    assert.is(e.location.pointer, '/turns/1/src');
    const line = pretty.split('\n').findIndex((l) => l.includes('"robot"')) + 1;
    assert.is(e.location.line, line);
    assert.match(e.message, `x.storyline.json:${line}:`);
  }
  const jsonl = `${JSON.stringify({ ...doc, turns: [] })}\n${JSON.stringify({ ...doc, schema_version: 'storyline/v9' })}\n`;
  try {
    await decodeAll(storyline, bytesSource(jsonl, 'x.jsonl'));
    assert.unreachable('should have thrown');
  } catch (error) {
    assert.is((error as SourceError).location.line, 2);
    assert.match((error as Error).message, 'unsupported schema_version "storyline/v9"');
  }
});

test('locatePointer finds values, array elements, escaped keys, and the parent of a missing member', () => {
  const text = '{\n  "a": [1, {"b/c": "x"}],\n  "d~e": {"f": null}\n}';
  assert.equal(locatePointer(text, '/a/1/b~1c'), { line: 2, column: 20 });
  assert.equal(locatePointer(text, '/a/0'), { line: 2, column: 9 });
  assert.equal(locatePointer(text, '/d~0e/f'), { line: 3, column: 16 });
  assert.equal(locatePointer(text, '/d~0e/missing'), { line: 3, column: 10 });
  assert.equal(locatePointer(text, '', 5), { line: 5, column: 1 });
});

test.run();
