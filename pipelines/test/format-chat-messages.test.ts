import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { SourceError } from '../formats/errors.js';
import { probeOf } from '../formats/probe.js';
import { atif } from '../formats/atif/index.js';
import { chatMessages } from '../formats/chat-messages/index.js';
import { loadFormat } from '../formats/registry.js';
import type { Storyline } from '../storyline/schema.js';
import { PROJECT_TESTDATA, SHARED_FIXTURES } from './helpers/fixtures.js';
import { sandbox } from './helpers/sandbox.js';
import { assertSamplesDecode, bytesSource, chatCanonical as canonical, decodeAll, encodeAll, fileSource, probeOf as probeFile, problemsOf, thrown, tokenTotals, toolCallCount } from './helpers/format-harness.js';

type Row = Record<string, unknown>;
const fixture = (path: string) => fileSource(join(SHARED_FIXTURES, path), path);

const documentsOf = (path: string): unknown[] => {
  const text = readFileSync(join(SHARED_FIXTURES, path), 'utf8');
  return path.endsWith('.jsonl') ? text.split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l)) : [JSON.parse(text)];
};

const FIXTURES = [
  { path: 'synthetic/chat-messages/conversations.jsonl', sessions: ['swe-syn-0001', 'swe-syn-0002', 'sharegpt-syn-0003', 'swe-syn-0004'], shapes: ['messages', 'messages', 'sharegpt', 'messages'], turns: [5, 4, 4, 3], calls: 5, prompt: 0, documents: [0, 1, 2, 3] },
  { path: 'synthetic/chat-messages/session-steps.json', sessions: ['sess-beta', 'sess-alpha'], shapes: ['session_steps', 'session_steps'], turns: [6, 4], calls: 3, prompt: 353, documents: [0, 0] },
  { path: 'persisting/examples/data/openai-messages/training.json', sessions: ['training-001', 'training-002'], shapes: ['session_steps_array', 'session_steps_array'], turns: [2, 2], calls: 0, prompt: 0, documents: [0, 0] },
];

test('the chat-messages module is registered and detects each shape', async () => {
  assert.is(await loadFormat('chat-messages'), chatMessages);
  for (const { path } of FIXTURES) assert.ok((chatMessages.detect(probeFile(join(SHARED_FIXTURES, path), path))?.confidence ?? 0) >= 0.8, path);
  // A first line of any length is judged by its keys.
  const long = JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(70_000) }] });
  assert.is(chatMessages.detect(probeOf('long.jsonl', [Buffer.from(`${long}\n${long}\n`)]))?.confidence, 0.8);
  for (const other of ['synthetic/bad/wrong-shape.json', 'persisting/atif/dialogue_10.json', 'synthetic/actf/csv-dedupe-two-attempts.actf.json']) {
    assert.is(chatMessages.detect(probeFile(join(SHARED_FIXTURES, other), other)), undefined, other);
  }
});

for (const expected of FIXTURES) {
  test(`${expected.path}: counts, valid Storylines, round trip, raw bytes`, async () => {
    const { storylines, docs } = await decodeAll(chatMessages, fixture(expected.path), true);
    assert.equal(storylines.map((s) => s.session), expected.sessions);
    assert.equal(storylines.map((s) => s.origin?.schema_version), expected.shapes);
    assert.equal(storylines.map((s) => s.turns.length), expected.turns);
    assert.is(toolCallCount(storylines), expected.calls);
    assert.is(tokenTotals(storylines).prompt, expected.prompt);
    assert.equal(docs.map((d) => d.sourceDocument), expected.documents);
    assert.equal(problemsOf(storylines), []);

    const encoded = await encodeAll(chatMessages, storylines);
    assert.equal(canonical(encoded.map((e) => e.value)), canonical(documentsOf(expected.path)));

    const source = readFileSync(join(SHARED_FIXTURES, expected.path));
    assert.ok(Buffer.concat(docs.flatMap((d) => (d.raw ? [d.raw] : []))).equals(source), 'raws reproduce the file');
  });
}

test('conversation rows: roles, parallel calls, malformed arguments, content parts, JSON-string messages', async () => {
  const { storylines, diagnostics } = await decodeAll(chatMessages, fixture('synthetic/chat-messages/conversations.jsonl'));
  const [swe, image, sharegpt, japanese] = storylines as [Storyline, Storyline, Storyline, Storyline];
  assert.equal(swe.turns.map((t) => t.src), ['system', 'user', 'agent', 'agent', 'agent']);
  assert.is(swe.turns[2]!.reason, 'Find parse_offset first.');
  assert.equal(swe.turns[2]!.tool_calls![0]!.args, { query: 'def parse_offset', path: 'tzparse' });
  assert.equal(swe.turns[3]!.observation!.results.map((r) => [r.source_call_id, r.content]), [['call_1b', 'ok'], ['call_1c', '7 passed in 0.05s']]);
  // Row metadata: all of it in meta.row (runs.meta_json); the outcome also in task.result.
  assert.is((swe.meta?.row as Row).instance_id, 'acme__tzparse-311');
  assert.equal(swe.task?.result, { resolved: true });
  assert.is(swe.agent.model, 'gpt-x-mini');

  assert.equal((image.turns[1]!.msg as Row[]).map((p) => p.type), ['text', 'image_url']);
  assert.is(image.turns[2]!.tool_calls![0]!.args, '{"path": "plotkit/legend.py", "start": 40', 'malformed JSON kept verbatim');
  assert.ok(diagnostics.some((d) => d.code === 'tool_arguments_malformed' && d.line === 2));
  assert.equal(image.turns[3]!.extra, { refusal: null });

  // ShareGPT markup -> tool call with arguments and an observation linked to it.
  assert.equal(sharegpt.turns.map((t) => t.src), ['system', 'user', 'agent', 'agent']);
  const call = sharegpt.turns[2]!.tool_calls![0]!;
  assert.equal([call.fn, call.args], ['bash', { command: 'ss -ltnp | grep :8080' }]);
  assert.is(sharegpt.turns[2]!.msg, '');
  assert.equal(sharegpt.turns[2]!.observation!.results, [{ content: 'LISTEN 0 4096 *:8080 *:* users:(("java",pid=4121,fd=87))', source_call_id: call.tcid }]);
  assert.is((sharegpt.agent.tools as Row[]).length, 1);

  assert.equal(japanese.turns.map((t) => [t.src, t.kind]), [['system', 'developer'], ['user', undefined], ['agent', undefined]]);
  assert.is(japanese.turns[2]!.msg, '変更しました:「## セットアップ」。');
  assert.is(japanese.meta?.messages_as_json_string, true);
});

test('tool calls without ids are answered, in order, by the tool messages without tool_call_id that follow them', async () => {
  const row = {
    id: 'no-ids',
    messages: [
      { role: 'user', content: 'list both dirs' },
      { role: 'assistant', content: null, tool_calls: [{ type: 'function', function: { name: 'ls', arguments: '{"dir":"a"}' } }, { type: 'function', function: { name: 'ls', arguments: '{"dir":"b"}' } }] },
      { role: 'tool', content: 'a.txt' },
      { role: 'tool', content: 'b.txt' },
      { role: 'assistant', content: 'a.txt and b.txt' },
    ],
  };
  const { storylines } = await decodeAll(chatMessages, bytesSource(`${JSON.stringify(row)}\n`, 'no-ids.jsonl'));
  assert.equal(problemsOf(storylines), []);
  const turn = storylines[0]!.turns[1]!;
  assert.equal(turn.observation!.results.map((r) => [r.source_call_id, r.content]), turn.tool_calls!.map((c, i) => [c.tcid, ['a.txt', 'b.txt'][i]]));
});

test('legacy function_call messages (before tool_calls) are tool calls, answered by the function message that follows', async () => {
  const row = {
    id: 'legacy-1',
    messages: [
      { role: 'user', content: 'weather in Oslo?' },
      { role: 'assistant', content: null, function_call: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
      { role: 'function', name: 'get_weather', content: '{"temp_c":4}' },
      { role: 'assistant', content: 'It is 4 °C in Oslo.' },
    ],
  };
  const { storylines } = await decodeAll(chatMessages, bytesSource(`${JSON.stringify(row)}\n`, 'legacy.jsonl'));
  assert.equal(problemsOf(storylines), []);
  const [doc] = storylines as [Storyline];
  assert.is(toolCallCount(storylines), 1);
  const call = doc.turns[1]!.tool_calls![0]!;
  assert.equal([call.fn, call.args, call.kind], ['get_weather', { city: 'Oslo' }, 'legacy_function_call']);
  assert.equal(doc.turns[1]!.observation!.results, [{ source_call_id: call.tcid, content: '{"temp_c":4}', extra: { name: 'get_weather' } }]);
  assert.is(doc.turns[1]!.extra, undefined);
  // The same legacy messages go back out.
  const encoded = await encodeAll(chatMessages, storylines);
  assert.equal(canonical(encoded.map((e) => e.value)), canonical([row]));
  // A call of kind function_call from elsewhere (Codex's function_call items) is a tool_calls entry still.
  const codexLike = structuredClone(doc);
  codexLike.turns[1]!.tool_calls![0]!.kind = 'function_call';
  const [again] = await encodeAll(chatMessages, [codexLike]);
  const assistant = (again!.value as { messages: Row[] }).messages[1]!;
  assert.equal([assistant.function_call, (assistant.tool_calls as Row[]).length], [undefined, 1]);
});

test('per-call rows: grouped by session, ordered by step_id, copied context, metrics, unknown row keys', async () => {
  const { storylines } = await decodeAll(chatMessages, fixture('synthetic/chat-messages/session-steps.json'));
  const [beta, alpha] = storylines as [Storyline, Storyline];
  assert.equal(beta.turns.map((t) => [t.src, t.copied ?? false]), [['system', true], ['user', false], ['agent', false], ['user', false], ['agent', false], ['agent', false]]);
  assert.equal(beta.turns.filter((t) => t.src === 'agent').map((t) => (t.extra?.row as Row).step_id), [1, 2, 3]);
  assert.equal(beta.turns.filter((t) => t.src === 'agent').map((t) => t.ts), [1780992050, 1780992065.5, 1780992071]);
  assert.equal(beta.turns[4]!.metrics, { prompt_tokens: 233, completion_tokens: 19 });
  assert.equal([beta.turns[4]!.latency_ms, beta.turns[4]!.ttft_ms, beta.turns[4]!.model], [812, 240, 'model-a']);
  assert.equal(beta.turns[2]!.observation!.results, [{ source_call_id: 'tc-b1', content: 'deployment.apps/api restarted' }]);
  assert.equal([beta.run, beta.agent.id, beta.agent.model], ['run-77', 'ops-bot', 'model-a']);
  assert.equal(beta.extra, { dataset: 'synthetic-rl-rollouts', exported_at: '2026-06-10T08:00:00Z' });
  assert.equal(alpha.turns[2]!.extra?.row, { id: 'row-a1', step_id: 1, meta_json: { source: 'ops-gateway', env_state: { prompt_tokens: 120, completion_tokens: 41 } }, vendor_row: { shard: 3 } });
  assert.is(alpha.turns[2]!.reason, 'Use kubectl get pods with a field selector.');
});

test('per-call rows one per JSONL line decode together and export as one document of rows, one per line in a stream', async () => {
  const rows = (documentsOf('synthetic/chat-messages/session-steps.json')[0] as { session_steps: Row[] }).session_steps;
  const text = `${rows.map((r) => JSON.stringify(r)).join('\n')}\n\n`;
  const { storylines, docs } = await decodeAll(chatMessages, bytesSource(text, 'rows.jsonl'), true);
  assert.equal(storylines.map((s) => [s.session, s.origin?.schema_version]), [['sess-beta', 'session_steps_lines'], ['sess-alpha', 'session_steps_lines']]);
  assert.is(docs[0]!.raw?.toString('utf8'), text);
  const encoded = await encodeAll(chatMessages, storylines);
  assert.is(encoded.length, 1);
  assert.equal(canonical([encoded[0]!.lines]), canonical([rows]));
  assert.equal(encoded[0]!.value, encoded[0]!.lines);

  const mixed = `${JSON.stringify(rows[0])}\n{"messages":[{"role":"user","content":"hi"}]}\n`;
  const error = await thrown(() => decodeAll(chatMessages, bytesSource(mixed, 'mixed.jsonl')));
  assert.instance(error, SourceError);
  assert.match(error.message, /^mixed\.jsonl:2: a conversation row among per-call rows/);
});

test('per-call rows with numbers written as strings: step_id ordered as numbers, epoch and token counts read', async () => {
  const rows = [
    { session_id: 's-str', step_id: '10', created_at: '1716800010', messages: [{ role: 'user', content: 'one' }, { role: 'assistant', content: 'first' }, { role: 'user', content: 'two' }], response: { role: 'assistant', content: 'second' }, meta_json: { env_state: { prompt_tokens: '30', completion_tokens: '4' } } },
    { session_id: 's-str', step_id: '2', created_at: '1716800000.5', messages: [{ role: 'user', content: 'one' }], response: { role: 'assistant', content: 'first' }, meta_json: '{"env_state":{"prompt_tokens":"12","completion_tokens":3}}' },
  ];
  const { storylines, diagnostics } = await decodeAll(chatMessages, bytesSource(JSON.stringify(rows), 'str.json'));
  assert.equal(problemsOf(storylines), []);
  const [doc] = storylines as [Storyline];
  assert.equal(doc.turns.map((t) => [t.src, t.msg]), [['user', 'one'], ['agent', 'first'], ['user', 'two'], ['agent', 'second']]);
  assert.equal(doc.turns.filter((t) => t.src === 'agent').map((t) => [t.ts, t.metrics]), [
    [1716800000.5, { prompt_tokens: 12, completion_tokens: 3 }],
    [1716800010, { prompt_tokens: 30, completion_tokens: 4 }],
  ]);
  assert.ok(diagnostics.some((d) => d.code === 'number_from_string'), 'reading a number from a string is said');
  // The rows go back as they were written: the strings stay strings.
  const encoded = await encodeAll(chatMessages, storylines);
  assert.equal(canonical(encoded.map((e) => e.value)), canonical([[rows[1], rows[0]]]));
  // A string that is no plain decimal number is still refused.
  const bad = await thrown(() => decodeAll(chatMessages, bytesSource(JSON.stringify([{ ...rows[0], step_id: '0x2' }]), 'hex.json')));
  assert.match(bad.message, /at \/0\/step_id: step_id must be an integer > 0, not "0x2"/);
});

test('Storylines from other formats become per-conversation messages rows', async () => {
  const { storylines } = await decodeAll(atif, fileSource(join(PROJECT_TESTDATA, 'samples/atif/release-notes.atif.json'), 'release-notes.atif.json'));
  const [encoded] = await encodeAll(chatMessages, storylines);
  const row = encoded!.value as { id: string; messages: Row[] };
  assert.is(row.id, 'sample-release-notes');
  assert.equal(row.messages.map((m) => m.role), ['system', 'user', 'assistant', 'tool', 'assistant']);
  assert.equal(row.messages[2]!.tool_calls, [{ id: 'tc-1', type: 'function', function: { name: 'git_log', arguments: '{"since":"v0.8"}' } }]);
  assert.is(row.messages[2]!.content, null);
  assert.is(row.messages[3]!.tool_call_id, 'tc-1');
  const again = await decodeAll(chatMessages, bytesSource(JSON.stringify(row), 'row.json'));
  assert.equal(problemsOf(again.storylines), []);
  assert.is(toolCallCount(again.storylines), 1);
});

test('arguments with an integer JSON parsing would round come back as they were written', async () => {
  // A snowflake id in a tool call: beyond 2^53, JSON.parse rounds 12345678901234567891 to ...7000.
  const args = '{"channel": 12345678901234567891, "limit": 5}';
  const row = { messages: [{ role: 'user', content: 'read it' }, { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'read', arguments: args } }] }] };
  const { storylines } = await decodeAll(chatMessages, bytesSource(JSON.stringify(row), 'row.json'));
  const [encoded] = await encodeAll(chatMessages, storylines);
  const call = ((encoded!.value as { messages: Row[] }).messages[1]!.tool_calls as Array<{ function: { arguments: string } }>)[0]!;
  assert.is(call.function.arguments, args);
});

test('ShareGPT spellings, several responses and free text around calls survive a round trip', async () => {
  const row = {
    id: 'sg-variants',
    conversations: [
      { from: 'user', value: 'Sum 2+2 and 3+3.' },
      { from: 'assistant', value: 'Two sums.\n<tool_call>\n{"name":"add","arguments":{"a":2,"b":2}}\n</tool_call>\n<tool_call>\n{"name": "add", "arguments": {"a": 3, "b": 3}}\n</tool_call>', weight: 1 },
      { from: 'observation', value: '<tool_response>\n4\n</tool_response>\n<tool_response>\n6\n</tool_response>' },
      { from: 'gpt', value: '4 and 6. <tool_call>not json</tool_call>' },
    ],
  };
  const { storylines } = await decodeAll(chatMessages, bytesSource(JSON.stringify(row), 'sg.json'));
  const doc = storylines[0]!;
  assert.equal(problemsOf(storylines), []);
  assert.equal(doc.turns.map((t) => t.src), ['user', 'agent', 'agent']);
  assert.is(doc.turns[1]!.msg, 'Two sums.');
  assert.equal(doc.turns[1]!.tool_calls!.map((c) => c.args), [{ a: 2, b: 2 }, { a: 3, b: 3 }]);
  assert.equal(doc.turns[1]!.observation!.results.map((r) => [r.source_call_id, r.content]), [[doc.turns[1]!.tool_calls![0]!.tcid, '4'], [doc.turns[1]!.tool_calls![1]!.tcid, '6']]);
  assert.is(doc.turns[2]!.msg, '4 and 6. <tool_call>not json</tool_call>');
  const [encoded] = await encodeAll(chatMessages, storylines);
  assert.equal(encoded!.value, row);
});

const EVAL_ROW = {
  run_id: 'eval-2026-06-01',
  task: 'swe-lite/astropy-1234',
  agent: 'coder-v3',
  model: 'model-y',
  result: 'pass',
  score: 0.75,
  epoch: 2,
  conversations: [
    { role: 'system', content: 'You fix bugs.' },
    { role: 'user', content: [{ type: 'text', text: 'Fix the off-by-one.' }, { type: 'image_url', image_url: { url: 'data:,' } }] },
    { role: 'assistant', content: null, tool_calls: [{ id: 't1', type: 'function', function: { name: 'edit', arguments: '{"line": 3}' } }] },
    { role: 'tool', tool_call_id: 't1', content: 'edited' },
    { role: 'assistant', content: 'Fixed.' },
  ],
};

test('conversations of {role, content} with row metadata: Storyline fields, meta.row, and the same row back', async () => {
  assert.is(chatMessages.detect(probeOf('eval.jsonl', [Buffer.from(`${JSON.stringify(EVAL_ROW)}\n`)]))?.reason, 'rows with "conversations" of role/content messages');
  const { storylines } = await decodeAll(chatMessages, bytesSource(`${JSON.stringify(EVAL_ROW)}\n`, 'eval.jsonl'));
  const doc = storylines[0]!;
  assert.equal(problemsOf(storylines), []);
  assert.is(doc.origin?.schema_version, 'conversations');
  assert.equal(doc.turns.map((t) => t.src), ['system', 'user', 'agent', 'agent']);
  assert.equal(doc.turns[2]!.observation!.results, [{ source_call_id: 't1', content: 'edited' }]);
  assert.equal([doc.agent.id, doc.agent.name, doc.agent.model, doc.run], ['coder-v3', 'coder-v3', 'model-y', 'eval-2026-06-01']);
  assert.equal(doc.task?.result, { result: 'pass', score: 0.75 });
  const { conversations: _c, ...metadata } = EVAL_ROW;
  assert.equal(doc.meta?.row, metadata);
  const [encoded] = await encodeAll(chatMessages, storylines);
  assert.equal(canonical([encoded!.value]), canonical([EVAL_ROW]));
});

test('row metadata is queryable from runs.meta_json through the command', async () => {
  const s = sandbox('format-chat');
  writeFileSync(s.path('eval.jsonl'), `${JSON.stringify(EVAL_ROW)}\n`);
  const imported = await s.run(['import', '-f', s.path('eval.jsonl'), '-t', s.path('ds')]);
  assert.is(imported.code, 0, imported.stderr);
  const sql = "select json_extract(meta_json, '$.row.task') as task, json_extract(meta_json, '$.row.epoch') as epoch, run_id, agent_name from dataset.runs";
  const rows = await s.run(['query', s.path('ds'), '--sql', sql, '--format', 'json']);
  assert.is(rows.code, 0, rows.stderr);
  assert.equal(JSON.parse(rows.stdout), [{ task: 'swe-lite/astropy-1234', epoch: 2, run_id: 'eval-2026-06-01', agent_name: 'coder-v3' }]);
});

test('bad chat inputs name the file, line and pointer', async () => {
  const shape = await thrown(() => decodeAll(chatMessages, fixture('synthetic/bad/wrong-shape.json')));
  assert.instance(shape, SourceError);
  assert.is(shape.message, 'synthetic/bad/wrong-shape.json:1:2 at /0: not a chat-messages row: expected "messages", "conversations", or per-call rows with "session_id" and "step_id"');
  const message = await thrown(() => decodeAll(chatMessages, bytesSource('{"messages":[{"role":"user","content":"a"}]}\n{"messages":["oops"]}\n', 'm.jsonl')));
  assert.is(message.message, 'm.jsonl:2:14 at /messages/0: a chat message must be a JSON object');
  const step = await thrown(() => decodeAll(chatMessages, bytesSource('[{"session_id":"s","step_id":0,"messages":[]}]', 's.json')));
  assert.is(step.message, 's.json:1:30 at /0/step_id: step_id must be an integer > 0, not 0');
  const broken = await thrown(() => decodeAll(chatMessages, bytesSource('{"messages":[}\n', 'b.jsonl')));
  assert.match(broken.message, /^b\.jsonl:1:14: invalid JSON/);
});

test('bundled samples decode', () => assertSamplesDecode(chatMessages, ['support-chats.jsonl', 'agent-calls.json']));

test.run();
