import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { SourceError } from '../formats/errors.js';
import { actf } from '../formats/actf/index.js';
import { atif } from '../formats/atif/index.js';
import { loadFormat } from '../formats/registry.js';
import type { Storyline } from '../storyline/schema.js';
import { PROJECT_TESTDATA, SHARED_FIXTURES } from './helpers/fixtures.js';
import { bytesSource, decodeAll, encodeAll, fileSource, parseArgumentStrings, probeOf, problemsOf, sortKeys, thrown, tokenTotals, toolCallCount } from './helpers/format-harness.js';

const FIXTURES = [
  { path: 'synthetic/actf/csv-dedupe-two-attempts.actf.json', sessions: ['csv-dedupe-0042#attempt-1', 'csv-dedupe-0042#attempt-2'], turns: [3, 3], calls: 4, results: 3, prompt: 6463, completion: 445 },
  { path: 'persisting/examples/data/actf/code-repair.actf.json', sessions: ['example-code-repair'], turns: [2], calls: 1, results: 1, prompt: 48, completion: 20 },
  { path: 'persisting/import_roundtrip/make-doom-for-mips_trimmed.actf.json', sessions: ['make-doom-for-mips-trimmed'], turns: [2], calls: 1, results: 1, prompt: 48, completion: 18 },
  { path: 'persisting/import_roundtrip/protein-assembly_trimmed.actf.json', sessions: ['protein-assembly-trimmed'], turns: [2], calls: 1, results: 1, prompt: 0, completion: 0 },
];

const fixture = (path: string) => fileSource(join(SHARED_FIXTURES, path), path);
/** ACTF equality: the same JSON once key order and the whitespace of OpenAI `arguments` strings are set aside. */
const canonical = (value: unknown) => sortKeys(parseArgumentStrings(value));

test('the actf module is registered and detects ACTF by name or root keys', async () => {
  assert.is(await loadFormat('actf'), actf);
  for (const { path } of FIXTURES) assert.ok((actf.detect(probeOf(join(SHARED_FIXTURES, path), path))?.confidence ?? 0) >= 0.9, path);
  const renamed = probeOf(join(SHARED_FIXTURES, FIXTURES[0]!.path), 'task.json');
  assert.is(actf.detect(renamed)?.reason, 'root keys task_id and attempts');
  assert.is(actf.detect(probeOf(join(SHARED_FIXTURES, 'synthetic/bad/wrong-shape.json'), 'wrong-shape.json')), undefined);
  assert.is(actf.detect(probeOf(join(SHARED_FIXTURES, 'persisting/atif/dialogue_10.json'), 'dialogue_10.json')), undefined);
});

for (const expected of FIXTURES) {
  test(`${expected.path}: one Storyline per attempt, counts, round trip, raw bytes`, async () => {
    const { storylines, docs } = await decodeAll(actf, fixture(expected.path), true);
    assert.equal(storylines.map((s) => s.session), expected.sessions);
    assert.equal(storylines.map((s) => s.turns.length), expected.turns);
    assert.is(toolCallCount(storylines), expected.calls);
    assert.is(storylines.flatMap((s) => s.turns).reduce((n, t) => n + (t.observation?.results.length ?? 0), 0), expected.results);
    const tokens = tokenTotals(storylines);
    assert.is(tokens.prompt, expected.prompt);
    assert.is(tokens.completion, expected.completion);
    assert.equal(problemsOf(storylines), []);
    for (const s of storylines) {
      assert.equal(s.agent, { id: 'actf-agent', name: 'ACTF Agent' });
      assert.ok(s.turns.every((t) => t.src === 'agent' && t.nllm === 1));
    }

    const encoded = await encodeAll(actf, storylines);
    assert.is(encoded.length, 1, 'the attempts of one task make one document');
    const source = readFileSync(join(SHARED_FIXTURES, expected.path));
    assert.equal(canonical(encoded[0]!.value), canonical(JSON.parse(source.toString('utf8'))));

    assert.ok(docs[0]!.raw?.equals(source));
    assert.ok(docs.every((d, i) => d.sourceDocument === 0 && (i === 0 || d.raw === undefined)));
  });
}

test('the two-attempt task maps run, attempts, outcome, prompts, tools and observations', async () => {
  const { storylines, diagnostics } = await decodeAll(actf, fixture('synthetic/actf/csv-dedupe-two-attempts.actf.json'));
  const [first, second] = storylines as [Storyline, Storyline];
  assert.is(first.run, 'csv-dedupe-0042');
  assert.equal([first.attempt_id, second.attempt_id], ['1', '2']);
  assert.equal(first.task?.llm, { k: 2 });
  assert.is(first.task?.result?.correct, false);
  assert.is(first.task?.result?.error, 'verifier: expected 1204 data rows, found 1209');
  assert.equal(first.task?.result?.analysis_result, { failure_mode: 'case-sensitive e-mail comparison' });
  assert.equal(first.task?.extra?.retry_counts, { environment: 1, llm: 0 });
  assert.is(first.prompt?.system, 'You are a data-engineering agent. Work inside /app. Write results to /app/out.csv.');
  assert.equal(first.turns[1]!.prompt, { user: null });
  assert.is(first.started_at, '2026-06-02 10:58:01+00:00');
  assert.is(first.turns[0]!.latency_ms, 1432.5);
  assert.equal(first.turns[0]!.metrics?.extra, { env_action_ms: 38, stop_reason: 'tool_calls' });

  // command_execution: {command} arguments, aggregated output as result, status and exit code.
  const exec = first.turns[0]!.tool_calls![0]!;
  assert.equal([exec.tcid, exec.kind, exec.args, exec.response], ['item_1', 'command_execution', { command: "/bin/bash -lc 'head -4 data/customers.csv && wc -l data/customers.csv'" }, { exit_code: 0, status: 'completed' }]);
  assert.is(first.turns[0]!.observation!.results[0]!.source_call_id, 'item_1');
  // A tool without an id gets step-{step_id}-tool-{index}, said in a diagnostic and left out on export.
  assert.is(first.turns[1]!.tool_calls![0]!.tcid, 'step-2-tool-0');
  assert.ok(diagnostics.some((d) => d.code === 'actf_tool_id_synthesized'));
  assert.is(first.turns[1]!.msg, '');

  // tool_use and OpenAI function calls; observations linked by tool_use_id, is_error lifted.
  const use = second.turns[0]!;
  assert.equal([use.tool_calls![0]!.fn, use.tool_calls![0]!.kind], ['Bash', 'tool_use']);
  assert.equal([use.observation!.results[0]!.source_call_id, use.observation!.results[0]!.is_error], ['toolu_a2s1', false]);
  const fn = second.turns[1]!.tool_calls![0]!;
  assert.equal([fn.fn, fn.kind, fn.args], ['read_file', 'function', { path: 'out.csv', limit: 3 }]);
});

const raw = {
  task_id: 'raw-events-1',
  category: 'ops',
  k: 2,
  correct: false,
  attempts_tried: 2,
  solved_at: null,
  vendor: { batch: 7 },
  attempts: {
    a: { correct: false, error: 'sandbox died', trajectory: [{ type: 'session.start', ts: 1 }, { type: 'llm', text: 'hello' }] },
    b: {
      correct: false,
      trajectory: {
        schema_version: 'ACTF_v1.0',
        steps: [
          {
            step_id: 1,
            assistant_content: { content: 'x', tool_calls: [] },
            tools: [{ id: 't1', type: 'tool_use', name: 'Read', input: { p: 2 } }],
            observation: [{ tool_use_id: null, content: 'unlinked' }],
            metric: { prompt_tokens_len: 5, completion_tokens_len: 1, llm_infer_ms: null, env_action_ms: null, stop_reason: null, gpu: 'a100' },
          },
        ],
      },
    },
  },
};

test('raw event-array attempts, an empty tool_calls beside tools, a null link and unknown keys survive a round trip', async () => {
  const { storylines, diagnostics } = await decodeAll(actf, bytesSource(JSON.stringify(raw), 'raw.actf.json'));
  assert.equal(problemsOf(storylines), []);
  assert.equal(storylines.map((s) => [s.session, s.turns.length]), [['raw-events-1#attempt-a', 0], ['raw-events-1#attempt-b', 1]]);
  assert.equal(storylines[0]!.unknown_fields?.sources.actf?.fields['/attempts/a/trajectory'], raw.attempts.a.trajectory);
  const codes = diagnostics.map((d) => d.code);
  assert.ok(codes.includes('actf_raw_trajectory'));
  assert.equal(storylines[1]!.turns[0]!.tool_calls![0]!.args, { p: 2 });
  assert.is(storylines[1]!.turns[0]!.observation!.results[0]!.source_call_id, undefined);
  const [encoded] = await encodeAll(actf, storylines);
  assert.equal(canonical(encoded!.value), canonical(raw));
});

test('encode groups adjacent Storylines of one run and folds other formats into steps', async () => {
  const sample = (await decodeAll(atif, fileSource(join(PROJECT_TESTDATA, 'samples/atif/release-notes.atif.json'), 'release-notes.atif.json'))).storylines[0]!;
  const one = { ...sample, session: 's1', run: 'task-9' };
  const two = { ...sample, session: 's2', run: 'task-9', attempt_id: 'retry' };
  const other = { ...sample, session: 's3', run: 'task-10' };
  const encoded = await encodeAll(actf, [one, two, other]);
  assert.equal(encoded.map((e) => e.name), ['task-9.actf.json', 'task-10.actf.json']);
  const doc = encoded[0]!.value as { task_id: string; k: number; attempts: Record<string, { trajectory: { steps: Array<Record<string, unknown>> } }> };
  assert.is(doc.task_id, 'task-9');
  assert.equal(Object.keys(doc.attempts), ['1', 'retry']);
  const steps = doc.attempts['1']!.trajectory.steps;
  // Two agent turns -> two steps; the system and user turns become the first step's prompts.
  assert.is(steps.length, 2);
  assert.is(steps[0]!.system_prompt, 'You write short release notes for the lighthouse CLI.');
  assert.is(steps[0]!.user_content, 'Draft the notes for v0.9 since tag v0.8.');
  assert.equal(steps[0]!.tools, [{ id: 'tc-1', name: 'git_log', input: { since: 'v0.8' } }]);
  assert.equal(steps[0]!.observation, [{ tool_use_id: 'tc-1', content: 'feat: --json output\nfix: crash on empty config\ndocs: install guide' }]);
  // ACTF has no cached count; ours rides in `cached_tokens_len` and reads back.
  assert.equal(steps[0]!.metric, { prompt_tokens_len: 412, completion_tokens_len: 31, llm_infer_ms: null, env_action_ms: null, stop_reason: null, cached_tokens_len: 256 });
  // Which decodes again to the same calls and tokens.
  const again = await decodeAll(actf, bytesSource(JSON.stringify(doc), 'again.actf.json'));
  assert.equal(problemsOf(again.storylines), []);
  assert.equal(tokenTotals(again.storylines), { prompt: 2 * 932, completion: 2 * 79, cached: 2 * 668 });
});

test('bad ACTF documents name the file and pointer', async () => {
  const noAttempts = await thrown(() => decodeAll(actf, bytesSource('{"task_id":"t","attempts":{}}', 'x.actf.json')));
  assert.instance(noAttempts, SourceError);
  assert.is(noAttempts.message, 'x.actf.json:1:27 at /attempts: an ACTF document needs a non-empty "attempts" object');
  const shape = await thrown(() => decodeAll(actf, fileSource(join(SHARED_FIXTURES, 'synthetic/bad/wrong-shape.json'), 'wrong-shape.json')));
  assert.is(shape.message, 'wrong-shape.json:1:2 at /0: an ACTF document must be a JSON object');
  const truncated = await thrown(() => decodeAll(actf, bytesSource('{"task_id": "t",\n  "attempts": {', 'cut.actf.json')));
  assert.match(truncated.message, /^cut\.actf\.json:2:\d+: invalid JSON/);
});

test('bundled sample decodes', async () => {
  const path = join(PROJECT_TESTDATA, 'samples', 'actf', 'log-rotation.actf.json');
  const { storylines } = await decodeAll(actf, fileSource(path, 'log-rotation.actf.json'));
  assert.is(storylines.length, 2);
  assert.equal(problemsOf(storylines), []);
});

test.run();
