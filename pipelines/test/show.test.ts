/**
 * `trajstore show` through the real CLI: the transcript of a hand-made run (roles, reasoning, tool
 * calls and results, tokens, cost, timings) in text, Markdown and JSON; clipping to the terminal's
 * width; the pager on a pseudo-terminal; and every bad input with its exit code.
 */
import { chmodSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { hasScript, trajstoreOnTerminal } from './helpers/terminal.js';
import { sandbox } from './helpers/sandbox.js';
import { SAMPLE_RUNS, writeSampleDataset, type RunSpec } from './helpers/search-dataset.js';

const s = sandbox('show-test-');
let ds = '';

const LONG_RESULT = Array.from({ length: 40 }, (_, i) => `line ${i} ${'w'.repeat(200)}`).join('\n');
const RUNS: RunSpec[] = [
  ...SAMPLE_RUNS,
  {
    document_id: 'doc-long',
    run_id: 'run-1', // shared with doc-a: --run-id run-1 is ambiguous
    session_id: 's-long',
    source_path: 'c/long.json',
    steps: [
      { source: 'user', message: 'print the log \x1b[31mred\x1b[0m please \u009d52;c;AA==\u0007', timestamp: '2026-05-03T08:00:00.000Z' },
      { source: 'agent', message: 'here it is', timestamp: '2026-05-03T08:00:03.500Z', tokens: { prompt: 2000, completion: 12, cached: 0 }, tools: [{ name: 'cat_log', result: LONG_RESULT }] },
    ],
  },
  { document_id: 'child-1', session_id: 's-child', source_path: 'b/child.json', agent_name: 'sub', steps: [{ source: 'user', message: 'sub task' }] },
];

test.before(async () => {
  ds = await writeSampleDataset(RUNS);
});

test('text: roles, reasoning, tool calls with results, tokens and timings; no ANSI off a terminal', async () => {
  const r = await s.run(['show', ds, '--document-id', 'doc-a']);
  assert.is(r.code, 0, r.stderr);
  for (const expected of ['run doc-a', 'run id run-1', 'session s-a', 'agent ops-bot', 'model gpt-x', '3 steps', '1 tool call', '── 1 · system', '── 2 · user', '── 3 · agent', 'reasoning:', 'maybe logs fill the disk', '→ bash', '← result', 'Filesystem 100% used', '120 in (100 cached) / 30 out', '(+1.0 s)', 'Café Noël (喫茶店コーヒー)']) {
    assert.ok(r.stdout.includes(expected), `missing ${JSON.stringify(expected)} in\n${r.stdout}`);
  }
  assert.not.ok(r.stdout.includes('\x1b'), 'no escape sequences when stdout is not a terminal');
  // The tool's result is in the call; the step's observation (the same text) is not printed twice.
  assert.is(r.stdout.split('Filesystem 100% used').length - 1, 1);
});

test('--run-id finds the run; an error call is marked', async () => {
  const r = await s.run(['show', ds, '--run-id', 'run-2']);
  assert.is(r.code, 0, r.stderr);
  assert.ok(r.stdout.includes('run doc-b'));
  assert.match(r.stdout, /→ read_file \S+ \(error\)/);
  assert.ok(r.stdout.includes('请帮我检查服务器日志'));
});

test('long tool results are clipped (lines and width) unless --full; control characters never reach the output', async () => {
  const clipped = await s.run(['show', ds, '--document-id', 'doc-long']);
  assert.is(clipped.code, 0, clipped.stderr);
  assert.ok(clipped.stdout.includes('… 28 more lines (--full shows all)'), clipped.stdout);
  assert.not.ok(clipped.stdout.includes('line 12 '));
  for (const line of clipped.stdout.split('\n')) assert.ok(line.length <= 120, `a line wider than 120 columns: ${line.length}`);
  assert.not.ok(clipped.stdout.includes('\x1b'));
  assert.ok(clipped.stdout.includes('print the log \ufffd[31mred\ufffd[0m please \ufffd52;c;AA==\ufffd'));
  const fewer = await s.run(['show', ds, '--document-id', 'doc-long', '--max-lines', '3']);
  assert.ok(fewer.stdout.includes('… 37 more lines'));
  const full = await s.run(['show', ds, '--document-id', 'doc-long', '--full']);
  assert.ok(full.stdout.includes(`line 39 ${'w'.repeat(200)}`));
  assert.not.ok(full.stdout.includes('more lines'));
});

test('markdown: headings, reasoning quoted, calls in fences that their content cannot close', async () => {
  const r = await s.run(['show', ds, '--document-id', 'doc-a', '--format', 'markdown']);
  assert.is(r.code, 0, r.stderr);
  assert.ok(r.stdout.startsWith('# Run doc-a\n'));
  assert.ok(r.stdout.includes('## 3 · agent'));
  assert.ok(r.stdout.includes('> maybe logs fill the disk'));
  assert.match(r.stdout, /\*\*bash\*\* `doc-a-2-0`\n\n```json\n\{\}\n```\n\nResult:\n\n```\nFilesystem 100% used\n```/);
});

test('json: the whole transcript for programs, with subagents linked from their parent', async () => {
  const r = await s.run(['show', ds, '--document-id', 'doc-b', '--format', 'json']);
  assert.is(r.code, 0, r.stderr);
  const doc = JSON.parse(r.stdout) as { run: { document_id: string; step_count: number }; steps: Array<{ source: string; tool_calls: Array<{ function_name: string; result: unknown; is_error: boolean }> }>; snapshot_id: string };
  assert.is(doc.run.document_id, 'doc-b');
  assert.is(doc.steps.length, 3);
  assert.equal(doc.steps[1]?.tool_calls.map((c) => [c.function_name, c.is_error]), [['read_file', true], ['bash', false]]);
  assert.is(doc.steps[1]?.tool_calls[1]?.result, 'y'.repeat(30));
  assert.match(doc.snapshot_id, /^[0-9a-f]+$/);
});

test('bad input: no or both keys, unknown run, shared run id, bad --format, missing dataset', async () => {
  const cases: Array<[string[], number, RegExp]> = [
    [['show', ds], 2, /exactly one of --document-id ID or --run-id ID/],
    [['show', ds, '--document-id', 'doc-a', '--run-id', 'run-2'], 2, /exactly one of/],
    [['show', ds, '--document-id', 'nope'], 3, /--document-id nope: no such run/],
    [['show', ds, '--run-id', 'nope'], 3, /--run-id nope: no such run/],
    [['show', ds, '--run-id', 'run-1'], 2, /--run-id run-1: 2 runs have this run id \(documents doc-a, doc-long\)/],
    [['show', ds, '--document-id', 'doc-a', '--format', 'html'], 2, /invalid --format "html"/],
    [['show', ds, '--document-id', 'doc-a', '--max-lines', '0'], 2, /invalid --max-lines "0"/],
    [['show', s.path('nowhere'), '--document-id', 'doc-a'], 3, /nowhere/],
  ];
  for (const [args, code, message] of cases) {
    const r = await s.run(args);
    assert.is(r.code, code, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message);
    assert.is(r.stdout, '');
  }
});

test('on a terminal: paged through $PAGER with colours, clipped to the terminal width; --no-pager prints directly', async () => {
  if (!hasScript) return console.log('  (skipped: util-linux `script` is not installed)');
  const seen = s.path('paged.txt');
  const pager = s.path('pager.sh');
  writeFileSync(pager, `#!/bin/sh\necho "LESS=$LESS" > '${seen}'\ncat >> '${seen}'\n`);
  chmodSync(pager, 0o755);
  // The test runner sets NO_COLOR for its own output; a person's terminal has it unset.
  const r = await trajstoreOnTerminal(['show', ds, '--document-id', 'doc-long'], '', { ...s.env, PAGER: pager, NO_COLOR: '' }, 70);
  assert.is(r.code, 0, r.output);
  const paged = readFileSync(seen, 'utf8');
  assert.ok(paged.startsWith('LESS=FRX\n'), paged.slice(0, 50));
  assert.ok(paged.includes('\x1b[1mrun doc-long'), 'bold heading on a terminal');
  const plain = paged.replace(/\x1b\[[0-9;]*m/g, '');
  const resultLines = plain.split('\n').filter((l) => l.startsWith('    line '));
  assert.is(resultLines.length, 12);
  for (const line of resultLines) assert.ok(line.length <= 70 && line.endsWith('…'), line);
  assert.not.ok(r.output.includes('run doc-long'), 'the text went to the pager, not the terminal');

  const direct = await trajstoreOnTerminal(['show', ds, '--document-id', 'doc-a', '--no-pager'], '', { ...s.env, PAGER: pager, NO_COLOR: '1' }, 70);
  assert.is(direct.code, 0, direct.output);
  assert.ok(direct.output.includes('run doc-a'));
  assert.not.ok(direct.output.includes('\x1b[1m'), 'NO_COLOR turns colours off');
  // A pager that is not installed: the text is still shown.
  const missing = await trajstoreOnTerminal(['show', ds, '--document-id', 'doc-a'], '', { ...s.env, PAGER: join(s.home, 'no-such-pager') }, 70);
  assert.is(missing.code, 0, missing.output);
  assert.ok(missing.output.includes('run doc-a'));
});

test.run();
