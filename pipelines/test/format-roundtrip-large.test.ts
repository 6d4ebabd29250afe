/**
 * Every export format round-trips a document over 1 MB through the real command: import ATIF ->
 * export -o X -> import again (detected by its root keys, whatever the size) -> export -o X gives
 * the same documents. A Storyline converted from ATIF names ATIF in `origin.schema_version`; over
 * 64 KiB it used to be detected as ATIF and refused.
 */
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { chatCanonical, sortKeys } from './helpers/format-harness.js';
import { sandbox } from './helpers/sandbox.js';

/** An ATIF trajectory of about 1.5 MB: tool calls with large outputs, reasoning, non-ASCII text. */
function bigTrajectory(): unknown {
  const steps: unknown[] = [{ step_id: 1, source: 'user', message: 'Summarise the access logs of the last week, 日本語 ok.' }];
  for (let i = 0; i < 150; i += 1) {
    const id = `call-${i}`;
    steps.push({
      step_id: steps.length + 1,
      source: 'agent',
      message: `Reading part ${i}.`,
      reasoning_content: `Part ${i} next; the "quoted" \\ path matters.`,
      tool_calls: [{ tool_call_id: id, function_name: 'read_log', arguments: { part: i, filter: 'status>=500' } }],
      observation: { results: [{ source_call_id: id, content: `${i} GET /api/v1/items?page=${i} 503 \u00e9\n`.repeat(300) }] },
      metrics: { prompt_tokens: 1000 + i, completion_tokens: 20, cached_tokens: 900 },
    });
  }
  steps.push({ step_id: steps.length + 1, source: 'agent', message: 'Done: 150 parts read.' });
  return { schema_version: 'ATIF-v1.7', session_id: 'big-1', agent: { name: 'log-agent', version: '2.0', model_name: 'model-x' }, steps };
}

const documentsIn = (dir: string): unknown[] =>
  readdirSync(dir)
    .sort()
    .map((name) => JSON.parse(readFileSync(join(dir, name), 'utf8')) as unknown);

const CANONICAL: Record<string, (docs: unknown[]) => unknown> = {
  atif: (docs) => sortKeys(docs),
  actf: (docs) => sortKeys(docs),
  'chat-messages': (docs) => chatCanonical(docs),
  // The Storyline records where it was read from; the rest must be the same document.
  storyline: (docs) => sortKeys(docs.map((d) => ({ ...(d as Record<string, unknown>), origin: undefined }))),
};

for (const format of Object.keys(CANONICAL)) {
  test(`${format}: a document over 1 MB survives import -> export -> import -> export`, async () => {
    const s = sandbox('roundtrip-large');
    mkdirSync(s.path('in'));
    writeFileSync(s.path('in', 'big.atif.json'), JSON.stringify(bigTrajectory(), null, 2));
    const first = await s.run(['import', '-f', s.path('in'), '-t', s.path('ds1')]);
    assert.is(first.code, 0, first.stderr);
    const out1 = await s.run(['export', '-f', s.path('ds1'), '-t', `${s.path('out1')}/`, '-o', format]);
    assert.is(out1.code, 0, out1.stderr);
    const exported = readdirSync(s.path('out1'));
    assert.ok(exported.every((name) => statSync(s.path('out1', name)).size > 1024 * 1024), `${exported.join(', ')} over 1 MB`);

    const second = await s.run(['--log-level', 'info', 'import', '-f', s.path('out1'), '-t', s.path('ds2'), '--format', 'json']);
    assert.is(second.code, 0, second.stderr);
    assert.match(second.stderr, new RegExp(`detected ${format} `));
    assert.equal(JSON.parse(second.stdout).total.tool_calls, 150);
    const out2 = await s.run(['export', '-f', s.path('ds2'), '-t', `${s.path('out2')}/`, '-o', format]);
    assert.is(out2.code, 0, out2.stderr);
    const canonical = CANONICAL[format] as (docs: unknown[]) => unknown;
    assert.equal(canonical(documentsIn(s.path('out2'))), canonical(documentsIn(s.path('out1'))));
  });
}

test.run();
