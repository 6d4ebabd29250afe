/**
 * Export targets a user can point it at by mistake or on purpose, through the real CLI: stdout on a
 * device that is full, and stdout closed by its reader.
 */
import { spawn } from 'node:child_process';
import { chmodSync, closeSync, mkdirSync, openSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { toolScript } from '../../lib/testing/run-tool.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { sandbox, unprivilegedSandbox } from './helpers/sandbox.js';

const s = sandbox('export-targets');
const CLAUDE = join(SHARED_FIXTURES, 'synthetic', 'claude-code');

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

test.run();
