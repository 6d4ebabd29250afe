/**
 * Control characters in the data (a model id, a document id, a file name) never reach a terminal
 * raw through trajstore: diagnostics on stderr and table cells show them escaped (`\x1b`, `\x9b`),
 * while JSON keeps the data as it is.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { sandbox } from './helpers/sandbox.js';

const s = sandbox('control-characters');

// An OSC 52 clipboard write, a screen clear, and the 8-bit CSI (U+009B) a terminal also acts on.
const ATTACK = '\x1b]52;c;ZWNobw==\x07\x1b[2J\u009b31m';
const SHOWN = '\\x1b]52;c;ZWNobw==\\x07\\x1b[2J\\x9b31m';
/** C0 controls but the line break and tab of the output itself, DEL and C1. */
const RAW_CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/;

const storyline = (i: number) => ({
  schema_version: 'storyline/v1',
  session: `s${i}${ATTACK}`,
  trajectory: `t${i}${ATTACK}`,
  run: 'R',
  agent: { id: 'ag', model: `model${ATTACK}` },
  turns: [
    { id: 1, src: 'user', msg: 'hello' },
    { id: 2, src: 'agent', msg: 'yo', model: `model${ATTACK}`, metrics: { prompt_tokens: 10, completion_tokens: 5 } },
  ],
});

test.before(async () => {
  mkdirSync(s.path('src'));
  for (const i of [0, 1]) writeFileSync(s.path('src', `r${i}.storyline.json`), JSON.stringify(storyline(i)));
  const r = await s.run(['import', '-f', s.path('src'), '-t', s.path('ds')]);
  assert.is(r.code, 0, r.stderr);
});

test("stats' warning about an unpriced model shows the model id escaped", async () => {
  for (const command of ['overview', 'agents', 'models']) {
    const r = await s.run(['stats', command, s.path('ds')]);
    assert.is(r.code, 0, r.stderr);
    assert.match(r.stderr, `warn: no price for model${SHOWN}`);
    assert.not.match(r.stderr, RAW_CONTROL, command);
    assert.not.match(r.stdout, RAW_CONTROL, command);
  }
});

test("show's error about an ambiguous run id shows the document ids escaped", async () => {
  const r = await s.run(['show', s.path('ds'), '--run-id', 'R']);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, `t0${SHOWN}, t1${SHOWN}`);
  assert.not.match(r.stderr, RAW_CONTROL);
});

test('tables show C0 and C1 controls escaped; JSON keeps the ids as they are', async () => {
  const sql = 'SELECT document_id FROM runs ORDER BY document_id';
  const table = await s.run(['query', s.path('ds'), '--sql', sql]);
  assert.is(table.code, 0, table.stderr);
  assert.match(table.stdout, `t0${SHOWN}`);
  assert.not.match(table.stdout, RAW_CONTROL);
  const json = await s.run(['query', s.path('ds'), '--sql', sql, '--format', 'json']);
  assert.equal(JSON.parse(json.stdout), [{ document_id: `t0${ATTACK}` }, { document_id: `t1${ATTACK}` }]);
});

test('JSON output writes DEL and C1 controls as \\u escapes (a terminal acts on a raw U+009B), and parses back to the same text', async () => {
  const runs = [
    ['query', s.path('ds'), '--sql', 'SELECT document_id FROM runs ORDER BY document_id', '--format', 'json'],
    ['query', s.path('ds'), '--sql', 'SELECT document_id FROM runs ORDER BY document_id', '--format', 'jsonl'],
    ['find', s.path('ds'), '--document-id', `t0${ATTACK}`, '--format', 'json'],
    ['show', s.path('ds'), '--document-id', `t0${ATTACK}`, '--format', 'json'],
    ['stats', 'models', s.path('ds'), '--format', 'json'],
  ];
  for (const args of runs) {
    const r = await s.run(args);
    assert.is(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
    assert.not.match(r.stdout, /[\u007f-\u009f]/, args.join(' '));
    assert.match(r.stdout, '\\u009b31m', args.join(' '));
    const values = args.includes('jsonl') ? r.stdout.trim().split('\n').map((line) => JSON.parse(line) as unknown) : JSON.parse(r.stdout);
    assert.match(JSON.stringify(values), JSON.stringify(ATTACK).slice(1, -1), `${args.join(' ')}: the text is kept`);
  }
});

test("onboard's command lines quote every control (C1 too) so that bash reads back the exact id", async () => {
  const r = await s.run(['onboard', 'show', s.path('ds'), '--no-pause']);
  assert.is(r.code, 0, r.stderr);
  const line = r.stdout.split('\n').find((l) => l.startsWith('$ trajstore show '));
  assert.ok(line, r.stdout);
  assert.not.match(line, RAW_CONTROL);
  const quoted = /--document-id (\$'.*') --no-pager$/.exec(line)?.[1];
  assert.ok(quoted, line);
  const echoed = spawnSync('bash', ['-c', `printf %s ${quoted}`], { encoding: 'utf8', env: { ...process.env, LC_ALL: 'C.UTF-8' } });
  assert.is(echoed.status, 0, echoed.stderr);
  assert.ok([`t0${ATTACK}`, `t1${ATTACK}`].includes(echoed.stdout), JSON.stringify(echoed.stdout));
});

test("import's detection lines and errors show a file name's controls escaped", async () => {
  mkdirSync(s.path('named'));
  writeFileSync(s.path('named', `a${ATTACK}.storyline.json`), JSON.stringify(storyline(2)));
  const detected = await s.run(['--log-level', 'info', 'import', '-f', s.path('named'), '-t', s.path('ds-named')]);
  assert.is(detected.code, 0, detected.stderr);
  assert.match(detected.stderr, `info: a${SHOWN}.storyline.json: detected storyline`);
  assert.not.match(detected.stderr, RAW_CONTROL);

  writeFileSync(s.path('named', `b${ATTACK}.json`), '{bad');
  const refused = await s.run(['import', '-f', s.path('named'), '-t', s.path('ds-bad')]);
  assert.is(refused.code, 2, refused.stderr);
  assert.match(refused.stderr, `trajstore: error: b${SHOWN}.json:1`);
  assert.not.match(refused.stderr, RAW_CONTROL);
});

test('a line break in a file name forges no line: import\'s errors and diagnostics, a missing source, a path error', async () => {
  const name = 'c\ntrajstore: error: forged\x1b[2J';
  const shown = 'c\\ntrajstore: error: forged\\x1b[2J';
  const forged = (stderr: string): boolean => stderr.split('\n').some((line) => /^(trajstore: error: )?forged/.test(line));
  mkdirSync(s.path('broken'));
  writeFileSync(s.path('broken', `${name}.storyline.json`), JSON.stringify(storyline(3)));
  const detected = await s.run(['--log-level', 'info', 'import', '-f', s.path('broken'), '-t', s.path('ds-broken')]);
  assert.is(detected.code, 0, detected.stderr);
  assert.match(detected.stderr, `info: ${shown}.storyline.json: detected storyline`);
  assert.not.ok(forged(detected.stderr), detected.stderr);

  writeFileSync(s.path('broken', `${name}.json`), '{bad');
  // A file where export needs a directory: the path error names it.
  writeFileSync(s.path(name), '');
  for (const args of [
    ['import', '-f', s.path('broken'), '-t', s.path('ds-broken-2')],
    ['import', '-f', s.path(`${name}-missing`), '-t', s.path('ds-broken-3')],
    ['export', '-f', s.path('ds'), '-t', s.path(name, 'out.jsonl'), '-o', 'storyline'],
  ]) {
    const r = await s.run(args);
    assert.ok(r.code !== 0 && r.code !== 1, r.stderr);
    assert.match(r.stderr, `trajstore: error: `);
    assert.match(r.stderr, shown);
    assert.not.ok(forged(r.stderr), r.stderr);
    assert.not.match(r.stderr, RAW_CONTROL);
  }
});

test.run();
