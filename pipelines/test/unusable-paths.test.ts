/**
 * A path the user names that cannot be used as given is their input, never an internal error: a
 * file where a dataset or directory belongs, a place without permission, a place that takes no new
 * directories, a directory as the configuration file; and `--column` names that SQL takes as one.
 * Each exits 2 (4 for a file in a dataset's place, as create and replace do) naming the path.
 */
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { sandbox, unprivilegedSandbox } from './helpers/sandbox.js';

const STORYLINE = JSON.stringify({ schema_version: 'storyline/v1', session: 's', trajectory: 't', agent: { id: 'a' }, turns: [{ id: 1, src: 'user', msg: 'hi' }] });

test('--column names that differ only in case are one SQL column: refused before anything is made', async () => {
  const s = sandbox('unusable-paths');
  writeFileSync(s.path('r.jsonl'), '{"id":"1","timestamp":"t","a":1,"b":2}\n');
  for (const columns of [['A=$.a', 'a=$.b'], ['FileName=$.a']]) {
    const r = await s.run(['import', '-f', 'r.jsonl', '-t', 'ds', '-i', 'compact-jsonl', ...columns.flatMap((c) => ['--column', c])]);
    assert.is(r.code, 2, r.stderr);
    assert.match(r.stderr, `--column "${columns.at(-1)}"`);
    assert.not.ok(existsSync(s.path('ds')));
  }
  // `ID` is the id column, as SQL reads it.
  const r = await s.run(['import', '-f', 'r.jsonl', '-t', 'ds', '-i', 'compact-jsonl', '--column', 'ID=$.b', '--column', 'Extra=$.a']);
  assert.is(r.code, 0, r.stderr);
  const rows = await s.run(['query', 'ds', '--sql', 'SELECT id, extra AS x FROM records', '--format', 'json']);
  assert.equal(JSON.parse(rows.stdout), [{ id: '2', x: '1' }]);
});

test('a file where the dataset belongs is a conflict (exit 4) in every mode; so is one where a parent directory belongs', async () => {
  const s = sandbox('unusable-paths');
  writeFileSync(s.path('ok.json'), STORYLINE);
  writeFileSync(s.path('taken'), 'mine');
  for (const mode of ['create', 'append', 'replace']) {
    const r = await s.run(['import', '-f', 'ok.json', '-t', 'taken', '--mode', mode, '--yes']);
    assert.is(r.code, 4, `${mode}: ${r.stderr}`);
    assert.match(r.stderr, `${s.path('taken')}: `);
  }
  const below = await s.run(['import', '-f', 'ok.json', '-t', 'taken/ds']);
  assert.is(below.code, 4, below.stderr);
  assert.match(below.stderr, `${s.path('taken')}: already exists`);
  assert.is(readFileSync(s.path('taken'), 'utf8'), 'mine');
  assert.equal(readdirSync(s.home).sort(), ['ok.json', 'taken']);
});

test('a place that takes no new directories (/proc) is invalid input', async () => {
  const s = sandbox('unusable-paths');
  writeFileSync(s.path('ok.json'), STORYLINE);
  const r = await s.run(['import', '-f', 'ok.json', '-t', '/proc/trajstore-test']);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, /trajstore: error: \/proc\/\S+: cannot make a directory there/);
});

test('a dataset or parent without write permission is invalid input naming it; nothing changes', async () => {
  const s = unprivilegedSandbox('unusable-paths');
  writeFileSync(s.path('ok.json'), STORYLINE);
  mkdirSync(s.path('ro'));
  chmodSync(s.path('ro'), 0o555);
  const parent = await s.run(['import', '-f', 'ok.json', '-t', 'ro/ds']);
  assert.is(parent.code, 2, parent.stderr);
  assert.match(parent.stderr, `trajstore: error: ${s.path('ro')}/`);
  assert.match(parent.stderr, ': permission denied');
  assert.equal(readdirSync(s.path('ro')), []);

  const created = await s.run(['import', '-f', 'ok.json', '-t', 'ds']);
  assert.is(created.code, 0, created.stderr);
  const before = readdirSync(s.path('ds')).sort();
  chmodSync(s.path('ds'), 0o555);
  const append = await s.run(['import', '-f', 'ok.json', '-t', 'ds', '--mode', 'append']);
  assert.is(append.code, 2, append.stderr);
  assert.is(append.stderr, `trajstore: error: ${s.path('ds')}: permission denied\n`);
  assert.equal(readdirSync(s.path('ds')).sort(), before);
});

test('query --output names a file: a directory is invalid input, with or without --overwrite', async () => {
  const s = sandbox('unusable-paths');
  writeFileSync(s.path('ok.json'), STORYLINE);
  assert.is((await s.run(['import', '-f', 'ok.json', '-t', 'ds'])).code, 0);
  mkdirSync(s.path('out'));
  for (const output of ['out', '']) {
    for (const overwrite of [[], ['--overwrite']]) {
      const r = await s.run(['query', 'ds', '--sql', 'SELECT 1', '--output', output, ...overwrite]);
      assert.is(r.code, 2, `--output "${output}" ${overwrite.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, '--output');
    }
  }
  assert.equal(readdirSync(s.path('out')), []);
});

test('a directory as the configuration file is invalid input naming it', async () => {
  const s = sandbox('unusable-paths');
  mkdirSync(s.path('config.toml'));
  const r = await s.run(['-c', 'config.toml', 'dataset', 'list']);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, `configuration file ${s.path('config.toml')}: is a directory`);
});

test.run();
