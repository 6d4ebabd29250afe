/**
 * The validation rules of reference/trajectory-formats.md (ATIF §1, ACTF §2, chat-messages §3,
 * Storyline §5.1) at decode time: per rule a document on the good side of it that decodes, and one
 * that breaks it and is refused with exit 2 as `file:line:column at /pointer: reason`, the line and
 * column being where the pointer's value starts in the file. Then what stays lenient, and a few
 * refusals through the real command.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { SourceError } from '../formats/errors.js';
import { locatePointer } from '../formats/common/locate.js';
import { loadFormat, type InputFormat } from '../formats/registry.js';
import { bytesSource, decodeAll, encodeAll, problemsOf, sortKeys, thrown } from './helpers/format-harness.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { sandbox } from './helpers/sandbox.js';

type Doc = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/** A deep copy of `base` changed by `change`. */
const variant = (base: unknown, change: (doc: Doc) => void): Doc => {
  const doc = structuredClone(base) as Doc;
  change(doc);
  return doc;
};

interface Rule {
  rule: string;
  good: unknown;
  bad: unknown;
  pointer: string;
  reason: RegExp;
}

const TOOL = { type: 'tool_use', id: 'u1', name: 'Read', input: { p: 1 } };

const ATIF = {
  schema_version: 'ATIF-v1.7',
  session_id: 's-1',
  agent: { name: 'demo', version: '0.1' },
  steps: [
    { step_id: 1, source: 'user', message: 'list files' },
    {
      step_id: 2,
      source: 'agent',
      message: '',
      tool_calls: [{ tool_call_id: 'c1', function_name: 'bash', arguments: { cmd: 'ls' } }],
      observation: { results: [{ source_call_id: 'c1', content: 'a.txt' }] },
    },
  ],
};
const SUB = { schema_version: 'ATIF-v1.7', trajectory_id: 'sub-1', agent: { name: 'helper', version: '1' }, steps: [{ step_id: 1, source: 'user', message: 'go' }] };
const ref = (r: unknown) => (d: Doc) => void (d.steps[1].observation.results[0].subagent_trajectory_ref = [r]);

const ATIF_RULES: Rule[] = [
  { rule: 'schema_version is ATIF-v1.0 to v1.7', good: variant(ATIF, (d) => (d.schema_version = '1.7')), bad: variant(ATIF, (d) => (d.schema_version = 'ATIF-v2.0')), pointer: '/schema_version', reason: /unsupported ATIF schema_version "ATIF-v2\.0"/ },
  { rule: 'agent is required', good: ATIF, bad: variant(ATIF, (d) => delete d.agent), pointer: '/agent', reason: /needs an "agent" object/ },
  { rule: 'agent.name is required', good: variant(ATIF, (d) => (d.agent.name = '')), bad: variant(ATIF, (d) => delete d.agent.name), pointer: '/agent/name', reason: /agent needs a "name" string/ },
  { rule: 'agent.version is required', good: ATIF, bad: variant(ATIF, (d) => (d.agent.version = 1)), pointer: '/agent/version', reason: /agent needs a "version" string/ },
  {
    rule: 'session_id is required up to v1.6',
    good: variant(ATIF, (d) => delete d.session_id),
    bad: variant(ATIF, (d) => ((d.schema_version = 'ATIF-v1.6'), delete d.session_id)),
    pointer: '/session_id',
    reason: /ATIF-v1\.6 needs a "session_id" string/,
  },
  {
    rule: 'an embedded subagent has a trajectory_id',
    good: variant(ATIF, (d) => (d.subagent_trajectories = [SUB])),
    bad: variant(ATIF, (d) => (d.subagent_trajectories = [variant(SUB, (s) => delete s.trajectory_id)])),
    pointer: '/subagent_trajectories/0/trajectory_id',
    reason: /embedded subagent trajectory needs a "trajectory_id"/,
  },
  {
    rule: 'trajectory ids are unique in the document',
    good: variant(ATIF, (d) => (d.subagent_trajectories = [SUB, { ...SUB, trajectory_id: 'sub-2' }])),
    bad: variant(ATIF, (d) => (d.subagent_trajectories = [SUB, SUB])),
    pointer: '/subagent_trajectories/1/trajectory_id',
    reason: /trajectory_id "sub-1" is used by another trajectory/,
  },
  { rule: 'steps is an array', good: ATIF, bad: variant(ATIF, (d) => (d.steps = {})), pointer: '/steps', reason: /needs a "steps" array/ },
  { rule: 'step_id runs 1, 2, 3... in order', good: ATIF, bad: variant(ATIF, (d) => (d.steps[1].step_id = 3)), pointer: '/steps/1/step_id', reason: /step_id must be 2 .*not 3/ },
  { rule: 'step_id starts at 1', good: ATIF, bad: variant(ATIF, (d) => ((d.steps[0].step_id = 0), (d.steps[1].step_id = 1))), pointer: '/steps/0/step_id', reason: /step_id must be 1 .*not 0/ },
  { rule: 'source is system, user or agent', good: variant(ATIF, (d) => (d.steps[0].source = 'system')), bad: variant(ATIF, (d) => (d.steps[0].source = 'tool')), pointer: '/steps/0/source', reason: /step source must be/ },
  { rule: 'message is required', good: variant(ATIF, (d) => (d.steps[0].message = '')), bad: variant(ATIF, (d) => delete d.steps[0].message), pointer: '/steps/0/message', reason: /a step needs a "message"/ },
  {
    rule: 'message is a string or content parts',
    good: variant(ATIF, (d) => (d.steps[0].message = [{ type: 'text', text: 'hi' }])),
    bad: variant(ATIF, (d) => (d.steps[0].message = 5)),
    pointer: '/steps/0/message',
    reason: /message must be a string or an array of content parts/,
  },
  { rule: 'tool_calls is an array', good: ATIF, bad: variant(ATIF, (d) => (d.steps[1].tool_calls = { c1: {} })), pointer: '/steps/1/tool_calls', reason: /tool_calls must be an array of tool calls/ },
  { rule: 'a tool call has a tool_call_id', good: ATIF, bad: variant(ATIF, (d) => delete d.steps[1].tool_calls[0].tool_call_id), pointer: '/steps/1/tool_calls/0/tool_call_id', reason: /needs a "tool_call_id" string/ },
  { rule: 'a tool call has a function_name', good: ATIF, bad: variant(ATIF, (d) => delete d.steps[1].tool_calls[0].function_name), pointer: '/steps/1/tool_calls/0/function_name', reason: /needs a "function_name" string/ },
  {
    rule: 'a tool call has arguments',
    good: variant(ATIF, (d) => (d.steps[1].tool_calls[0].arguments = {})),
    bad: variant(ATIF, (d) => delete d.steps[1].tool_calls[0].arguments),
    pointer: '/steps/1/tool_calls/0/arguments',
    reason: /needs "arguments"/,
  },
  {
    rule: 'tool_call_id is unique within a step (not across steps)',
    good: variant(ATIF, (d) => d.steps.push({ ...structuredClone(d.steps[1]), step_id: 3 })),
    bad: variant(ATIF, (d) => d.steps[1].tool_calls.push({ tool_call_id: 'c1', function_name: 'cat', arguments: {} })),
    pointer: '/steps/1/tool_calls/1/tool_call_id',
    reason: /tool_call_id "c1" is used by an earlier call of this step/,
  },
  { rule: 'observation is an object', good: ATIF, bad: variant(ATIF, (d) => (d.steps[1].observation = [])), pointer: '/steps/1/observation', reason: /observation must be an object/ },
  { rule: 'observation has results', good: ATIF, bad: variant(ATIF, (d) => (d.steps[1].observation = {})), pointer: '/steps/1/observation/results', reason: /needs a "results" array/ },
  {
    rule: 'source_call_id names a call of its step',
    good: variant(ATIF, (d) => (d.steps[1].observation.results[0].source_call_id = null)),
    bad: variant(ATIF, (d) => (d.steps[1].observation.results[0].source_call_id = 'c9')),
    pointer: '/steps/1/observation/results/0/source_call_id',
    reason: /source_call_id "c9" names no tool call of this step/,
  },
  {
    rule: 'source_call_id does not reach into another step',
    good: ATIF,
    bad: variant(ATIF, (d) => d.steps.push({ step_id: 3, source: 'agent', message: 'again', observation: { results: [{ source_call_id: 'c1', content: 'late' }] } })),
    pointer: '/steps/2/observation/results/0/source_call_id',
    reason: /source_call_id "c1" names no tool call of this step/,
  },
  {
    rule: 'a v1.7 subagent ref has trajectory_id or trajectory_path',
    good: variant(ATIF, ref({ trajectory_path: 'sub.json' })),
    bad: variant(ATIF, ref({ session_id: 's-2' })),
    pointer: '/steps/1/observation/results/0/subagent_trajectory_ref/0',
    reason: /needs a "trajectory_id" or a "trajectory_path"/,
  },
  {
    rule: 'a subagent ref up to v1.6 has session_id',
    good: variant(ATIF, (d) => ((d.schema_version = 'ATIF-v1.6'), ref({ session_id: 's-2' })(d))),
    bad: variant(ATIF, (d) => ((d.schema_version = 'ATIF-v1.6'), ref({ trajectory_id: 't-2' })(d))),
    pointer: '/steps/1/observation/results/0/subagent_trajectory_ref/0/session_id',
    reason: /needs a "session_id" string \(up to ATIF-v1\.6\)/,
  },
];

const ACTF = {
  task_id: 't-1',
  category: 'ops',
  k: 2,
  correct: true,
  attempts_tried: 1,
  solved_at: '1',
  attempts: {
    1: {
      correct: true,
      trajectory: {
        schema_version: 'ACTF_v1.0',
        started_at: '2026-01-01 00:00:00+00:00',
        finished_at: '2026-01-01 00:00:09+00:00',
        steps: [
          { step_id: 1, assistant_content: { content: 'reading', tool_calls: [TOOL] }, tools: [TOOL], observation: [{ tool_use_id: 'u1', content: 'ok' }] },
          { step_id: 2, assistant_content: { content: 'done', tool_calls: [] }, tools: [], observation: [] },
        ],
      },
    },
  },
};
const A = '/attempts/1/trajectory';
const steps = (d: Doc): Doc[] => d.attempts['1'].trajectory.steps;

const ACTF_RULES: Rule[] = [
  { rule: 'task_id is required', good: ACTF, bad: variant(ACTF, (d) => delete d.task_id), pointer: '/task_id', reason: /needs a "task_id" string/ },
  { rule: 'k > 0', good: variant(ACTF, (d) => (d.k = 1)), bad: variant(ACTF, (d) => (d.k = 0)), pointer: '/k', reason: /k must be an integer > 0, not 0/ },
  { rule: 'attempts_tried = the number of attempts', good: ACTF, bad: variant(ACTF, (d) => (d.attempts_tried = 2)), pointer: '/attempts_tried', reason: /attempts_tried is 2, but the document has 1 attempt/ },
  {
    rule: 'attempts_tried <= k',
    good: variant(ACTF, (d) => ((d.attempts['2'] = structuredClone(d.attempts['1'])), (d.attempts_tried = 2))),
    bad: variant(ACTF, (d) => ((d.attempts['2'] = structuredClone(d.attempts['1'])), (d.attempts_tried = 2), (d.k = 1))),
    pointer: '/attempts_tried',
    reason: /attempts_tried 2 is more than k 1/,
  },
  { rule: 'attempts is not empty', good: ACTF, bad: variant(ACTF, (d) => (d.attempts = {})), pointer: '/attempts', reason: /non-empty "attempts" object/ },
  { rule: 'attempt keys are not empty', good: ACTF, bad: variant(ACTF, (d) => ((d.attempts[''] = d.attempts['1']), delete d.attempts['1'])), pointer: '/attempts/', reason: /attempt key must not be empty/ },
  {
    rule: 'every attempt trajectory is ACTF_v1.0 (a raw event array is not a trajectory)',
    good: variant(ACTF, (d) => (d.attempts['1'].trajectory = [{ type: 'session.start' }])),
    bad: variant(ACTF, (d) => (d.attempts['1'].trajectory.schema_version = 'ACTF_v2.0')),
    pointer: `${A}/schema_version`,
    reason: /unsupported ACTF schema_version "ACTF_v2\.0" \(this build reads ACTF_v1\.0\)/,
  },
  { rule: 'a trajectory has steps', good: ACTF, bad: variant(ACTF, (d) => delete d.attempts['1'].trajectory.steps), pointer: `${A}/steps`, reason: /needs a "steps" array/ },
  { rule: 'step_id > 0', good: ACTF, bad: variant(ACTF, (d) => (steps(d)[0]!.step_id = 0)), pointer: `${A}/steps/0/step_id`, reason: /step_id must be an integer > 0; not 0/ },
  {
    rule: 'step_id strictly increases',
    good: variant(ACTF, (d) => (steps(d)[1]!.step_id = 7)),
    bad: variant(ACTF, (d) => (steps(d)[1]!.step_id = 1)),
    pointer: `${A}/steps/1/step_id`,
    reason: /greater than the previous step's 1; not 1/,
  },
  {
    rule: 'tools = assistant_content.tool_calls when both are non-empty',
    good: variant(ACTF, (d) => (steps(d)[0]!.assistant_content.tool_calls = [])),
    bad: variant(ACTF, (d) => (steps(d)[0]!.assistant_content.tool_calls = [{ ...TOOL, input: { p: 2 } }])),
    pointer: `${A}/steps/0/assistant_content/tool_calls`,
    reason: /differs from tools/,
  },
  {
    rule: 'tool ids are unique within a step (not across steps)',
    good: variant(ACTF, (d) => (steps(d)[1]!.tools = [TOOL])),
    bad: variant(ACTF, (d) => ((steps(d)[0]!.tools = [TOOL, TOOL]), (steps(d)[0]!.assistant_content.tool_calls = [TOOL, TOOL]))),
    pointer: `${A}/steps/0/tools/1/id`,
    reason: /tool id "u1" is used by an earlier tool of this step/,
  },
  {
    rule: 'an observation answers a tool of its own step',
    good: variant(ACTF, (d) => (steps(d)[0]!.observation[0].id = 'ignored-when-tool_use_id-is-given')),
    bad: variant(ACTF, (d) => (steps(d)[1]!.observation = [{ tool_use_id: 'u1', content: 'late' }])),
    pointer: `${A}/steps/1/observation/0/tool_use_id`,
    reason: /tool_use_id "u1" names no tool of this step/,
  },
  { rule: 'tools is an array', good: ACTF, bad: variant(ACTF, (d) => (steps(d)[1]!.tools = {})), pointer: `${A}/steps/1/tools`, reason: /tools must be an array of tool calls/ },
  { rule: 'assistant_content is an object', good: ACTF, bad: variant(ACTF, (d) => (steps(d)[1]!.assistant_content = 'done')), pointer: `${A}/steps/1/assistant_content`, reason: /assistant_content must be an object/ },
  { rule: 'observation is an array', good: ACTF, bad: variant(ACTF, (d) => (steps(d)[1]!.observation = {})), pointer: `${A}/steps/1/observation`, reason: /observation must be an array of observations/ },
];

const ROW = { session_id: 's', step_id: 1, run_id: 'r1', messages: [{ role: 'user', content: 'hi' }], response: { role: 'assistant', content: 'hello' } };
const row = (change: (r: Doc) => void) => variant(ROW, change);
const CHAT_RULES: Rule[] = [
  { rule: 'a row is a chat row', good: [ROW], bad: [{ text: 'hi' }], pointer: '/0', reason: /not a chat-messages row/ },
  { rule: 'a per-call row has a session_id', good: [ROW], bad: [ROW, row((r) => delete r.session_id)], pointer: '/1/session_id', reason: /needs a "session_id" string/ },
  { rule: 'step_id > 0', good: [ROW], bad: [row((r) => (r.step_id = 0))], pointer: '/0/step_id', reason: /step_id must be an integer > 0, not 0/ },
  { rule: 'step_id is required', good: [ROW], bad: [ROW, row((r) => delete r.step_id)], pointer: '/1/step_id', reason: /step_id must be an integer > 0, not undefined/ },
  { rule: 'step_id is unique per session', good: [ROW, row((r) => (r.session_id = 't'))], bad: [ROW, ROW], pointer: '/1/step_id', reason: /step_id 1 appears twice in session "s"/ },
  {
    rule: 'one run_id per session',
    good: [ROW, row((r) => ((r.step_id = 2), delete r.run_id)), row((r) => ((r.session_id = 't'), (r.run_id = 'r2')))],
    bad: [ROW, row((r) => ((r.step_id = 2), (r.run_id = 'r2')))],
    pointer: '/1/run_id',
    reason: /session "s" has two run_ids, "r1" and "r2"/,
  },
  { rule: 'messages are objects', good: { messages: [{ role: 'user', content: 'hi' }] }, bad: { messages: ['hi'] }, pointer: '/messages/0', reason: /a chat message must be a JSON object/ },
  {
    rule: 'a message has a role (unknown roles are kept)',
    good: { messages: [{ role: 'critic', content: 'hi' }] },
    bad: { id: 'x', messages: [{ content: 'hi' }] },
    pointer: '/messages/0/role',
    reason: /a chat message needs a "role" string/,
  },
  {
    rule: 'conversations of {role, content} follow the message rules',
    good: { conversations: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }] },
    bad: [{ conversations: [{ role: 'user', content: 'hi' }, { content: 'no role' }] }],
    pointer: '/0/conversations/1/role',
    reason: /needs a "role" string/,
  },
];

const STORYLINE = {
  schema_version: 'storyline/v1',
  session: 's',
  agent: { id: 'a' },
  turns: [
    { id: 1, src: 'user', msg: 'hi' },
    { id: 2, src: 'agent', msg: '', tool_calls: [{ tcid: 'c1', fn: 'ls', args: {} }], observation: { results: [{ source_call_id: 'c1', content: 'x' }] } },
  ],
};
const STORYLINE_RULES: Rule[] = [
  { rule: 'schema_version is storyline/v1', good: STORYLINE, bad: variant(STORYLINE, (d) => (d.schema_version = 'storyline/v2')), pointer: '/schema_version', reason: /unsupported schema_version "storyline\/v2"/ },
  { rule: 'session is required', good: STORYLINE, bad: variant(STORYLINE, (d) => delete d.session), pointer: '/session', reason: /Expected required property/ },
  { rule: 'objects are closed', good: variant(STORYLINE, (d) => (d.extra = { any: 1 })), bad: variant(STORYLINE, (d) => (d.turns[0].bogus = 1)), pointer: '/turns/0/bogus', reason: /Unexpected property/ },
  { rule: 'a turn source is system, user or agent', good: STORYLINE, bad: variant(STORYLINE, (d) => (d.turns[0].src = 'tool')), pointer: '/turns/0/src', reason: /Expected union value/ },
  { rule: 'turn ids are unique', good: STORYLINE, bad: variant(STORYLINE, (d) => (d.turns[1].id = 1)), pointer: '/turns/1/id', reason: /duplicate turn id 1/ },
  {
    rule: 'tcid is unique in the document',
    good: STORYLINE,
    bad: variant(STORYLINE, (d) => d.turns.push({ id: 3, src: 'agent', msg: '', tool_calls: [{ tcid: 'c1', fn: 'ls', args: {} }] })),
    pointer: '/turns/2/tool_calls/0/tcid',
    reason: /duplicate tool call id "c1"/,
  },
  {
    rule: 'a source_call_id names a call of the document',
    good: STORYLINE,
    bad: variant(STORYLINE, (d) => (d.turns[1].observation.results[0].source_call_id = 'c9')),
    pointer: '/turns/1/observation/results/0/source_call_id',
    reason: /no tool call has id "c9"/,
  },
];

const RULES: Array<[InputFormat, Rule[]]> = [
  ['atif', ATIF_RULES],
  ['actf', ACTF_RULES],
  ['chat-messages', CHAT_RULES],
  ['storyline', STORYLINE_RULES],
];

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');

for (const [name, rules] of RULES) {
  for (const { rule, good, bad, pointer, reason } of rules) {
    test(`${name}: ${rule}`, async () => {
      const format = await loadFormat(name);
      const decoded = await decodeAll(format, bytesSource(JSON.stringify(good, null, 2), 'good.json'));
      assert.ok(decoded.storylines.length > 0);
      assert.equal(problemsOf(decoded.storylines), []);

      const text = JSON.stringify(bad, null, 2);
      const error = await thrown(() => decodeAll(format, bytesSource(text, 'bad.json')));
      assert.instance(error, SourceError, error.message);
      assert.is((error as SourceError).exitCode, 2);
      const { line, column } = locatePointer(text, pointer);
      assert.match(error.message, new RegExp(`^bad\\.json:${line}:${column} at ${escape(pointer)}: `), error.message);
      assert.match(error.message, reason);
    });
  }
}

test('JSONL: the line of the document and the column of the pointer within it', async () => {
  const lines = `${JSON.stringify(ATIF)}\n\n${JSON.stringify(variant(ATIF, (d) => (d.steps[1].step_id = 5)))}\n`;
  const atif = await loadFormat('atif');
  const error = await thrown(() => decodeAll(atif, bytesSource(lines, 'two.jsonl')));
  const column = JSON.stringify(ATIF).indexOf('"step_id":2') + '"step_id":'.length + 1;
  assert.is(error.message, `two.jsonl:3:${column} at /steps/1/step_id: step_id must be 2 (steps are numbered 1, 2, 3... in order), not 5`);
  // Per-call rows on lines of their own are decoded together at the end; the problem still names its row's line.
  const rows = [ROW, row((r) => ((r.step_id = 2), (r.run_id = 'r2')))].map((r) => JSON.stringify(r)).join('\n');
  const chat = await loadFormat('chat-messages');
  const run = await thrown(() => decodeAll(chat, bytesSource(rows, 'rows.jsonl')));
  assert.match(run.message, new RegExp(`^rows\\.jsonl:2:${JSON.stringify(ROW).indexOf('"run_id"') + '"run_id":'.length + 1} at /run_id: session "s" has two run_ids`));
});

test('kept leniently: unknown keys, agent-only fields on other steps, non-object arguments, mistyped values', async () => {
  const atif = await loadFormat('atif');
  const lenient = variant(ATIF, (d) => {
    d.vendor = { k: 1 };
    d.steps[0].model_name = 'misplaced';
    d.steps[0].timestamp = { not: 'a timestamp' };
    d.steps[1].tool_calls[0].arguments = ['ls', '-la'];
    d.steps[1].llm_call_count = -1;
  });
  const { storylines, diagnostics } = await decodeAll(atif, bytesSource(JSON.stringify(lenient), 'lenient.json'));
  assert.equal(problemsOf(storylines), []);
  const codes = diagnostics.map((d) => d.code).sort();
  assert.equal(codes, ['atif_agent_only_field', 'atif_value_kept', 'atif_value_kept', 'tool_arguments_not_object']);
  const [encoded] = await encodeAll(atif, storylines);
  assert.equal(sortKeys(encoded!.value), sortKeys(lenient));

  // ACTF: outcome keys of any type and null/{} trajectories of failed attempts.
  const actf = await loadFormat('actf');
  const odd = variant(ACTF, (d) => {
    d.category = 2;
    d.solved_at = 1714000000;
    d.k = 3;
    d.attempts_tried = 3;
    d.attempts['2'] = { correct: 'no', trajectory: null };
    d.attempts['3'] = { correct: false, trajectory: {} };
  });
  const decoded = await decodeAll(actf, bytesSource(JSON.stringify(odd), 'odd.actf.json'));
  assert.equal(decoded.storylines.map((s) => s.turns.length), [2, 0, 0]);
  const [again] = await encodeAll(actf, decoded.storylines);
  assert.equal(sortKeys(again!.value), sortKeys(odd));
});

test('through the command: exit 2 naming file, line, column and pointer; nothing is left behind', async () => {
  const s = sandbox('format-validation');
  mkdirSync(s.path('in'));
  const cases: Array<[string, unknown, RegExp]> = [
    ['steps.atif.json', ATIF_RULES.find((r) => r.pointer === '/steps/1/step_id')!.bad, /steps\.atif\.json:\d+:\d+ at \/steps\/1\/step_id: step_id must be 2/],
    ['tried.actf.json', ACTF_RULES.find((r) => r.pointer === '/attempts_tried')!.bad, /tried\.actf\.json:\d+:\d+ at \/attempts_tried: attempts_tried is 2/],
    ['calls.json', CHAT_RULES.find((r) => r.rule === 'one run_id per session')!.bad, /calls\.json:\d+:\d+ at \/1\/run_id: session "s" has two run_ids/],
    ['dup.storyline.json', STORYLINE_RULES.find((r) => r.rule === 'turn ids are unique')!.bad, /dup\.storyline\.json:\d+:\d+ at \/turns\/1\/id: duplicate turn id 1/],
  ];
  for (const [name, doc, expected] of cases) {
    writeFileSync(s.path('in', name), JSON.stringify(doc, null, 2));
    const r = await s.run(['import', '-f', s.path('in', name), '-t', s.path(`ds-${name}`)]);
    assert.is(r.code, 2, `${name}: ${r.stderr}`);
    assert.match(r.stderr, expected);
    assert.not.ok(existsSync(s.path(`ds-${name}`)), `${name}: nothing left behind`);
  }
});

test('-i FORMAT on input that holds none of its documents exits 2 saying what was expected, once; no dataset is made', async () => {
  const s = sandbox('format-validation');
  mkdirSync(s.path('in'));
  writeFileSync(s.path('in', 'blank.jsonl'), '\n\n');
  writeFileSync(s.path('in', 'empty.json'), '[]');
  const chat = `${SHARED_FIXTURES}/synthetic/chat-messages/conversations.jsonl`;
  const codex = `${SHARED_FIXTURES}/synthetic/codex`;
  const cases: Array<[string, string, RegExp]> = [
    ['storyline', s.path('in', 'blank.jsonl'), /blank\.jsonl: no storyline document; expected Storyline documents \(JSON objects with "schema_version": "storyline\/v1"/],
    ['atif', s.path('in', 'empty.json'), /empty\.json: an empty JSON array holds no ATIF trajectory/],
    ['actf', s.path('in', 'empty.json'), /empty\.json: no actf document; expected ACTF task documents/],
    ['chat-messages', s.path('in', 'empty.json'), /empty\.json: an empty JSON array holds no chat rows/],
    ['agenta', chat, /conversations\.jsonl: no agenta document; expected Codex CLI rollout lines/],
    ['agentb-code', codex, /synthetic\/codex \(2 files\): no agentb-code document; expected Claude Code session lines/],
  ];
  for (const [format, from, expected] of cases) {
    const r = await s.run(['import', '-f', from, '-t', s.path(`ds-${format}`), '-i', format]);
    assert.is(r.code, 2, `${format}: ${r.stderr}`);
    assert.match(r.stderr, expected, format);
    assert.not.match(r.stderr, /^warn: /m, `${format}: the error alone says it`);
    assert.not.ok(existsSync(s.path(`ds-${format}`)), `${format}: no dataset`);
  }
});

test('a file without documents of the format, beside files with some, is a warning (once) and the others are imported', async () => {
  const s = sandbox('format-validation');
  mkdirSync(s.path('in'));
  writeFileSync(s.path('in', 'blank.jsonl'), '\n\n');
  writeFileSync(s.path('in', 'one.storyline.json'), JSON.stringify({ schema_version: 'storyline/v1', session: 's', agent: { id: 'a' }, turns: [{ id: 1, src: 'user', msg: 'hi' }] }));
  const r = await s.run(['import', '-f', s.path('in'), '-t', s.path('ds'), '-i', 'storyline']);
  assert.is(r.code, 0, r.stderr);
  assert.is(r.stderr, 'warn: blank.jsonl: no storyline documents in this file\n');
});

test.run();
