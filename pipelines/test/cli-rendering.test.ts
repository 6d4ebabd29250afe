/**
 * How trajstore prints rows, as a user at a terminal or a program at a pipe sees it: every command
 * that prints rows takes every --format; NULL is NULL in tables and an empty field in CSV; tables
 * fit the terminal (clipped with an ellipsis) unless --wide or not on a terminal; `query --output`
 * never replaces a file without --overwrite; an index rebuild shows its progress on a terminal.
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool } from '../../lib/testing/run-tool.js';
import { scratchDir } from '../../lib/testing/scratch.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { writeLargeDataset } from './helpers/search-dataset.js';
import { hasScript, trajstoreOnTerminal } from './helpers/terminal.js';

const home = scratchDir('cli-rendering');
const env = { HOME: home, XDG_CONFIG_HOME: join(home, 'config'), XDG_DATA_HOME: join(home, 'data'), XDG_CACHE_HOME: join(home, 'cache') };
const dataset = join(home, 'ds');
const trajstore = (args: string[]) => runTool('trajstore', args, { env, cwd: home });

/** A CSV line split into fields (no quoted commas in these tests' first lines). */
const csvHeader = (text: string): string[] => (text.split('\n')[0] ?? '').split(',');

test.before(async () => {
  const r = await trajstore(['import', '-f', join(SHARED_FIXTURES, 'persisting', 'atif'), '-t', dataset]);
  assert.is(r.code, 0, r.stderr);
});

const ROW_COMMANDS: string[][] = [
  ['list', dataset],
  ['stats', dataset],
  ['stats', 'overview', dataset],
  ['stats', 'agents', dataset],
  ['stats', 'models', dataset],
  ['stats', 'tools', dataset],
  ['find', dataset, '--match', 'fixture'],
  ['query', dataset, '--sql', 'SELECT document_id, step_count FROM dataset.runs'],
  ['dataset', 'list'],
  ['dataset', 'show', 'agentb'],
];

test('every command that prints rows takes table, json, jsonl and csv', async () => {
  for (const command of ROW_COMMANDS) {
    const what = command.join(' ');
    const table = await trajstore([...command, '--format', 'table']);
    assert.is(table.code, 0, `${what}: ${table.stderr}`);
    assert.ok(table.stdout.length > 0, what);
    const json = await trajstore([...command, '--format', 'json']);
    assert.is(json.code, 0, `${what}: ${json.stderr}`);
    JSON.parse(json.stdout);
    const jsonl = await trajstore([...command, '--format', 'jsonl']);
    assert.is(jsonl.code, 0, `${what}: ${jsonl.stderr}`);
    const lines = jsonl.stdout.trimEnd().split('\n');
    assert.ok(lines.length > 0, what);
    for (const line of lines) assert.type(JSON.parse(line), 'object', what);
    const csv = await trajstore([...command, '--format', 'csv']);
    assert.is(csv.code, 0, `${what}: ${csv.stderr}`);
    assert.equal(csvHeader(csv.stdout), Object.keys(JSON.parse(lines[0] ?? '{}') as object), `${what}: the CSV header names the JSONL keys`);
  }
  const imported = await trajstore(['import', '-f', join(SHARED_FIXTURES, 'persisting', 'atif'), '-t', join(home, 'ds-csv'), '--format', 'csv']);
  assert.is(imported.code, 0, imported.stderr);
  assert.equal(csvHeader(imported.stdout), ['format', 'files', 'runs', 'steps', 'tool_calls', 'prompt_tokens', 'completion_tokens', 'cached_tokens']);
});

test('NULL is NULL in a table, null in JSON, and an empty field in CSV, where an empty string is ""', async () => {
  const sql = "SELECT NULL AS absent, '' AS empty, 'x' AS text";
  const table = await trajstore(['query', dataset, '--sql', sql]);
  assert.match(table.stdout, /^ABSENT\s+EMPTY\s+TEXT\nNULL\s+x\n/);
  const csv = await trajstore(['query', dataset, '--sql', sql, '--format', 'csv']);
  assert.is(csv.stdout, 'absent,empty,text\n,"",x\n');
  const json = await trajstore(['query', dataset, '--sql', sql, '--format', 'json']);
  assert.equal(JSON.parse(json.stdout), [{ absent: null, empty: '', text: 'x' }]);
});

test('query --output never replaces a file without --overwrite', async () => {
  const out = join(home, 'out.csv');
  writeFileSync(out, 'keep me\n');
  const refused = await trajstore(['query', dataset, '--sql', 'SELECT 1 AS one', '--format', 'csv', '--output', out]);
  assert.is(refused.code, 4, refused.stderr);
  assert.match(refused.stderr, '--output');
  assert.match(refused.stderr, '--overwrite');
  assert.is(readFileSync(out, 'utf8'), 'keep me\n');
  const replaced = await trajstore(['query', dataset, '--sql', 'SELECT 1 AS one', '--format', 'csv', '--output', out, '--overwrite']);
  assert.is(replaced.code, 0, replaced.stderr);
  assert.is(readFileSync(out, 'utf8'), 'one\n1\n');
});

const onTerminal = hasScript ? test : test.skip;
if (!hasScript) process.stderr.write('util-linux `script` (a pseudo-terminal) is not installed, skipping the terminal tests\n');

const LONG = "SELECT 'short' AS name, printf('%.200c', 'x') AS long, 42 AS n";

onTerminal('on a terminal a table fits its width, long cells clipped with an ellipsis; --wide and pipes get whole cells', async () => {
  const fitted = await trajstoreOnTerminal(['query', dataset, '--sql', LONG], '', env, 60);
  assert.is(fitted.code, 0, fitted.output);
  const lines = fitted.output.replaceAll('\r', '').trimEnd().split('\n');
  for (const line of lines) assert.ok([...line].length <= 60, `${[...line].length} columns: ${line}`);
  assert.match(fitted.output, '…');
  assert.match(fitted.output, /42/);
  const wide = await trajstoreOnTerminal(['query', dataset, '--sql', LONG, '--wide'], '', env, 60);
  assert.match(wide.output, 'x'.repeat(200));
  const piped = await trajstore(['query', dataset, '--sql', LONG]);
  assert.match(piped.stdout, 'x'.repeat(200));
  assert.not.match(piped.stdout, '…');
});

onTerminal('an index rebuilt by a read command shows its progress on a terminal, and nowhere else', async () => {
  // Big enough that the rebuild outlasts the first redraw of the progress line.
  const big = await writeLargeDataset(200, 100);
  try {
    rmSync(join(big, 'index.sqlite'));
    const shown = await trajstoreOnTerminal(['stats', big], '', env, 200);
    assert.is(shown.code, 0, shown.output);
    assert.match(shown.output, /rebuilding the index of snapshot \w+: [\d,]+ \/ [\d,]+ rows \(\d+%\)/);
    rmSync(join(big, 'index.sqlite'));
    const piped = await trajstore(['stats', big]);
    assert.is(piped.code, 0, piped.stderr);
    assert.is(piped.stderr, '');
  } finally {
    rmSync(dirname(big), { recursive: true, force: true });
  }
});

test.run();
