import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { SourceError } from '../formats/errors.js';
import { agentbCode } from '../formats/agentb-code/index.js';
import { atif } from '../formats/atif/index.js';
import { chatMessages } from '../formats/chat-messages/index.js';
import { loadFormat } from '../formats/registry.js';
import type { Storyline } from '../storyline/schema.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { assertSamplesDecode, bytesSource, decodeAll, encodeAll, fileSource, probeOf, problemsOf, sortKeys, thrown, tokenTotals, toolCallCount } from './helpers/format-harness.js';

const FIXTURES: Array<{ path: string; turns: number[]; calls: number; prompt: number; completion: number; copied: number }> = [
  { path: 'persisting/atif/dialogue_10.json', turns: [10], calls: 0, prompt: 744, completion: 200, copied: 2 },
  { path: 'persisting/atif/multimodal_18.json', turns: [18], calls: 2, prompt: 1840, completion: 496, copied: 3 },
  { path: 'persisting/atif/sequential_tools_12.json', turns: [12], calls: 2, prompt: 985, completion: 265, copied: 2 },
  { path: 'persisting/atif/unicode_zh_15.json', turns: [15], calls: 1, prompt: 1533, completion: 413, copied: 3 },
  { path: 'persisting/examples/data/atif/support-ticket.json', turns: [3], calls: 1, prompt: 0, completion: 0, copied: 0 },
  { path: 'letta-trajectory/atif/cleanup/input.json', turns: [4, 2], calls: 1, prompt: 0, completion: 0, copied: 0 },
  { path: 'letta-trajectory/atif/tool-calls/input.json', turns: [3], calls: 2, prompt: 0, completion: 0, copied: 0 },
];

const fixture = (path: string) => fileSource(join(SHARED_FIXTURES, path), path);

test('the atif module is registered and detects every ATIF fixture', async () => {
  assert.is(await loadFormat('atif'), atif);
  for (const { path } of FIXTURES) {
    const detection = atif.detect(probeOf(join(SHARED_FIXTURES, path), path));
    assert.ok(detection && detection.confidence >= 0.9, `${path}: ${JSON.stringify(detection)}`);
  }
  assert.is(atif.detect(probeOf(join(SHARED_FIXTURES, 'synthetic/bad/wrong-shape.json'), 'wrong-shape.json')), undefined);
  assert.is(atif.detect(probeOf(join(SHARED_FIXTURES, 'synthetic/chat-messages/session-steps.json'), 'session-steps.json')), undefined);
});

for (const expected of FIXTURES) {
  test(`${expected.path}: counts, valid Storylines, exact round trip, raw bytes`, async () => {
    const { storylines, docs } = await decodeAll(atif, fixture(expected.path), true);
    assert.equal(storylines.map((s) => s.turns.length), expected.turns);
    assert.is(toolCallCount(storylines), expected.calls);
    const tokens = tokenTotals(storylines);
    assert.is(tokens.prompt, expected.prompt);
    assert.is(tokens.completion, expected.completion);
    assert.is(storylines.flatMap((s) => s.turns).filter((t) => t.copied).length, expected.copied);
    assert.equal(problemsOf(storylines), []);

    // ATIF -> Storyline -> ATIF: the same JSON (key order aside); subagents embedded again.
    const encoded = await encodeAll(atif, storylines);
    assert.is(encoded.length, 1);
    const source = readFileSync(join(SHARED_FIXTURES, expected.path));
    assert.equal(sortKeys(encoded[0]!.value), sortKeys(JSON.parse(source.toString('utf8'))));

    // -o preserve: the file's bytes ride on the first document only.
    assert.ok(docs[0]!.raw?.equals(source));
    assert.ok(docs.slice(1).every((d) => d.raw === undefined && d.sourceDocument === 0));
  });
}

test('embedded subagents become child Storylines linked both ways', async () => {
  const { storylines, diagnostics } = await decodeAll(atif, fixture('letta-trajectory/atif/cleanup/input.json'));
  const [parent, child] = storylines as [Storyline, Storyline];
  // No session_id (optional in v1.7): the trajectory id stands in and export leaves session_id out.
  assert.is(parent.session, 'trajectory-atif-cleanup');
  assert.equal(parent.meta?.synthesized, ['/session']);
  assert.equal(parent.children, ['embedded-1']);
  assert.is(child.session, 'embedded-1');
  assert.is(child.parent?.psid, 'trajectory-atif-cleanup');
  assert.is(child.parent?.rel, 'spawn');
  // Arguments that are not an object are kept as given, with a diagnostic.
  assert.equal(parent.turns[2]!.tool_calls![0]!.args, ['fast']);
  assert.ok(diagnostics.some((d) => d.message.includes('/steps/2/tool_calls/0/arguments')));
  // A result that answers no call keeps no link.
  assert.is(parent.turns[2]!.observation!.results[1]!.source_call_id, undefined);
});

test('content parts, step models, subagent refs and pChronicle extras map to Storyline fields', async () => {
  const tools = (await decodeAll(atif, fixture('letta-trajectory/atif/tool-calls/input.json'))).storylines[0]!;
  assert.equal((tools.turns[0]!.msg as Array<Record<string, unknown>>).map((p) => p.type), ['text', 'image']);
  assert.is(tools.turns[1]!.model, 'example-step-model');
  assert.is(tools.turns[1]!.reason, 'I should list the files before reading one.');
  assert.equal(tools.turns[1]!.observation!.results[1]!.subagent_trajectory_ref, [{ trajectory_path: 'subagents/config.json', session_id: 'run-atif-1' }]);

  const multimodal = (await decodeAll(atif, fixture('persisting/atif/multimodal_18.json'))).storylines[0]!;
  const parts = multimodal.turns[1]!.msg as Array<Record<string, unknown>>;
  assert.equal(parts[1], { image_url: { url: 'https://example.invalid/fixture-2.png' }, type: 'image_url' });
  assert.is(multimodal.turns[2]!.latency_ms, 46);
  assert.is(multimodal.turns[2]!.ttft_ms, 12);
  assert.is(multimodal.turns[2]!.nllm, 1);
  // final_metrics keys ATIF does not define are kept as unknown fields.
  assert.equal(multimodal.unknown_fields?.sources.atif?.fields['/final_metrics/fixture'], true);

  const ticket = (await decodeAll(atif, fixture('persisting/examples/data/atif/support-ticket.json'))).storylines[0]!;
  assert.equal(ticket.turns[1]!.tool_calls![0]!.result, { state: 'pending', reason: 'capacity' });
});

const V14 = {
  schema_version: '1.4',
  session_id: 'sess-v14',
  agent: { name: 'lab-agent', version: '2.3', vendor_key: 'kept' },
  steps: [
    { step_id: 1, source: 'system', message: 'Summarise older context.', extra: { context_management: { type: 'compaction', boundary: 'replace' } }, model_name: 'misplaced-model' },
    { step_id: 2, source: 'user', message: 'check disk', is_copied_context: true },
    {
      step_id: 3,
      source: 'agent',
      message: '',
      tool_calls: [{ tool_call_id: 'c1', function_name: 'df', arguments: { human: true } }],
      observation: { results: [{ source_call_id: 'c1', content: 'disk full', extra: { is_error: true, host: 'h1' } }] },
      metrics: { prompt_tokens: 30, completion_tokens: 4, cached_tokens: 10 },
      llm_call_count: 1,
    },
    { step_id: 4, source: 'agent', message: 'again', tool_calls: [{ tool_call_id: 'c1', function_name: 'df', arguments: {} }], observation: { results: [{ source_call_id: 'c1', content: 'ok' }] } },
  ],
};

test('bare "1.4" versions, context management, is_error, misplaced and unknown keys, reused call ids', async () => {
  const { storylines, diagnostics } = await decodeAll(atif, bytesSource(JSON.stringify(V14), 'v14.json'));
  const doc = storylines[0]!;
  assert.equal(problemsOf(storylines), []);
  assert.is(doc.turns[0]!.kind, 'compaction');
  assert.is(doc.turns[0]!.model, undefined);
  assert.is(doc.turns[1]!.copied, true);
  const result = doc.turns[2]!.observation!.results[0]!;
  assert.is(result.is_error, true);
  assert.equal(result.extra, { host: 'h1' });
  const fields = doc.unknown_fields!.sources.atif!.fields;
  assert.is(fields['/agent/vendor_key'], 'kept');
  assert.is(fields['/steps/0/model_name'], 'misplaced-model');
  // Storyline call ids are unique per document; ATIF's only per step.
  assert.is(doc.turns[3]!.tool_calls![0]!.tcid, 'c1#2');
  assert.is(doc.turns[3]!.observation!.results[0]!.source_call_id, 'c1#2');
  assert.ok(diagnostics.some((d) => d.message.includes('renamed')));

  const [encoded] = await encodeAll(atif, storylines);
  assert.equal(sortKeys(encoded!.value), sortKeys({ ...V14, schema_version: 'ATIF-v1.7' }));
});

test('.jsonl with one trajectory per line: lines, raws with blank lines, errors with line numbers', async () => {
  const one = JSON.stringify({ ...V14, session_id: 'a' });
  const two = JSON.stringify({ ...V14, session_id: 'b' });
  const text = `\n${one}\r\n\n${two}\n\n`;
  const { storylines, docs } = await decodeAll(atif, bytesSource(text, 'two.jsonl'), true);
  assert.equal(storylines.map((s) => s.session), ['a', 'b']);
  assert.equal(storylines.map((s) => s.origin?.line), [2, 4]);
  assert.equal(docs.map((d) => d.sourceDocument), [0, 1]);
  assert.is(Buffer.concat(docs.map((d) => d.raw!)).toString('utf8'), text);

  const bad = `${one}\n${JSON.stringify({ ...V14, schema_version: 'ATIF-v2.0' })}\n`;
  const error = await thrown(() => decodeAll(atif, bytesSource(bad, 'two.jsonl')));
  assert.instance(error, SourceError);
  assert.is(error.message, 'two.jsonl:2:19 at /schema_version: unsupported ATIF schema_version "ATIF-v2.0" (this build reads ATIF-v1.x)');
});

test('stdin (no file name): JSONL or one pretty-printed document, told apart by the first line', async () => {
  const one = JSON.stringify({ ...V14, session_id: 'a' });
  const two = JSON.stringify({ ...V14, session_id: 'b' });
  const lines = await decodeAll(atif, bytesSource(`\n${one}\n${two}\n`, '-'), true);
  assert.equal(lines.storylines.map((s) => [s.session, s.origin?.line]), [['a', 2], ['b', 3]]);
  assert.is(Buffer.concat(lines.docs.map((d) => d.raw!)).toString('utf8'), `\n${one}\n${two}\n`);
  const pretty = JSON.stringify({ ...V14, session_id: 'p' }, null, 2);
  const whole = await decodeAll(atif, bytesSource(pretty, '-'), true);
  assert.equal(whole.storylines.map((s) => [s.session, s.origin?.line]), [['p', undefined]]);
  assert.is(whole.docs[0]!.raw?.toString('utf8'), pretty);
});

test('a .json array of trajectories is one source document', async () => {
  const text = JSON.stringify([{ ...V14, session_id: 'x' }, { ...V14, session_id: 'y' }], null, 2);
  const { storylines, docs } = await decodeAll(atif, bytesSource(text, 'many.json'), true);
  assert.equal(storylines.map((s) => s.session), ['x', 'y']);
  assert.equal(docs.map((d) => d.sourceDocument), [0, 0]);
  assert.is(docs[0]!.raw?.toString('utf8'), text);
  assert.is(docs[1]!.raw, undefined);
});

test('a later ATIF v1 minor version (v1.8, bare 1.9) is read as v1.7 with a diagnostic, and the keys it adds are kept; v2 is refused', async () => {
  const later = {
    schema_version: 'ATIF-v1.8',
    session_id: 's-18',
    agent: { name: 'demo', version: '0.2', voice: 'alto' },
    steps: [
      { step_id: 1, source: 'user', message: [{ type: 'text', text: 'hi' }, { type: 'audio', source: { media_type: 'audio/wav', path: 'a.wav' } }] },
      {
        step_id: 2,
        source: 'agent',
        message: '',
        tool_calls: [{ tool_call_id: 'c1', function_name: 'bash', arguments: { cmd: 'ls' }, timeout_s: 5 }],
        observation: { results: [{ source_call_id: 'c1', content: 'a.txt', truncated: false }] },
        metrics: { prompt_tokens: 120, completion_tokens: 9, audio_tokens: 4 },
        latency_budget_ms: 900,
      },
    ],
    provenance: { tool: 'harbor', rev: 'x' },
  };
  for (const version of ['ATIF-v1.8', '1.9']) {
    const source = { ...later, schema_version: version };
    assert.ok(atif.detect({ relPath: 'later.json', value: source }), version);
    const { storylines, diagnostics } = await decodeAll(atif, bytesSource(JSON.stringify(source), 'later.json'));
    assert.equal(problemsOf(storylines), []);
    assert.equal(
      diagnostics.filter((d) => d.code === 'atif_newer_version').map((d) => d.message),
      [`at /schema_version: ${version} is newer than ATIF-v1.7, the latest this build knows; read as ATIF-v1.7, and keys it adds are kept as they are`],
    );
    assert.is(storylines[0]!.origin?.schema_version, version);
    assert.is(tokenTotals(storylines).prompt, 120);
    const [encoded] = await encodeAll(atif, storylines);
    assert.equal(sortKeys(encoded!.value), sortKeys({ ...later, schema_version: 'ATIF-v1.7' }));
  }
  const v2 = await thrown(() => decodeAll(atif, bytesSource(JSON.stringify({ ...later, schema_version: 'ATIF-v2.0' }), 'v2.json')));
  assert.instance(v2, SourceError);
  assert.match(v2.message, /at \/schema_version: unsupported ATIF schema_version "ATIF-v2\.0"/);
});

test('bad inputs: unknown version, truncated JSON, wrong shape -> SourceError (exit 2) naming the place', async () => {
  const version = await thrown(() => decodeAll(atif, fixture('synthetic/bad/wrong-schema-version.atif.json')));
  assert.instance(version, SourceError);
  assert.is((version as SourceError).exitCode, 2);
  assert.match(version.message, /^synthetic\/bad\/wrong-schema-version\.atif\.json:2:21 at \/schema_version: unsupported ATIF schema_version "ATIF-v9\.0"/);

  const truncated = await thrown(() => decodeAll(atif, fixture('synthetic/bad/truncated.atif.json')));
  assert.instance(truncated, SourceError);
  assert.match(truncated.message, /^synthetic\/bad\/truncated\.atif\.json:17:59: invalid JSON/);
  // Detection still picks ATIF for the truncated file (from its head), so the user gets this message.
  assert.ok(atif.detect(probeOf(join(SHARED_FIXTURES, 'synthetic/bad/truncated.atif.json'), 'truncated.atif.json')));

  const shape = await thrown(() => decodeAll(atif, fixture('synthetic/bad/wrong-shape.json')));
  assert.instance(shape, SourceError);
  assert.is(shape.message, 'synthetic/bad/wrong-shape.json:1:2 at /0: an ATIF trajectory must be a JSON object');
});

test("the writer follows Harbor's rules for Storylines from other formats", async () => {
  const { storylines } = await decodeAll(chatMessages, fixture('synthetic/chat-messages/conversations.jsonl'));
  const encoded = await encodeAll(atif, storylines);
  assert.is(encoded.length, 4);
  for (const { value } of encoded) {
    const doc = value as { schema_version: string; session_id: string; agent: { name: string; version: string }; steps: Array<Record<string, unknown>> };
    assert.is(doc.schema_version, 'ATIF-v1.7');
    assert.ok(doc.agent.name && doc.agent.version);
    doc.steps.forEach((step, i) => {
      assert.is(step.step_id, i + 1);
      if (step.source !== 'agent') for (const key of ['model_name', 'reasoning_effort', 'reasoning_content', 'tool_calls', 'metrics']) assert.not.ok(key in step, `${key} on a ${step.source} step`);
      const ids = new Set(((step.tool_calls ?? []) as Array<{ tool_call_id: string; arguments: unknown }>).map((c) => c.tool_call_id));
      for (const call of (step.tool_calls ?? []) as Array<{ arguments: unknown }>) assert.type(call.arguments, 'object');
      for (const result of ((step.observation as { results: Array<{ source_call_id?: string }> } | undefined)?.results ?? [])) {
        if (result.source_call_id != null) assert.ok(ids.has(result.source_call_id), `source_call_id ${result.source_call_id} in step ${i + 1}`);
      }
    });
  }
  // And the result reads back as ATIF.
  const again = await decodeAll(atif, bytesSource(encoded.map((e) => JSON.stringify(e.value)).join('\n'), 'from-chat.jsonl'));
  assert.equal(problemsOf(again.storylines), []);
  assert.is(toolCallCount(again.storylines), toolCallCount(storylines));
});

test('a child Storyline that follows its parent is embedded, with a trajectory_id and a ref from the spawning call', async () => {
  const dir = 'synthetic/storyline';
  const parent = (await decodeAll(await loadFormat('storyline'), fixture(`${dir}/incident-triage-0007.storyline.json`))).storylines;
  const child = (await decodeAll(await loadFormat('storyline'), fixture(`${dir}/incident-triage-0007.sub-1.storyline.json`))).storylines;
  const encoded = await encodeAll(atif, [...parent, ...child]);
  assert.is(encoded.length, 1);
  const doc = encoded[0]!.value as { steps: Array<{ observation?: { results: Array<Record<string, unknown>> } }>; subagent_trajectories: Array<{ trajectory_id: string }> };
  assert.equal(doc.subagent_trajectories.map((t) => t.trajectory_id), ['incident-triage-0007/sub-1']);
  const refs = doc.steps.flatMap((s) => s.observation?.results ?? []).filter((r) => r.subagent_trajectory_ref);
  assert.equal(refs.map((r) => [r.source_call_id, r.subagent_trajectory_ref]), [['tc-1', [{ trajectory_id: 'incident-triage-0007/sub-1', session_id: 'incident-triage-0007/sub-1' }]]]);
  // Read back: the child is a Storyline again, linked to the turn and call that spawned it.
  const again = (await decodeAll(atif, bytesSource(JSON.stringify(doc), 'embedded.json'))).storylines;
  assert.equal(again.map((s) => s.session), ['incident-triage-0007', 'incident-triage-0007/sub-1']);
  assert.equal(again[1]!.parent, { psid: 'incident-triage-0007', rel: 'spawn', ptid: 3, scid: 'tc-1' });
  assert.equal(problemsOf(again), []);
});

test('a trajectory up to v1.6 with a subagent ref by session only keeps its version, so it reads back', async () => {
  // v1.7 wants a trajectory_id or trajectory_path on every ref; a v1.6 ref has only the session.
  const v16 = {
    schema_version: 'ATIF-v1.6',
    session_id: 'main-1',
    agent: { name: 'openhands', version: '0.59.0' },
    steps: [{ step_id: 1, source: 'agent', message: 'delegating', tool_calls: [{ tool_call_id: 'c1', function_name: 'task', arguments: {} }], observation: { results: [{ source_call_id: 'c1', content: 'ok', subagent_trajectory_ref: [{ session_id: 'sub-9' }] }] } }],
  };
  const { storylines } = await decodeAll(atif, bytesSource(JSON.stringify(v16), 'v16.json'));
  const [encoded] = await encodeAll(atif, storylines);
  assert.equal(sortKeys(encoded!.value), sortKeys(v16));
  const again = await decodeAll(atif, bytesSource(JSON.stringify(encoded!.value), 'again.json'));
  assert.equal(problemsOf(again.storylines), []);
});

test('a Claude Code subagent written without its document after the parent: the ref and the child share a trajectory_id, and both read back', async () => {
  const dir = 'synthetic/claude-code/projects/-home-dev-www-atlas-docs';
  const session = 'a9a20bd4-fdf9-4885-8fa1-01d41970c171';
  const childSession = `${session}.agent-a4c1e9f27b3d5e601`;
  const [parent] = (await decodeAll(agentbCode, fixture(`${dir}/${session}.jsonl`))).storylines;
  const [child] = (await decodeAll(agentbCode, fixture(`${dir}/${session}/subagents/agent-a4c1e9f27b3d5e601.jsonl`))).storylines;
  assert.equal(parent!.children, [childSession]);
  assert.is(child!.parent?.psid, session);

  // The parent alone (the subagent's file not imported, or an export filtered to the parent).
  const [alone] = await encodeAll(atif, [parent!]);
  const doc = alone!.value as { schema_version: string; steps: Array<{ observation?: { results: Array<Record<string, unknown>> } }> };
  assert.is(doc.schema_version, 'ATIF-v1.7');
  const refs = doc.steps.flatMap((s) => s.observation?.results ?? []).flatMap((r) => (r.subagent_trajectory_ref as unknown[] | undefined) ?? []);
  assert.equal(refs, [{ trajectory_id: childSession, session_id: childSession }]);
  const again = await decodeAll(atif, bytesSource(JSON.stringify(doc), 'parent.json'));
  assert.equal(problemsOf(again.storylines), []);

  // The child as its own top-level document: it carries the trajectory_id the ref names.
  const [own] = await encodeAll(atif, [child!]);
  assert.is((own!.value as { trajectory_id?: string }).trajectory_id, childSession);
  const ownAgain = (await decodeAll(atif, bytesSource(JSON.stringify(own!.value), 'child.json'))).storylines;
  assert.is(ownAgain[0]!.trajectory, childSession);

  // Parent then child: embedded, as before, with one ref to it.
  const [both] = await encodeAll(atif, [parent!, child!]);
  const tree = both!.value as { steps: typeof doc.steps; subagent_trajectories: Array<{ trajectory_id: string }> };
  assert.equal(tree.subagent_trajectories.map((t) => t.trajectory_id), [childSession]);
  assert.equal(tree.steps.flatMap((s) => s.observation?.results ?? []).flatMap((r) => (r.subagent_trajectory_ref as unknown[] | undefined) ?? []), [{ trajectory_id: childSession, session_id: childSession }]);
});

test('embedded subagents that share their parent\'s session_id (run-scoped in v1.7) are embedded again on export', async () => {
  const sub = (id: string) => ({ schema_version: 'ATIF-v1.7', trajectory_id: id, session_id: 'run-7', agent: { name: 'sub', version: '1' }, steps: [{ step_id: 1, source: 'user', message: `task ${id}` }] });
  const doc = {
    schema_version: 'ATIF-v1.7',
    session_id: 'run-7',
    trajectory_id: 'main',
    agent: { name: 'lead', version: '1' },
    steps: [
      {
        step_id: 1,
        source: 'agent',
        message: '',
        tool_calls: [
          { tool_call_id: 'c1', function_name: 'delegate', arguments: {} },
          { tool_call_id: 'c2', function_name: 'delegate', arguments: {} },
        ],
        observation: {
          results: [
            { source_call_id: 'c1', content: 'a', subagent_trajectory_ref: [{ trajectory_id: 'sub-a', session_id: 'run-7' }] },
            { source_call_id: 'c2', content: 'b', subagent_trajectory_ref: [{ trajectory_id: 'sub-b', session_id: 'run-7' }] },
          ],
        },
      },
    ],
    subagent_trajectories: [{ ...sub('sub-a'), subagent_trajectories: [sub('sub-a-1')] }, sub('sub-b')],
  };
  const { storylines } = await decodeAll(atif, bytesSource(JSON.stringify(doc), 'shared.json'));
  assert.is(storylines.length, 4);
  const encoded = await encodeAll(atif, storylines);
  assert.is(encoded.length, 1);
  assert.equal(sortKeys(encoded[0]!.value), sortKeys(doc));
});

test('bundled samples decode', () => assertSamplesDecode(atif, ['release-notes.atif.json', 'two-trajectories.atif.jsonl']));

test.run();
