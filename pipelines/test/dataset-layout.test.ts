/**
 * Layout version 2: a Storyline document is stored once (runs.document_json + steps.turn_json and the
 * large step columns + tool_calls.extra_json) and export rebuilds it exactly. Checked over every
 * shared fixture directory of a decodable format (each file decoded here as import does, compared
 * with what `export -o storyline` gives back), plus the refusal of a version 1 Storyline dataset.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { PassThrough } from 'node:stream';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Logger } from '../../cli/kit/log.js';
import { openDataset } from '../dataset/open.js';
import { FORMATS } from '../formats/registry.js';
import { detectFormat } from '../import/detect.js';
import { listSources } from '../import/sources.js';
import { TURN_RESULTS_FROM_OBSERVATION } from '../import/rows.js';
import type { Storyline } from '../storyline/schema.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { sandbox } from './helpers/sandbox.js';

/** The Storylines `import -f dir` decodes, in import order. */
async function decodedStorylines(dir: string): Promise<Storyline[]> {
  const extensions = [...new Set(FORMATS.flatMap((f) => f.extensions))];
  const docs: Storyline[] = [];
  const ctx = { log: new Logger('error', new PassThrough()), keepRaw: false, signal: new AbortController().signal, diagnostic: () => {} };
  for (const file of listSources(dir, new PassThrough(), extensions)) {
    const { format } = await detectFormat(file);
    for await (const decoded of format.decode(file, ctx)) docs.push(decoded.storyline);
  }
  return docs;
}

const DIRS = ['synthetic/claude-code', 'synthetic/codex', 'synthetic/actf', 'synthetic/chat-messages', 'synthetic/storyline', 'synthetic/edge', 'persisting/atif'];

for (const dir of DIRS) {
  test(`${dir}: export -o storyline gives back exactly the decoded documents`, async () => {
    const s = sandbox('dataset-layout');
    const imported = await s.run(['import', '-f', join(SHARED_FIXTURES, dir), '-t', s.path('ds')]);
    assert.is(imported.code, 0, imported.stderr);
    const exported = await s.run(['export', '-f', s.path('ds'), '-t', '-', '-o', 'storyline']);
    assert.is(exported.code, 0, exported.stderr);
    const back = exported.stdout.trim().split('\n').map((line) => JSON.parse(line) as Storyline);
    const expected = await decodedStorylines(join(SHARED_FIXTURES, dir));
    assert.ok(expected.length > 0, dir);
    assert.is(back.length, expected.length);
    // JSON text of both sides: undefined members vanish as they do on disk.
    assert.equal(back, JSON.parse(JSON.stringify(expected)));
  });
}

test('tool output is stored once per step, not again in turn_json or runs', async () => {
  const s = sandbox('dataset-layout');
  assert.is((await s.run(['import', '-f', join(SHARED_FIXTURES, 'synthetic/claude-code'), '-t', s.path('ds')])).code, 0);
  const ds = await openDataset(s.path('ds'));
  try {
    const linked = ds.db.prepare(`SELECT count(*) AS n FROM steps WHERE turn_json LIKE '%${TURN_RESULTS_FROM_OBSERVATION}%'`).get() as { n: number };
    assert.ok(linked.n > 0, 'some call results are linked to their observation instead of repeated');
    const repeated = ds.db
      .prepare(
        `SELECT count(*) AS n FROM tool_calls c JOIN steps s ON s.document_id = c.document_id AND s.turn_ordinal = c.turn_ordinal
         WHERE length(c.result_json) > 40 AND instr(s.turn_json, c.result_json) > 0`,
      )
      .get() as { n: number };
    assert.is(repeated.n, 0, 'no result text inside turn_json');
    const documents = ds.db.prepare("SELECT count(*) AS n FROM runs WHERE document_json LIKE '%\"turns\"%'").get() as { n: number };
    assert.is(documents.n, 0, 'runs.document_json has no turns');
  } finally {
    ds.close();
  }
});

test('a layout version 1 Storyline dataset is refused with exit 4 and a hint; --mode replace rewrites it', async () => {
  const s = sandbox('dataset-layout');
  const source = join(SHARED_FIXTURES, 'synthetic/storyline');
  assert.is((await s.run(['import', '-f', source, '-t', s.path('ds')])).code, 0);
  const manifestPath = s.path('ds', 'trajstore.json');
  const manifest = JSON.parse(readFileSync(manifestPath, 'utf8'));
  writeFileSync(manifestPath, JSON.stringify({ ...manifest, layout_version: 1 }));
  const refused = await s.run(['export', '-f', s.path('ds'), '-t', '-', '-o', 'storyline']);
  assert.is(refused.code, 4);
  assert.match(refused.stderr, 'layout version 1');
  assert.match(refused.stderr, 'import its sources again');
  const replaced = await s.run(['import', '-f', source, '-t', s.path('ds'), '--mode', 'replace', '--yes']);
  assert.is(replaced.code, 0, replaced.stderr);
  assert.is(JSON.parse(readFileSync(manifestPath, 'utf8')).layout_version, 2);
  assert.is((await s.run(['export', '-f', s.path('ds'), '-t', '-', '-o', 'storyline'])).code, 0);
});

test.run();
