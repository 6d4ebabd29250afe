/**
 * `trajstore export` with run filters through the real CLI: each filter alone and together, the
 * same runs as `find` for `--match`, and `--where` held to `query`'s read-only rules: injections
 * that try to leave the predicate, statements that write, and unknown columns are refused with
 * exit 2 before anything is written, and the dataset is unchanged afterwards.
 */
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { sandbox } from './helpers/sandbox.js';
import { join } from 'node:path';
import { SHARED_FIXTURES } from './helpers/fixtures.js';

const s = sandbox('export-filters-test-');
const ds = s.path('ds');

test.before(async () => {
  // Four ATIF runs (no run ids) and a Storyline run with a run id and its subagent.
  for (const [from, mode] of [[join(SHARED_FIXTURES, 'persisting', 'atif'), 'create'], [join(SHARED_FIXTURES, 'synthetic', 'storyline'), 'append']] as const) {
    const r = await s.run(['import', '-f', from, '-t', ds, '--mode', mode]);
    assert.is(r.code, 0, r.stderr);
  }
});

const ALL = ['fixture-dialogue_10', 'fixture-multimodal_18', 'fixture-sequential_tools_12', 'fixture-unicode_zh_15', 'incident-triage-0007', 'incident-triage-0007/sub-1'];

/** The trajectory ids of a Storyline export to stdout. */
async function exported(...filters: string[]): Promise<string[]> {
  const r = await s.run(['export', '-f', ds, '-t', '-', '-o', 'storyline', ...filters]);
  assert.is(r.code, 0, `${filters.join(' ')}: ${r.stderr}`);
  return r.stdout
    .split('\n')
    .filter(Boolean)
    .map((line) => (JSON.parse(line) as { session: string }).session)
    .sort();
}

test('identity filters: one flag narrows, its repeats are alternatives, different flags all apply', async () => {
  assert.equal(await exported(), ALL);
  assert.equal(await exported('--document-id', 'run-dialogue_10'), ['fixture-dialogue_10']);
  assert.equal(await exported('--document-id', 'run-dialogue_10', '--document-id', 'traj-incident-0007'), ['fixture-dialogue_10', 'incident-triage-0007']);
  assert.equal(await exported('--run-id', 'nightly-2026-06-11'), ['incident-triage-0007']);
  assert.equal(await exported('--session-id', 'fixture-unicode_zh_15', '--session-id', 'fixture-dialogue_10'), ['fixture-dialogue_10', 'fixture-unicode_zh_15']);
  assert.equal(await exported('--session-id', 'fixture-unicode_zh_15', '--document-id', 'run-dialogue_10'), []);
});

test('--match takes the runs find matches (text, JSON, several --match all required)', async () => {
  for (const matches of [['中文'], ['$.coverage.tools = true'], ['"Turn 5"'], ['deterministic', 'NOT #user(Turn)'], ['nothing-like-this-anywhere']]) {
    const args = matches.flatMap((m) => ['--match', m]);
    const found = await s.run(['find', ds, ...args, '--format', 'json', '--max-results', '1000']);
    assert.is(found.code, 0, found.stderr);
    const sessions = [...new Set((JSON.parse(found.stdout) as { matches: Array<{ session_id: string }> }).matches.map((m) => m.session_id))].sort();
    assert.equal(await exported(...args), sessions, matches.join(' & '));
  }
  assert.equal(await exported('--match', '中文'), ['fixture-unicode_zh_15']);
});

test('--where: a predicate over runs, combined with the other filters', async () => {
  assert.equal(await exported('--where', 'tool_call_count > 1'), ['fixture-multimodal_18', 'fixture-sequential_tools_12']);
  assert.equal(await exported('--where', "json_extract(extra_json, '$.coverage.reasoning') = 1 -- a trailing comment"), ['fixture-unicode_zh_15']);
  assert.equal(await exported('--where', "parent_session_id IS NOT NULL OR (agent_name = 'On-call Agent')"), ['incident-triage-0007', 'incident-triage-0007/sub-1']);
  assert.equal(await exported('--where', 'tool_call_count > 0', '--match', '中文'), ['fixture-unicode_zh_15']);
  assert.equal(await exported('--where', 'tool_call_count = 0', '--match', '中文'), []);
  const none = await s.run(['export', '-f', ds, '-t', '-', '-o', 'atif', '--where', 'step_count > 100']);
  assert.is(none.code, 0);
  assert.is(none.stdout, '');
  assert.match(none.stderr, /no run matched the filters/);
  // A directory target gets one file per selected run.
  const dir = await s.run(['export', '-f', ds, '-t', s.path('picked') + '/', '-o', 'atif', '--session-id', 'fixture-dialogue_10']);
  assert.is(dir.code, 0, dir.stderr);
  assert.is(readdirSync(s.path('picked')).length, 1);
});

test('--where and the other filters refuse bad input with exit 2 and write nothing; the dataset is unchanged', async () => {
  const target = s.path('out.jsonl');
  const cases: Array<[string[], RegExp]> = [
    [['--where', '1) ; DROP TABLE runs; --'], /closes a parenthesis the predicate did not open/],
    [['--where', '1; DROP TABLE runs'], /";" at character 2: one expression, not statements/],
    [['--where', "1) UNION SELECT document_id FROM steps WHERE (1"], /closes a parenthesis/],
    [['--where', '(SELECT count(*) FROM (DELETE FROM runs RETURNING 1)) > 0'], /SQL error: near "DELETE"/],
    [['--where', "agent_name = 'x"], /a string opened at character 14 never ends/],
    [['--where', '1 /* open'], /a comment opened at character 3 never ends/],
    [['--where', '((1)'], /1 parenthesis is never closed/],
    [['--where', 'no_such_column = 1'], /--where "no_such_column = 1": SQL error: no such column: no_such_column/],
    [['--where', '   '], /--where: the predicate is empty/],
    [['--where', 'a', '--where', 'b'], /--where was given 2 times/],
    [['--match', '(disk'], /match/i],
    [['--run-id', ''], /--run-id is empty/],
    [['--timeout', 'soon'], /invalid --timeout "soon"/],
  ];
  for (const [filters, message] of cases) {
    const r = await s.run(['export', '-f', ds, '-t', target, '-o', 'atif', ...filters]);
    assert.is(r.code, 2, `${filters.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message);
    assert.not.ok(existsSync(target), `${filters.join(' ')} left ${target}`);
  }
  assert.equal(readdirSync(s.home).filter((name) => name.startsWith('.out.jsonl')), []);
  const count = await s.run(['query', ds, '--sql', 'SELECT count(*) AS n FROM dataset.runs', '--format', 'csv']);
  assert.is(count.stdout, 'n\n6\n');
});

test('a compact record store takes no run filters', async () => {
  const source = s.path('records.jsonl');
  writeFileSync(source, '{"id": 1}\n{"id": 2}\n');
  const imported = await s.run(['import', '-f', source, '-t', s.path('compact'), '-o', 'compact-jsonl']);
  assert.is(imported.code, 0, imported.stderr);
  const r = await s.run(['export', '-f', s.path('compact'), '-t', '-', '-o', 'compact-jsonl', '--where', '1']);
  assert.is(r.code, 2);
  assert.match(r.stderr, /compact record store: --document-id, --run-id, --session-id, --match and --where select runs of Storyline datasets/);
});

test.run();
