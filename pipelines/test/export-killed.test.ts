/**
 * An export killed outright (kill -9, as a power cut would stop it) cannot remove its staging: the
 * next export to the same place does, and never the staging of an export still at work (here one
 * stopped with SIGSTOP: alive, writing nothing). Through the real CLI on a dataset big enough that
 * an export takes seconds.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { toolScript } from '../../lib/testing/run-tool.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { filesUnder, sandbox } from './helpers/sandbox.js';

const s = sandbox('export-killed');
const STORYLINES = join(SHARED_FIXTURES, 'synthetic', 'storyline');
const BIG = s.path('big');
const SMALL = s.path('small');

/** Starts an export of the big dataset to `target`, resolved once `ready()` holds (it has staged some of its output). */
async function startExport(target: string, ready: () => boolean): Promise<ChildProcess> {
  const child = spawn(process.execPath, [toolScript('trajstore'), 'export', '-f', BIG, '-o', 'storyline', '-t', target], { env: { ...process.env, ...s.env }, cwd: s.home, stdio: 'ignore' });
  const started = Date.now();
  while (!ready()) {
    assert.ok(Date.now() - started < 60_000 && child.exitCode === null, `the export to ${target} never staged anything`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return child;
}

async function kill(child: ChildProcess): Promise<void> {
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await exited;
}

/** Entries of `dir` whose name holds `name` (the target and any staging beside it). */
const named = (dir: string, name: string): string[] => readdirSync(dir).filter((n) => n.includes(name)).sort();
/** Files under the entries of `dir` whose name holds `name`, the target and its stagings, recursively. */
const stagedFor = (dir: string, name: string): number =>
  named(dir, name).reduce((sum, n) => sum + (statSync(join(dir, n), { throwIfNoEntry: false })?.isDirectory() ? filesUnder(join(dir, n)).length : 1), 0);

test.before(async () => {
  const base = JSON.parse(readFileSync(join(STORYLINES, readdirSync(STORYLINES).sort()[0] as string), 'utf8'));
  const lines: string[] = [];
  for (let i = 0; i < 20_000; i++) lines.push(JSON.stringify({ ...base, trajectory: `big-${i}` }));
  writeFileSync(s.path('big.jsonl'), `${lines.join('\n')}\n`);
  for (const [source, dataset] of [[s.path('big.jsonl'), BIG], [STORYLINES, SMALL]]) {
    const r = await s.run(['import', '-f', source as string, '-t', dataset as string]);
    assert.is(r.code, 0, r.stderr);
  }
});

test('a file export killed (SIGKILL): the next export to that file removes its temporary, never a live one', async () => {
  const target = s.path('out.jsonl');
  // Killed once its staging names its owner: one killed before has none, and waits an hour to be removed (lib/owned-scratch.ts).
  await kill(await startExport(target, () => named(s.home, 'out.jsonl').some((n) => existsSync(join(s.home, n, 'owner.json')))));
  const left = named(s.home, 'out.jsonl');
  assert.ok(left.length > 0, 'the killed export left nothing to remove');
  assert.not.ok(existsSync(target));
  // A second export to the file, stopped (alive) once it has staged something of its own.
  const live = await startExport(target, () => named(s.home, 'out.jsonl').some((n) => !left.includes(n)));
  live.kill('SIGSTOP');
  try {
    const staged = named(s.home, 'out.jsonl').filter((n) => !left.includes(n));
    const next = await s.run(['export', '-f', SMALL, '-o', 'storyline', '-t', target]);
    assert.is(next.code, 0, next.stderr);
    assert.equal(named(s.home, 'out.jsonl'), [...staged, 'out.jsonl'].sort(), "the killed export's temporary went, the live one's stayed");
  } finally {
    await kill(live);
  }
  const again = await s.run(['export', '-f', SMALL, '-o', 'storyline', '-t', target, '--overwrite']);
  assert.is(again.code, 0, again.stderr);
  assert.equal(named(s.home, 'out.jsonl'), ['out.jsonl']);
  assert.is(readFileSync(target, 'utf8').split('\n').length - 1, readdirSync(STORYLINES).length);
});

test('a directory export killed (SIGKILL): the next export to that directory removes its staging, new or existing', async () => {
  // A new directory: staged beside it.
  await kill(await startExport(s.path('newdir/'), () => stagedFor(s.home, 'newdir') >= 100));
  assert.ok(named(s.home, 'newdir').length > 0, 'the killed export left nothing to remove');
  const next = await s.run(['export', '-f', SMALL, '-o', 'storyline', '-t', s.path('newdir/')]);
  assert.is(next.code, 0, next.stderr);
  assert.equal(named(s.home, 'newdir'), ['newdir']);
  assert.is(readdirSync(s.path('newdir')).length, readdirSync(STORYLINES).length);
  // An existing directory: staged inside it.
  mkdirSync(s.path('olddir'));
  writeFileSync(s.path('olddir', 'keep.txt'), 'mine');
  await kill(await startExport(s.path('olddir'), () => filesUnder(s.path('olddir')).length >= 100));
  assert.ok(readdirSync(s.path('olddir')).length > 1, 'the killed export left nothing to remove');
  const into = await s.run(['export', '-f', SMALL, '-o', 'storyline', '-t', s.path('olddir')]);
  assert.is(into.code, 0, into.stderr);
  assert.equal(named(s.home, 'olddir'), ['olddir']);
  assert.equal(readdirSync(s.path('olddir')).filter((n) => n.startsWith('.')), []);
  assert.is(readdirSync(s.path('olddir')).length, readdirSync(STORYLINES).length + 1);
  assert.is(readFileSync(s.path('olddir', 'keep.txt'), 'utf8'), 'mine');
});

test.run();
