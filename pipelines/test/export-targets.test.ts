/**
 * Export targets a user can point it at by mistake or on purpose, through the real CLI: stdout on a
 * device that is full, stdout closed by its reader, a read-only directory, and an existing directory
 * where something is in the way of a file the export writes.
 */
import { spawn } from 'node:child_process';
import { chmodSync, closeSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { toolScript } from '../../lib/testing/run-tool.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { filesUnder, sandbox, unprivilegedSandbox } from './helpers/sandbox.js';

const s = sandbox('export-targets');
const CLAUDE = join(SHARED_FIXTURES, 'synthetic', 'claude-code');
const COMPACT = join(SHARED_FIXTURES, 'synthetic', 'compact-jsonl', 'valid');

/** Runs trajstore with stdout on the file descriptor `stdout`, returning its exit code and stderr. */
function runWithStdout(args: string[], stdout: number): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, [toolScript('trajstore'), ...args], { env: { ...process.env, ...s.env }, cwd: s.home, stdio: ['ignore', stdout, 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stderr })));
}

test('export -t - onto a full device (stdout > /dev/full): exit 5 saying so, no stack trace', async () => {
  const imported = await s.run(['import', '-f', CLAUDE, '-t', s.path('ds')]);
  assert.is(imported.code, 0, imported.stderr);
  const full = openSync('/dev/full', 'w');
  try {
    const r = await runWithStdout(['export', '-f', s.path('ds'), '-t', '-', '-o', 'storyline'], full);
    assert.is(r.code, 5, r.stderr);
    assert.match(r.stderr, '-t - (stdout): no space left on device');
    assert.not.match(r.stderr, /\n\s+at /);
  } finally {
    closeSync(full);
  }
});

test('export into a read-only directory: exit 2 naming -t, nothing left there', async () => {
  const u = unprivilegedSandbox('export-targets-ro');
  const imported = await u.run(['import', '-f', CLAUDE, '-t', u.path('ds')]);
  assert.is(imported.code, 0, imported.stderr);
  mkdirSync(u.path('ro'));
  // Read-only to its owner too (the sandbox makes the home the unprivileged user's before each run).
  chmodSync(u.path('ro'), 0o555);
  for (const target of ['ro/x.jsonl', 'ro/sub/', 'ro']) {
    const r = await u.run(['export', '-f', u.path('ds'), '-t', u.path(target), '-o', 'atif']);
    assert.is(r.code, 2, r.stderr);
    assert.match(r.stderr, `-t ${resolve(u.path(target))}: permission denied`);
    assert.equal(readdirSync(u.path('ro')), []);
  }
});

/** Every file and directory under `dir` with its content (a directory: null), to tell that nothing changed. */
function treeOf(dir: string): Record<string, string | null> {
  const tree: Record<string, string | null> = {};
  for (const name of readdirSync(dir, { recursive: true }) as string[]) {
    tree[name] = statSync(join(dir, name)).isDirectory() ? null : readFileSync(join(dir, name), 'utf8');
  }
  return tree;
}

test('export into an existing directory with something in the way of one of its files: refused before any file is moved in, the directory as it was', async () => {
  const dataset = s.path('merge-source');
  assert.is((await s.run(['import', '-f', CLAUDE, '-t', dataset])).code, 0);
  const fresh = await s.run(['export', '-f', dataset, '-t', s.path('merge-fresh/'), '-o', 'storyline']);
  assert.is(fresh.code, 0, fresh.stderr);
  const names = readdirSync(s.path('merge-fresh'));
  assert.ok(names.length > 1, 'the dataset exports to one file');
  // The file written last collides: the files before it would be moved in first.
  const last = names.reduce((a, b) => (statSync(s.path('merge-fresh', a)).mtimeMs > statSync(s.path('merge-fresh', b)).mtimeMs ? a : b));
  const dir = s.path('merge-into');
  mkdirSync(join(dir, last), { recursive: true });
  writeFileSync(join(dir, last, 'inside.txt'), 'mine');
  writeFileSync(join(dir, 'keep.txt'), 'mine too');
  const before = treeOf(dir);
  // A subdirectory where a document's file goes: --overwrite replaces regular files only (exit 2); without it, exit 4.
  const overwrite = await s.run(['export', '-f', dataset, '-t', dir, '-o', 'storyline', '--overwrite']);
  assert.is(overwrite.code, 2, overwrite.stderr);
  assert.equal(treeOf(dir), before);
  assert.match(overwrite.stderr, `${join(dir, last)}: not a regular file`);
  const plain = await s.run(['export', '-f', dataset, '-t', dir, '-o', 'storyline']);
  assert.is(plain.code, 4, plain.stderr);
  assert.match(plain.stderr, `${join(dir, last)}: already exists`);
  assert.equal(treeOf(dir), before);

  // A file where the export writes a directory of files (a record store's metrics/queue.jsonl).
  const records = s.path('merge-records');
  assert.is((await s.run(['import', '-f', COMPACT, '-t', records, '-o', 'compact-jsonl'])).code, 0);
  const into = s.path('merge-records-into');
  mkdirSync(into);
  writeFileSync(join(into, 'metrics'), 'a file');
  const recordsBefore = treeOf(into);
  for (const flags of [[], ['--overwrite']]) {
    const r = await s.run(['export', '-f', records, '-t', into, '-o', 'compact-jsonl', ...flags]);
    assert.is(r.code, 2, r.stderr);
    assert.match(r.stderr, `${join(into, 'metrics')}: not a directory`);
    assert.equal(treeOf(into), recordsBefore);
  }
  // Out of the way, the same export lands whole.
  writeFileSync(join(into, 'other'), 'x');
  rmSync(join(into, 'metrics'));
  const whole = await s.run(['export', '-f', records, '-t', into, '-o', 'compact-jsonl']);
  assert.is(whole.code, 0, whole.stderr);
  assert.equal(filesUnder(into), ['A-ops.jsonl', 'chat/2026-05-20.jsonl', 'metrics/queue.jsonl', 'other']);
});

test('export into an existing directory with a subdirectory it cannot write: exit 2 naming it, nothing moved in', async () => {
  const u = unprivilegedSandbox('export-targets-merge-ro');
  assert.is((await u.run(['import', '-f', COMPACT, '-t', u.path('records'), '-o', 'compact-jsonl'])).code, 0);
  mkdirSync(u.path('into', 'metrics'), { recursive: true });
  chmodSync(u.path('into', 'metrics'), 0o555);
  const r = await u.run(['export', '-f', u.path('records'), '-t', u.path('into'), '-o', 'compact-jsonl']);
  assert.is(r.code, 2, r.stderr);
  assert.equal(readdirSync(u.path('into'), { recursive: true }), ['metrics']);
  assert.match(r.stderr, `${u.path('into', 'metrics')}: permission denied`);
});

test.run();
