/**
 * The `agentb-code` (Claude Code) and `agenta` (Codex CLI) decoders against every fixture of
 * theirs, with the counts of fixtures/README.md; every decoded Storyline must be valid.
 */
import { createReadStream, readFileSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { Readable } from 'node:stream';
import { test } from 'uvu';
import { scratchDir } from '../../lib/testing/scratch.js';
import * as assert from 'uvu/assert';
import { Logger } from '../../lib/log.js';
import { ToolError } from '../../lib/errors.js';
import type { Storyline, Turn } from '../storyline/schema.js';
import { storylineProblems } from '../storyline/validate.js';
import { loadFormats } from '../formats/registry.js';

const formats = await loadFormats();
import { agenta } from '../formats/agenta/index.js';
import { agentbCode } from '../formats/agentb-code/index.js';
import type { DecodedDocument, FormatModule, SourceFile } from '../formats/types.js';
import { probeOf } from '../formats/probe.js';
import { PROJECT_TESTDATA, SHARED_FIXTURES } from './helpers/fixtures.js';

const CC = join(SHARED_FIXTURES, 'synthetic', 'claude-code', 'projects');
const CODEX = join(SHARED_FIXTURES, 'synthetic', 'codex', 'sessions');
const LETTA = join(SHARED_FIXTURES, 'letta-trajectory');
const BAD = join(SHARED_FIXTURES, 'synthetic', 'bad');
const LEDGER = join(CC, '-home-dev-ledger-svc', '2ad842e0-db61-4fd6-8a57-f55969d81e22.jsonl');
const ATLAS_SESSION = 'a9a20bd4-fdf9-4885-8fa1-01d41970c171';
const ATLAS = join(CC, '-home-dev-www-atlas-docs', `${ATLAS_SESSION}.jsonl`);
const ATLAS_SUB = join(CC, '-home-dev-www-atlas-docs', ATLAS_SESSION, 'subagents', 'agent-a4c1e9f27b3d5e601.jsonl');
const CODEX_NEW = join(CODEX, '2026', '05', '14', 'rollout-2026-05-14T09-12-03-0196d2a4-7c1e-7b3a-9f0d-2e5c8a41b6d7.jsonl');
const CODEX_OLD = join(CODEX, '2025', '06', '03', 'rollout-2025-06-03T14-22-10-5d1e8f2a-93b4-4c6e-a7d0-1f2e3b4c5d6e.jsonl');

interface Decoded {
  docs: DecodedDocument[];
  diagnostics: Array<{ code: string; message: string; line: number | undefined }>;
}

const fileAt = (path: string, root = SHARED_FIXTURES): SourceFile => ({ path, relPath: relative(root, path), name: relative(root, path), open: () => createReadStream(path) });
const memoryFile = (text: string, relPath: string): SourceFile => ({ path: '-', relPath, name: relPath, open: () => Readable.from([Buffer.from(text)]) });

async function decode(format: FormatModule, file: SourceFile, keepRaw = false): Promise<Decoded> {
  const diagnostics: Decoded['diagnostics'] = [];
  const ctx = { log: new Logger('error'), keepRaw, signal: new AbortController().signal, diagnostic: (code: string, message: string, line?: number) => void diagnostics.push({ code, message, line }) };
  const docs: DecodedDocument[] = [];
  for await (const doc of format.decode(file, ctx)) {
    assert.equal(storylineProblems(doc.storyline), [], `${file.relPath}: ${doc.storyline.session} is a valid Storyline`);
    docs.push(doc);
  }
  return { docs, diagnostics };
}

async function decodeError(format: FormatModule, file: SourceFile): Promise<ToolError> {
  try {
    await decode(format, file);
  } catch (error) {
    if (error instanceof ToolError) return error;
    throw error;
  }
  throw new Error(`${file.relPath} decoded without error`);
}

const prompts = (s: Storyline): Turn[] => s.turns.filter((t) => t.src === 'user');
const agents = (s: Storyline): Turn[] => s.turns.filter((t) => t.src === 'agent');
const calls = (s: Storyline) => s.turns.flatMap((t) => t.tool_calls ?? []);
const results = (s: Storyline) => s.turns.flatMap((t) => t.observation?.results ?? []);
const sum = (s: Storyline, key: 'prompt_tokens' | 'completion_tokens' | 'cached_tokens') => s.turns.reduce((n, t) => n + (t.metrics?.[key] ?? 0), 0);
const text = (s: Storyline) => JSON.stringify(s.turns.map((t) => [t.msg, t.reason]));

function detected(path: string): string | undefined {
  const probe = probeOf(relative(SHARED_FIXTURES, path), [readFileSync(path)]);
  let best: { name: string; confidence: number } | undefined;
  for (const format of formats) {
    const d = format.detect(probe);
    if (d && d.confidence > (best?.confidence ?? 0)) best = { name: format.name, confidence: d.confidence };
  }
  return best?.name;
}

// ---- Claude Code -------------------------------------------------------------------------

test('agentb-code: ledger-svc merges split responses and counts usage once per message.id', async () => {
  const { docs, diagnostics } = await decode(agentbCode, fileAt(LEDGER));
  assert.is(docs.length, 1);
  const s = docs[0]?.storyline as Storyline;
  assert.is(s.session, '2ad842e0-db61-4fd6-8a57-f55969d81e22');
  assert.is(s.origin?.format, 'agentb-code');
  assert.is(prompts(s).length, 1, '1 real prompt');
  assert.is(agents(s).length, 5, '5 API responses over 10 assistant lines');
  assert.equal(calls(s).map((c) => c.fn), ['Bash', 'Read', 'Edit', 'Bash']);
  assert.is(results(s).length, 4);
  assert.is(results(s)[0]?.is_error, true, 'the first result is an error');
  // Usage once per message.id: input 7 + cache_creation 6837 + cache_read 81944.
  assert.is(sum(s, 'prompt_tokens'), 88788);
  assert.is(sum(s, 'cached_tokens'), 81944);
  assert.is(sum(s, 'completion_tokens'), 1129, 'not 2962, which summing every line gives');
  assert.equal(s.final_metrics, { total_steps: 6, total_prompt_tokens: 88788, total_completion_tokens: 1129, total_cached_tokens: 81944 });
  assert.is(s.agent.model, 'claude-sonnet-4-6');
  assert.ok(agents(s).every((t) => t.nllm === 1 && t.metrics !== undefined));
  assert.ok(agents(s)[0]?.reason?.startsWith('A one-cent drift'), 'thinking becomes reasoning');
  assert.not.match(text(s), /command-name|local-command|Caveat/, 'the /cost wrapper is dropped');
  const codes = diagnostics.map((d) => d.code);
  assert.ok(codes.includes('noise_record_dropped') && codes.includes('record_type_skipped'), codes.join());
  for (const kind of ['progress', 'permission-mode', 'file-history-snapshot', 'last-prompt', 'isMeta']) {
    assert.ok(diagnostics.some((d) => d.message.includes(kind)), `a diagnostic for ${kind}`);
  }
  // The turn's duration is kept on the turn it follows, not reported as dropped.
  assert.not.ok(diagnostics.some((d) => d.message.includes('turn_duration')));
  assert.equal(s.turns.at(-1)?.extra?.events, [{ type: 'system', subtype: 'turn_duration', uuid: '54573aea-8f43-4b76-8b3b-3794b2a93e5a', timestamp: '2026-05-12T09:14:30.802Z', durationMs: 28697 }]);
  assert.is(s.extra?.title, 'Fix EUR invoice rounding');
  assert.is(s.extra?.cwd, '/home/dev/ledger-svc');
});

test('agentb-code: atlas-docs links the Task call to its subagent, and compaction is not a prompt', async () => {
  const { docs } = await decode(agentbCode, fileAt(ATLAS));
  assert.is(docs.length, 1, 'the subagent is in its own file');
  const s = docs[0]?.storyline as Storyline;
  const child = `${ATLAS_SESSION}.agent-a4c1e9f27b3d5e601`;
  assert.is(prompts(s).length, 2, '2 real prompts');
  assert.is(agents(s).length, 7, '7 API responses over 8 assistant lines');
  assert.equal(calls(s).map((c) => c.fn), ['Task', 'Edit', 'Edit', 'Grep', 'Edit']);
  assert.is(results(s).length, 5);
  assert.is(sum(s, 'prompt_tokens'), 12 + 17115 + 78610);
  assert.is(sum(s, 'cached_tokens'), 78610);
  assert.is(sum(s, 'completion_tokens'), 981);
  const compaction = s.turns.filter((t) => t.kind === 'compaction');
  assert.is(compaction.length, 1);
  assert.is(compaction[0]?.src, 'system');
  assert.ok(String(compaction[0]?.msg).startsWith('This session is being continued'), 'the compact summary is the compaction turn');
  assert.equal((compaction[0]?.extra?.compact_metadata as { trigger: string }).trigger, 'auto');
  assert.equal(s.children, [child]);
  const task = s.turns.find((t) => t.tool_calls?.[0]?.fn === 'Task');
  assert.equal(task?.observation?.results[0]?.subagent_trajectory_ref, [{ session_id: child }]);
  assert.equal(s.extra?.summaries, [{ summary: 'Docs site internal link audit', leafUuid: '3428635e-6e6a-433a-8d9e-a382a711bb4a' }]);
});

test('agentb-code: a subagents/agent-<id>.jsonl file is a child Storyline with its parent and spawning call', async () => {
  const { docs } = await decode(agentbCode, fileAt(ATLAS_SUB));
  assert.is(docs.length, 1);
  const s = docs[0]?.storyline as Storyline;
  assert.is(s.session, `${ATLAS_SESSION}.agent-a4c1e9f27b3d5e601`);
  assert.equal(s.parent, { psid: ATLAS_SESSION, scid: 'toolu_01kCJ1M7kJHhru1A5VRxA3w5Oc', rel: 'spawn' });
  assert.is(prompts(s).length, 1);
  assert.is(prompts(s)[0]?.kind, 'subagent_prompt');
  assert.is(agents(s).length, 4);
  assert.equal(calls(s).map((c) => c.fn), ['Glob', 'Grep', 'Grep']);
  assert.is(sum(s, 'prompt_tokens'), 10 + 4212 + 7896);
  assert.is(sum(s, 'cached_tokens'), 7896);
  assert.is(sum(s, 'completion_tokens'), 765);
  assert.match(s.agent.model ?? '', 'claude-haiku');
});

test('agentb-code: letta tool-call and subagent fixtures', async () => {
  const tool = (await decode(agentbCode, fileAt(join(LETTA, 'claude-code', 'tool-call', 'input.jsonl')))).docs[0]?.storyline as Storyline;
  assert.equal(tool.turns.map((t) => [t.src, t.msg]), [
    ['user', 'fix the flaky retry test'],
    ['agent', 'Looking at retry.py now.'],
    ['agent', 'Patched the backoff.'],
  ]);
  assert.is(tool.turns[1]?.reason, 'check the retry module');
  assert.equal(calls(tool), [{ tcid: 'toolu_01A', fn: 'Read', args: { file_path: 'retry.py' }, kind: 'tool_use', result: [{ type: 'text', text: '1\tdef retry():' }] }]);
  assert.is(results(tool)[0]?.is_error, true);
  assert.is(tool.agent.model, 'claude-opus-4-6');

  const sub = (await decode(agentbCode, fileAt(join(LETTA, 'claude-code', 'subagent', 'input.jsonl')))).docs[0]?.storyline as Storyline;
  assert.is(sub.session, 'parent-session-fixture.agent-subagent-fixture');
  assert.equal(sub.parent, { psid: 'parent-session-fixture', rel: 'spawn' }, 'no parent file: no spawning call');
  assert.equal(sub.turns.map((t) => t.msg), ['Inspect the retry path.', 'The retry path uses bounded exponential backoff.']);
});

test('agentb-code: letta cleanup: its non-JSON first line is exit 2; the rest drops noise and splits the sidechain', async () => {
  const path = join(LETTA, 'claude-code', 'cleanup', 'input.jsonl');
  const error = await decodeError(agentbCode, fileAt(path));
  assert.is(error.exitCode, 2);
  assert.match(error.message, /^letta-trajectory\/claude-code\/cleanup\/input\.jsonl:1:\d+: invalid JSON/);
  const rest = readFileSync(path, 'utf8').split('\n').slice(1).join('\n');
  const { docs, diagnostics } = await decode(agentbCode, memoryFile(rest, 'cleanup/input.jsonl'));
  const [main, child] = docs.map((d) => d.storyline);
  assert.equal(main?.turns.map((t) => [t.src, t.msg]), [
    ['user', 'summarize the change'],
    ['agent', 'The retry behavior now uses bounded backoff.'],
  ]);
  assert.is(main?.session, 'input');
  assert.equal(main?.children, ['input.agent-sidechain']);
  assert.equal(child?.turns.map((t) => t.msg), ['subagent transport']);
  assert.equal(child?.parent, { psid: 'input', rel: 'spawn' });
  assert.ok(diagnostics.some((d) => d.code === 'noise_record_dropped' && d.message.includes('isMeta') && d.line === 2));
  assert.ok(diagnostics.some((d) => d.code === 'sidechain_split'));
});

test('agentb-code: lines repeated by a resumed session are dropped by uuid', async () => {
  const lines = readFileSync(LEDGER, 'utf8').split('\n');
  const doubled = [...lines.slice(0, 10), ...lines.slice(2, 10), ...lines.slice(10)].join('\n');
  const { docs, diagnostics } = await decode(agentbCode, memoryFile(doubled, 'resumed.jsonl'));
  const s = docs[0]?.storyline as Storyline;
  assert.is(agents(s).length, 5);
  assert.is(sum(s, 'completion_tokens'), 1129);
  assert.ok(diagnostics.filter((d) => d.code === 'duplicate_record_dropped').length >= 7);
});

test('agentb-code: bad and edge inputs', async () => {
  const notJson = await decodeError(agentbCode, fileAt(join(BAD, 'not-json-line', '8d4e42da-788a-4035-8586-739e2f0dd34f.jsonl')));
  assert.is(notJson.exitCode, 2);
  assert.match(notJson.message, /not-json-line\/8d4e42da-788a-4035-8586-739e2f0dd34f\.jsonl:2:1: invalid JSON/);
  const empty = await decodeError(agentbCode, fileAt(join(BAD, 'empty.jsonl')));
  assert.is(empty.exitCode, 2);
  assert.match(empty.message, 'empty.jsonl: empty file');
  const huge = join(SHARED_FIXTURES, 'synthetic', 'edge', 'huge-line-2mb', '2d8cb5af-cd9e-4d82-832f-6014f92e8feb.jsonl');
  const { docs } = await decode(agentbCode, fileAt(huge));
  assert.is(docs.length, 1);
  const big = results(docs[0]?.storyline as Storyline).find((r) => typeof r.content === 'string' && r.content.length > 2_000_000);
  assert.ok(big, 'the 2.2 MB tool result is kept whole');
});

test('agentb-code: -o preserve attaches the exact file bytes once', async () => {
  const { docs } = await decode(agentbCode, fileAt(LEDGER), true);
  assert.ok(docs[0]?.raw?.equals(readFileSync(LEDGER)));
  const sub = await decode(agentbCode, memoryFile(readFileSync(join(LETTA, 'claude-code', 'cleanup', 'input.jsonl'), 'utf8').split('\n').slice(1).join('\n'), 'x.jsonl'), true);
  assert.is(sub.docs.length, 2);
  assert.ok(sub.docs[0]?.raw !== undefined && sub.docs[1]?.raw === undefined, 'one raw per source document');
  assert.ok(sub.docs.every((d) => d.sourceDocument === 0));
});

test('agentb-code: a structured toolUseResult is kept only when its JSON text is at most 64 KiB', async () => {
  const line = (record: Record<string, unknown>): string => JSON.stringify({ sessionId: 's-size', timestamp: '2026-05-01T10:00:00.000Z', ...record });
  // Sizes around the limit (65536): by raw length, and by JSON escaping alone (40000 quotes are 80002 characters of JSON).
  const outputs: Record<string, string> = { small: 'ok', near: 'y'.repeat(65_000), long: 'x'.repeat(70_000), escaped: '"'.repeat(40_000) };
  const ids = Object.keys(outputs);
  const lines = [
    line({ type: 'user', uuid: 'u0', parentUuid: null, message: { role: 'user', content: 'run them' } }),
    line({ type: 'assistant', uuid: 'a0', parentUuid: 'u0', message: { id: 'm0', role: 'assistant', model: 'claude-x', content: ids.map((id) => ({ type: 'tool_use', id, name: 'Bash', input: { command: id } })) } }),
    ...ids.map((id, i) =>
      line({ type: 'user', uuid: `r${i}`, parentUuid: 'a0', message: { role: 'user', content: [{ type: 'tool_result', tool_use_id: id, content: 'done' }] }, toolUseResult: { stdout: outputs[id], stderr: '' } }),
    ),
  ];
  const { docs } = await decode(agentbCode, memoryFile(`${lines.join('\n')}\n`, 'size.jsonl'));
  const kept = Object.fromEntries(calls(docs[0]?.storyline as Storyline).map((c) => [c.tcid, c.extra?.tool_use_result !== undefined]));
  assert.equal(kept, { small: true, near: true, long: false, escaped: false });
});

// ---- Codex ------------------------------------------------------------------------------

test('agenta: current layout: 2 prompts, 7 model calls with last_token_usage, calls joined by call_id', async () => {
  const { docs, diagnostics } = await decode(agenta, fileAt(CODEX_NEW));
  assert.is(docs.length, 1);
  const s = docs[0]?.storyline as Storyline;
  assert.is(s.session, '0196d2a4-7c1e-7b3a-9f0d-2e5c8a41b6d7');
  assert.equal(prompts(s).map((t) => t.msg), [
    'PNG export crops the last row of tiles when the height is not a multiple of 256. Fix it and add a regression test.',
    'Now run clippy on the CLI crate — any warnings?',
  ], 'duplicated user_message events are emitted once; injected context is not a prompt');
  assert.is(agents(s).length, 7);
  assert.ok(agents(s).every((t) => t.metrics !== undefined), 'each model call has its token_count');
  assert.is(sum(s, 'prompt_tokens'), 76124);
  assert.is(sum(s, 'cached_tokens'), 67072);
  assert.is(sum(s, 'completion_tokens'), 863);
  assert.equal(s.final_metrics, { total_steps: 9, total_prompt_tokens: 76124, total_completion_tokens: 863, total_cached_tokens: 67072 });
  assert.equal(calls(s).map((c) => c.fn), ['exec_command', 'exec_command', 'apply_patch', 'exec_command', 'exec_command']);
  assert.ok(calls(s).every((c) => c.result !== undefined), 'every call has its output');
  assert.equal(calls(s).map((c) => c.response?.exit_code), [0, 0, 0, 0, 101]);
  assert.is(results(s).at(-1)?.is_error, true);
  const said = agents(s).map((t) => t.msg).filter((m) => m !== '');
  assert.is(said.length, 3, 'agent_message events repeat response items: each text once');
  assert.is(new Set(said).size, 3);
  assert.is(agents(s).filter((t) => t.reason).length, 2, 'agent_reasoning events repeat reasoning items');
  assert.is(prompts(s)[1]?.env?.cwd, '/home/dev/tiles-renderer/crates/cli');
  assert.is(agents(s).at(-1)?.effort, 'high');
  assert.is(agents(s)[0]?.effort, 'medium');
  assert.is(s.agent.ver, '0.130.0');
  assert.ok(s.prompt?.system?.startsWith('You are Codex'));
  assert.is(diagnostics.filter((d) => d.code === 'injected_context_dropped').length, 2, '<permissions instructions> and <environment_context>');
  assert.not.match(text(s), /environment_context|permissions instructions/);
});

test('agenta: legacy layout: bare header and items, state markers skipped', async () => {
  const { docs, diagnostics } = await decode(agenta, fileAt(CODEX_OLD));
  const s = docs[0]?.storyline as Storyline;
  assert.is(s.session, '5d1e8f2a-93b4-4c6e-a7d0-1f2e3b4c5d6e');
  assert.is(s.extra?.layout, 'legacy');
  assert.is(s.started_at, '2025-06-03T14:22:10.118Z');
  assert.equal(prompts(s).map((t) => t.msg), ['Why does `weather --units metric` still print °F?', 'patch it and run the tests']);
  assert.equal(calls(s).map((c) => [c.fn, c.response?.exit_code]), [['shell', 0], ['shell', 0], ['shell', 0]]);
  assert.equal(calls(s).map((c) => c.duration_ms), [100, 0, 1300]);
  assert.is(agents(s).filter((t) => t.msg !== '').length, 2, '2 assistant messages');
  assert.is(agents(s).filter((t) => t.reason).length, 1, '1 reasoning item');
  assert.ok(diagnostics.some((d) => d.message === 'skipped 7 record_type state lines'));
  assert.is(diagnostics.filter((d) => d.code === 'injected_context_dropped').length, 2);
});

test('agenta: letta tool-calls: custom and tool-search calls, reasoning event, injected context dropped', async () => {
  const { docs, diagnostics } = await decode(agenta, fileAt(join(LETTA, 'codex', 'tool-calls', 'input.jsonl')));
  const s = docs[0]?.storyline as Storyline;
  assert.is(s.session, 's1');
  assert.equal(prompts(s).map((t) => t.msg), ['create one focused commit']);
  assert.is(agents(s)[0]?.reason, 'Reviewing the changed files');
  assert.equal(calls(s).map((c) => [c.tcid, c.fn, c.args]), [
    ['call_A', 'update_plan', { explanation: 'review and commit' }],
    ['call_B', 'apply_patch', { input: '*** Begin Patch\n*** End Patch' }],
    ['call_C', 'tool_search', { query: 'filesystem tools' }],
  ]);
  assert.equal(results(s).map((r) => r.content), ['Plan updated', 'Done', '[{"name":"read_file"}]']);
  assert.is(agents(s).at(-1)?.msg, 'Created one focused commit.');
  assert.is(s.agent.model, 'gpt-5.3-codex');
  assert.ok(diagnostics.some((d) => d.code === 'injected_context_dropped' && d.line === 3));
});

test('agenta: letta cleanup: non-JSON first line is exit 2; the rest renames duplicate ids and drops extra outputs', async () => {
  const path = join(LETTA, 'codex', 'cleanup', 'input.jsonl');
  const error = await decodeError(agenta, fileAt(path));
  assert.is(error.exitCode, 2);
  assert.match(error.message, /cleanup\/input\.jsonl:1:\d+: invalid JSON/);
  const rest = readFileSync(path, 'utf8').split('\n').slice(1).join('\n');
  const { docs, diagnostics } = await decode(agenta, memoryFile(rest, 'rollout-x.jsonl'));
  const s = docs[0]?.storyline as Storyline;
  assert.equal(calls(s).map((c) => [c.tcid, c.args, c.result]), [
    ['call_DUP', { cmd: 'cat a.txt' }, 'alpha'],
    ['call_DUP__2', 'not-json', 'beta'],
  ]);
  const codes = diagnostics.map((d) => `${d.code}@${d.line}`);
  for (const code of ['duplicate_tool_call_id@3', 'tool_arguments_not_json@3', 'duplicate_tool_result@6', 'orphan_tool_result@7']) assert.ok(codes.includes(code), `${code} in ${codes.join()}`);
  assert.is(agents(s).at(-1)?.msg, 'Inspected both files.');
});

test('agenta: invalid UTF-8 is exit 2 with its line', async () => {
  const error = await decodeError(agenta, fileAt(join(BAD, 'invalid-utf8', 'rollout-2026-05-15T09-00-00-0196d9aa-0000-7000-8000-00000000bad8.jsonl')));
  assert.is(error.exitCode, 2);
  assert.match(error.message, /rollout-2026-05-15T09-00-00-0196d9aa-0000-7000-8000-00000000bad8\.jsonl:4: invalid UTF-8/);
});

/** JSONL text of objects. */
const jsonl = (...lines: object[]) => lines.map((l) => `${JSON.stringify(l)}\n`).join('');
const ccLine = (type: string, uuid: string, extra: object) => ({ type, uuid, sessionId: 'sess-1', timestamp: '2026-01-02T03:04:05.000Z', isSidechain: false, ...extra });

test('agentb-code: old layout agent-<id>.jsonl beside its session finds the spawning Task call', async () => {
  const dir = scratchDir('cc-old');
  writeFileSync(join(dir, 'sess-1.jsonl'), jsonl(
    ccLine('user', 'u1', { message: { role: 'user', content: 'look around' } }),
    ccLine('assistant', 'a1', { message: { id: 'm1', role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_T', name: 'Task', input: { prompt: 'list files' } }] } }),
    ccLine('user', 'u2', { message: { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_T', content: 'two files' }] }, toolUseResult: { agentId: 'abc', status: 'completed' } }),
  ));
  writeFileSync(join(dir, 'agent-abc.jsonl'), jsonl(
    ccLine('user', 's1', { isSidechain: true, agentId: 'abc', message: { role: 'user', content: 'list files' } }),
    ccLine('assistant', 's2', { isSidechain: true, agentId: 'abc', message: { id: 'm9', role: 'assistant', content: [{ type: 'text', text: 'a.txt b.txt' }] } }),
  ));
  const sub = (await decode(agentbCode, fileAt(join(dir, 'agent-abc.jsonl'), dir))).docs[0]?.storyline as Storyline;
  assert.equal(sub.parent, { psid: 'sess-1', scid: 'toolu_T', rel: 'spawn' });
  const main = (await decode(agentbCode, fileAt(join(dir, 'sess-1.jsonl'), dir))).docs[0]?.storyline as Storyline;
  assert.equal(main.children, ['sess-1.agent-abc']);
});

test('agentb-code: sidechain lines inside a main file become a child linked to its Task call', async () => {
  const text = jsonl(
    ccLine('user', 'u1', { message: { role: 'user', content: 'audit it' } }),
    ccLine('assistant', 'a1', { message: { id: 'm1', role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_T', name: 'Task', input: { prompt: 'scan the repo' } }] } }),
    ccLine('user', 's1', { isSidechain: true, agentId: 'zz', message: { role: 'user', content: 'scan the repo' } }),
    ccLine('assistant', 's2', { isSidechain: true, agentId: 'zz', message: { id: 'm2', role: 'assistant', content: [{ type: 'text', text: 'clean' }] } }),
    ccLine('user', 'u2', { message: { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_T', content: 'clean' }, { type: 'text', text: '[Request interrupted by user]' }] } }),
  );
  const { docs } = await decode(agentbCode, memoryFile(text, 'sess-1.jsonl'));
  const [main, child] = docs.map((d) => d.storyline);
  assert.equal(main?.children, ['sess-1.agent-zz']);
  assert.equal(child?.parent, { psid: 'sess-1', scid: 'toolu_T', rel: 'spawn' });
  assert.equal(main?.turns.map((t) => [t.src, t.kind ?? null]), [['user', null], ['agent', null], ['user', 'interruption']]);
  assert.equal(child?.turns.map((t) => t.msg), ['scan the repo', 'clean']);
});

const cxLine = (type: string, payload: object, second: number) => ({ timestamp: `2026-02-03T04:05:${String(second).padStart(2, '0')}.000Z`, type, payload });
const usage = (input: number, cached: number, output: number) => ({ input_tokens: input, cached_input_tokens: cached, output_tokens: output, reasoning_output_tokens: 0, total_tokens: input + output });

test('agenta: events before items, compaction, aborted turns and subagent rollouts', async () => {
  const text = jsonl(
    cxLine('session_meta', { id: 'child-1', cli_version: '0.131.0', source: { subagent: { thread_spawn: { parent_thread_id: 'parent-9', depth: 1 } } } }, 0),
    cxLine('event_msg', { type: 'user_message', message: 'first question' }, 1),
    cxLine('response_item', { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'first question' }] }, 1),
    cxLine('event_msg', { type: 'agent_message', message: 'first answer' }, 2),
    cxLine('response_item', { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'first answer' }] }, 2),
    cxLine('event_msg', { type: 'token_count', info: { total_token_usage: usage(100, 50, 10), last_token_usage: usage(100, 50, 10) } }, 3),
    cxLine('event_msg', { type: 'token_count', info: { total_token_usage: usage(100, 50, 10), last_token_usage: usage(100, 50, 10) } }, 3),
    cxLine('compacted', { message: 'summary of the work so far', replacement_history: [{}, {}] }, 4),
    cxLine('event_msg', { type: 'turn_aborted', reason: 'interrupted' }, 5),
    cxLine('response_item', { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'second question' }] }, 6),
    cxLine('response_item', { type: 'web_search_call', id: 'ws_1', status: 'completed', action: { type: 'search', query: 'rust div_ceil' } }, 7),
    cxLine('response_item', { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'second answer' }] }, 8),
    cxLine('event_msg', { type: 'token_count', info: { total_token_usage: usage(300, 150, 30), last_token_usage: usage(200, 100, 20) } }, 9),
  );
  const { docs, diagnostics } = await decode(agenta, memoryFile(text, 'rollout-child.jsonl'));
  const s = docs[0]?.storyline as Storyline;
  assert.equal(s.parent, { psid: 'parent-9', rel: 'spawn' });
  assert.equal(s.turns.map((t) => [t.src, t.kind ?? null, t.msg]), [
    ['user', null, 'first question'],
    ['agent', null, 'first answer'],
    ['system', 'compaction', 'summary of the work so far'],
    ['user', null, 'second question'],
    ['agent', null, 'second answer'],
  ]);
  assert.equal(s.final_metrics, { total_steps: 5, total_prompt_tokens: 300, total_completion_tokens: 30, total_cached_tokens: 150 });
  assert.equal(calls(s).map((c) => [c.tcid, c.fn, c.args]), [['ws_1', 'web_search', { type: 'search', query: 'rust div_ceil' }]]);
  assert.not.ok(diagnostics.some((d) => d.code === 'tool_call_without_output'), 'a web search has no output item');
  // The abort is kept where it happened (after the compaction), not reported as skipped.
  assert.equal(s.turns[2]?.extra?.events, [{ type: 'turn_aborted', reason: 'interrupted', timestamp: '2026-02-03T04:05:05.000Z' }]);
  assert.not.ok(diagnostics.some((d) => d.message.includes('turn_aborted')));
});

test('agenta: stream errors, turn context and the exec/patch end events are kept, each once', async () => {
  const text = jsonl(
    cxLine('session_meta', { id: 'events-1', cli_version: '0.130.0' }, 0),
    cxLine('turn_context', { cwd: '/w', model: 'gpt-x', effort: 'low', summary: 'auto', user_instructions: 'be terse', turn_id: 't1', current_date: '2026-11-29', timezone: 'Europe/Paris' }, 1),
    cxLine('response_item', { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'fix it' }] }, 1),
    cxLine('response_item', { type: 'function_call', name: 'shell', arguments: '{"command":["make"]}', call_id: 'c1' }, 2),
    // The end event may come before the output item, and a plain output says no exit code.
    cxLine('event_msg', { type: 'exec_command_end', call_id: 'c1', stdout: 'boom', stderr: '', aggregated_output: 'boom', exit_code: 2, duration: { secs: 1, nanos: 500000000 }, formatted_output: 'boom' }, 3),
    cxLine('response_item', { type: 'function_call_output', call_id: 'c1', output: 'boom' }, 3),
    cxLine('response_item', { type: 'custom_tool_call', name: 'apply_patch', call_id: 'p1', input: '*** Begin Patch' }, 4),
    cxLine('response_item', { type: 'custom_tool_call_output', call_id: 'p1', output: 'patch rejected' }, 5),
    cxLine('event_msg', { type: 'patch_apply_end', call_id: 'p1', stdout: '', stderr: 'patch rejected', success: false, changes: {} }, 5),
    cxLine('response_item', { type: 'custom_tool_call', name: 'apply_patch', call_id: 'p2', input: '*** Begin Patch' }, 6),
    cxLine('response_item', { type: 'custom_tool_call_output', call_id: 'p2', output: '{"output":"Success.","metadata":{"exit_code":0,"duration_seconds":0.25}}' }, 7),
    cxLine('event_msg', { type: 'patch_apply_end', call_id: 'p2', stdout: 'Success.', stderr: '', success: true }, 7),
    cxLine('event_msg', { type: 'exec_command_end', call_id: 'user-shell', stdout: 'x', stderr: '', aggregated_output: 'x', exit_code: 0, duration: { secs: 0, nanos: 0 }, formatted_output: 'x' }, 8),
    cxLine('event_msg', { type: 'error', message: 'stream disconnected before completion' }, 9),
  );
  const { docs, diagnostics } = await decode(agenta, memoryFile(text, 'rollout-events.jsonl'));
  const s = docs[0]?.storyline as Storyline;
  assert.equal(prompts(s)[0]?.env, { cwd: '/w', turn_id: 't1', summary: 'auto', user_instructions: 'be terse', current_date: '2026-11-29', timezone: 'Europe/Paris' });
  // Output text is the tool result already; the end events add only the exit code, duration and error flag.
  assert.equal(calls(s).map((c) => [c.tcid, c.response?.exit_code, c.duration_ms, c.result]), [
    ['c1', 2, 1500, 'boom'],
    ['p1', undefined, undefined, 'patch rejected'],
    ['p2', 0, 250, 'Success.'],
  ]);
  assert.equal(results(s).map((r) => r.is_error), [true, true, false]);
  assert.equal(s.turns.at(-1)?.extra?.events, [{ type: 'error', message: 'stream disconnected before completion', timestamp: '2026-02-03T04:05:09.000Z' }]);
  // Only the end event that answers no call is reported as skipped.
  const skipped = diagnostics.filter((d) => d.code === 'record_type_skipped').map((d) => d.message);
  assert.equal(skipped, ['skipped 1 event_msg/exec_command_end (no call) line']);
});

test('agentb-code: api_error and turn_duration system lines are kept on the turn they follow', async () => {
  const text = jsonl(
    ccLine('user', 'u1', { message: { role: 'user', content: 'hello' } }),
    ccLine('system', 'e1', { subtype: 'api_error', level: 'error', error: { status: 529 }, retryInMs: 500, retryAttempt: 1, maxRetries: 10 }),
    ccLine('assistant', 'a1', { message: { id: 'm1', role: 'assistant', content: [{ type: 'text', text: 'hi' }] } }),
    ccLine('system', 'd1', { subtype: 'turn_duration', durationMs: 4200, isMeta: false }),
    ccLine('system', 'l1', { subtype: 'local_command', content: '<local-command-stdout>ok</local-command-stdout>' }),
  );
  const { docs, diagnostics } = await decode(agentbCode, memoryFile(text, 'sess-events.jsonl'));
  const s = docs[0]?.storyline as Storyline;
  const at = '2026-01-02T03:04:05.000Z';
  assert.equal(s.turns.map((t) => t.extra?.events), [
    [{ type: 'system', subtype: 'api_error', uuid: 'e1', timestamp: at, level: 'error', error: { status: 529 }, retryInMs: 500, retryAttempt: 1, maxRetries: 10 }],
    [{ type: 'system', subtype: 'turn_duration', uuid: 'd1', timestamp: at, durationMs: 4200 }],
  ]);
  assert.equal(diagnostics.filter((d) => d.code === 'noise_record_dropped').map((d) => d.message), ['skipped 1 system/local_command line']);
});

test('agenta: the "Exit code: N" header of shell_command and apply_patch outputs gives the exit code', async () => {
  const call = (id: string, second: number) => cxLine('response_item', { type: 'function_call', name: 'shell_command', arguments: '{"command":"make"}', call_id: id }, second);
  const output = (id: string, text: string, second: number) => cxLine('response_item', { type: 'function_call_output', call_id: id, output: text }, second);
  const text = jsonl(
    cxLine('session_meta', { id: 'exit-codes', cli_version: '0.63.0' }, 0),
    cxLine('response_item', { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'build it' }] }, 1),
    call('c1', 2),
    output('c1', 'Exit code: 2\nWall time: 1.5 seconds\nOutput:\nmake: *** [all] Error 2\n', 3),
    call('c2', 4),
    output('c2', 'Exit code: 0\nWall time: 0 seconds\nOutput:\nok', 5),
  );
  const s = (await decode(agenta, memoryFile(text, 'rollout-exit.jsonl'))).docs[0]?.storyline as Storyline;
  assert.equal(calls(s).map((c) => [c.response?.exit_code, c.duration_ms]), [[2, 1500], [0, 0]]);
  assert.equal(results(s).map((r) => r.is_error), [true, false]);
});

test('agentb-code: sidechains without agentId (Claude Code 1.x) split where each one starts, one child per Task call', async () => {
  const side = { isSidechain: true };
  const text = jsonl(
    ccLine('user', 'u1', { message: { role: 'user', content: 'do two things' } }),
    ccLine('assistant', 'a1', { message: { id: 'm1', role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_A', name: 'Task', input: { prompt: 'Do A' } }, { type: 'tool_use', id: 'toolu_B', name: 'Task', input: { prompt: 'Do B' } }] } }),
    ccLine('user', 'sa1', { ...side, parentUuid: null, message: { role: 'user', content: 'Do A' } }),
    ccLine('user', 'sb1', { ...side, parentUuid: null, message: { role: 'user', content: 'Do B' } }),
    ccLine('assistant', 'sa2', { ...side, parentUuid: 'sa1', message: { id: 'ma', role: 'assistant', content: [{ type: 'text', text: 'A done' }] } }),
    ccLine('assistant', 'sb2', { ...side, parentUuid: 'sb1', message: { id: 'mb', role: 'assistant', content: [{ type: 'text', text: 'B done' }] } }),
    ccLine('user', 'u2', { message: { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_A', content: 'A done' }, { type: 'tool_result', tool_use_id: 'toolu_B', content: 'B done' }] } }),
  );
  const [main, ...children] = (await decode(agentbCode, memoryFile(text, 'sess-old.jsonl'))).docs.map((d) => d.storyline);
  assert.equal(children.map((c) => [c.parent?.scid, c.turns.map((t) => t.msg)]), [
    ['toolu_A', ['Do A', 'A done']],
    ['toolu_B', ['Do B', 'B done']],
  ]);
  assert.equal(main?.children, children.map((c) => c.session));
  assert.is(new Set(children.map((c) => c.session)).size, 2);
});

test('detection picks the right format for every session log fixture', () => {
  for (const path of [LEDGER, ATLAS, ATLAS_SUB, join(LETTA, 'claude-code', 'tool-call', 'input.jsonl'), join(LETTA, 'claude-code', 'subagent', 'input.jsonl')]) {
    assert.is(detected(path), 'agentb-code', path);
  }
  for (const path of [CODEX_NEW, CODEX_OLD, join(LETTA, 'codex', 'tool-calls', 'input.jsonl')]) assert.is(detected(path), 'agenta', path);
});

test('the bundled samples decode', async () => {
  const cc = join(PROJECT_TESTDATA, 'samples', 'agentb-code');
  const codex = join(PROJECT_TESTDATA, 'samples', 'agenta');
  const { readdirSync } = await import('node:fs');
  const files = (dir: string): string[] =>
    readdirSync(dir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile() && e.name.endsWith('.jsonl')).map((e) => join(e.parentPath, e.name));
  const ccFiles = files(cc);
  const codexFiles = files(codex);
  assert.ok(ccFiles.length >= 2 && codexFiles.length >= 1);
  for (const path of ccFiles) {
    assert.is(detected(path), 'agentb-code', path);
    const { docs } = await decode(agentbCode, fileAt(path, PROJECT_TESTDATA));
    assert.ok(docs.length >= 1 && docs.every((d) => d.storyline.turns.length > 0), path);
  }
  for (const path of codexFiles) {
    assert.is(detected(path), 'agenta', path);
    const { docs } = await decode(agenta, fileAt(path, PROJECT_TESTDATA));
    assert.ok(docs.length === 1 && agents(docs[0]?.storyline as Storyline).every((t) => t.metrics), path);
  }
});

test.run();
