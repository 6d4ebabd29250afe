/**
 * Exports racing for one target, as real CLI processes held at chosen steps of their own (SIGSTOP
 * by the kill-point shim, lib/testing/killpoint.c) so that the interleaving is the same on every run:
 *
 * - several exports to one new file or one new directory, each held right before its commit, so
 *   that all of them found the target free when they started: one commits (exit 0), the others are
 *   refused at their commit (exit 4) and leave nothing, the target is the one export's output whole;
 * - exports merging into one existing directory, one held in the middle of its moves while another
 *   moves in a file of the same name: the held one stops (exit 4) and takes back what it had moved,
 *   never the other's files, so the directory ends as the other left it.
 *
 * Each dataset is a compact record store of its own bytes, so an output tells which export wrote it.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool, type ToolResult } from '../../lib/testing/run-tool.js';
import { filesUnder, sandbox } from './helpers/sandbox.js';
import { isStopped, logCalls, stopAfter } from './helpers/stop-points.js';

const s = sandbox('export-race');
/** Three datasets with the same files and other bytes in them. */
const RIVALS = ['c0', 'c1', 'c2'];
/** A dataset of one of those files only. */
const ONLY_Z = 'cz';

const exportArgs = (dataset: string, target: string, ...more: string[]): string[] => ['export', '-f', s.path(dataset), '-o', 'compact-jsonl', '-t', target, ...more];

/** Every file under `dir` with its text: what a directory export wrote. */
const contentsOf = (dir: string): Record<string, string> => Object.fromEntries(filesUnder(dir).map((rel) => [rel, readFileSync(join(dir, rel), 'utf8')]));

/** The names in `dir` that hold `name`: a target and any temporary of its own. */
const namesWith = (dir: string, name: string): string[] => readdirSync(dir).filter((entry) => entry.includes(name)).sort();

async function until(what: string, check: () => boolean): Promise<void> {
  const end = Date.now() + 30_000;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

interface Held {
  child: ChildProcess;
  result: Promise<ToolResult>;
}

/** Runs the CLI with `args` under the shim, resolved once the process holds itself at the step `stop` chooses. */
async function held(args: string[], stop: NodeJS.ProcessEnv): Promise<Held> {
  let child: ChildProcess | undefined;
  const result = runTool('trajstore', args, { env: { ...s.env, ...stop }, cwd: s.home, onSpawn: (spawned) => (child = spawned) });
  let ended = false;
  void result.then(() => (ended = true));
  await until(`${args.join(' ')} to be held`, () => ended || isStopped(child!));
  if (ended) assert.unreachable(`${args.join(' ')} ran through without being held: ${(await result).stderr}`);
  return { child: child!, result };
}

/** Lets a held process go on, and its result. */
function resume(process: Held): Promise<ToolResult> {
  process.child.kill('SIGCONT');
  return process.result;
}

/**
 * The number of the last counted call an export of `dataset` makes before its commit (its first call
 * naming the target): learnt from a run to a target of the same kind (a file, or a new directory) that
 * logs its calls; an export held there has staged all it writes and checked nothing since it started.
 */
let logRuns = 0;
async function callsBeforeCommit(dataset: string, directory: boolean): Promise<number> {
  const target = s.path(`calls-${++logRuns}`);
  const log = `${target}.log`;
  const r = await runTool('trajstore', exportArgs(dataset, directory ? `${target}/` : target), { env: { ...s.env, ...logCalls(log) }, cwd: s.home });
  assert.is(r.code, 0, r.stderr);
  const commit = readFileSync(log, 'utf8')
    .trim()
    .split('\n')
    .find((line) => line.split(' ').slice(2).includes(target));
  assert.ok(commit, `no call of the export of ${dataset} names ${target}`);
  const before = Number(commit.split(' ')[0]) - 1;
  assert.ok(before >= 1, `nothing counted before ${commit}`);
  return before;
}

test.before(async () => {
  const sources = { c0: 0, c1: 1, c2: 2 };
  for (const [dataset, n] of Object.entries(sources)) {
    mkdirSync(s.path(`src-${dataset}`, 'a'), { recursive: true });
    writeFileSync(s.path(`src-${dataset}`, 'a', '1.json'), `${JSON.stringify({ from: dataset, n, part: 'a' })}\n`);
    writeFileSync(s.path(`src-${dataset}`, 'z.json'), `${JSON.stringify({ from: dataset, n, part: 'z' })}\n`);
  }
  mkdirSync(s.path(`src-${ONLY_Z}`));
  writeFileSync(s.path(`src-${ONLY_Z}`, 'z.json'), `${JSON.stringify({ from: ONLY_Z, part: 'z' })}\n`);
  for (const dataset of [...RIVALS, ONLY_Z]) {
    const r = await s.run(['import', '-f', s.path(`src-${dataset}`), '-o', 'compact-jsonl', '-t', s.path(dataset)]);
    assert.is(r.code, 0, r.stderr);
    for (const [to, kind] of [[s.path(`ref-${dataset}.jsonl`), 'file'], [s.path(`ref-${dataset}/`), 'directory']]) {
      const ref = await s.run(exportArgs(dataset, to as string));
      assert.is(ref.code, 0, `${kind}: ${ref.stderr}`);
    }
  }
});

/**
 * Exports of RIVALS to `target` (a file, or a directory), each held just before its commit; the one
 * at index `winner` goes on first and exits 0, then the others at once, each exiting 4 at its commit.
 */
async function race(target: string, directory: boolean, winner: number): Promise<void> {
  const racers = await Promise.all(RIVALS.map(async (dataset) => held(exportArgs(dataset, directory ? `${target}/` : target), stopAfter({ nth: await callsBeforeCommit(dataset, directory) }))));
  assert.not.ok(existsSync(target), 'nothing there before a commit');
  const first = await resume(racers[winner]!);
  assert.is(first.code, 0, first.stderr);
  const others = await Promise.all(racers.filter((_, i) => i !== winner).map(resume));
  for (const r of others) {
    assert.is(r.code, 4, `${r.code}: ${r.stderr}`);
    assert.match(r.stderr, `${target}: already exists`);
  }
}

test('exports started together to one new file, without --overwrite: one exits 0, the others 4 at their commit, the file one export’s output whole', async () => {
  const target = s.path('race.jsonl');
  // The second to start commits first.
  await race(target, false, 1);
  assert.is(readFileSync(target, 'utf8'), readFileSync(s.path('ref-c1.jsonl'), 'utf8'), 'the output of the export that committed, whole');
  assert.equal(namesWith(s.home, 'race.jsonl'), ['race.jsonl'], 'no temporary left');
});

test('exports started together to one new directory, without --overwrite: one exits 0, the others 4 at their commit, the directory one export’s output whole', async () => {
  const target = s.path('race-dir');
  await race(target, true, 2);
  assert.equal(contentsOf(target), contentsOf(s.path('ref-c2')), 'the output of the export that committed, whole, and no staging inside');
  assert.equal(namesWith(s.home, 'race-dir'), ['race-dir'], 'no staging beside it');
});

test('an export to a new directory where an empty directory was made meanwhile: exit 4, the empty directory left as it is', async () => {
  // rename(2) of a directory replaces an empty one: the commit must not take that for a free name.
  const target = s.path('made-meanwhile');
  const racer = await held(exportArgs('c0', `${target}/`), stopAfter({ nth: await callsBeforeCommit('c0', true) }));
  mkdirSync(target);
  const r = await resume(racer);
  assert.is(r.code, 4, `${r.code}: ${r.stderr}`);
  assert.match(r.stderr, `${target}: already exists`);
  assert.ok(statSync(target).isDirectory());
  assert.equal(readdirSync(target), []);
  assert.equal(namesWith(s.home, 'made-meanwhile'), ['made-meanwhile'], 'no staging beside it');
});

/** An existing directory holding a file of its own, for exports to merge into. */
function existingDirectory(name: string): string {
  const dir = s.path(name);
  mkdirSync(dir);
  writeFileSync(join(dir, 'keep.txt'), 'not the export’s\n');
  return dir;
}

test('two exports merging into one directory, the second moving in a file of the same name while the first is moving its files in: the first exits 4 and takes back what it had moved', async () => {
  const dir = existingDirectory('merge-race');
  // The first export (a/1.json, z.json) is held right after moving in a/1.json, its checks done: z.json was free.
  const first = await held(exportArgs('c0', dir), stopAfter({ path: join(dir, 'a', '1.json') }));
  assert.ok(existsSync(join(dir, 'a', '1.json')));
  const second = await s.run(exportArgs(ONLY_Z, dir));
  assert.is(second.code, 0, second.stderr);
  const r = await resume(first);
  assert.is(r.code, 4, `${r.code}: ${r.stderr}`);
  assert.match(r.stderr, `${join(dir, 'z.json')}: already exists`);
  // Its a/1.json moved back out and the directory a/ it made removed: as the second export left it.
  assert.equal(contentsOf(dir), { 'keep.txt': 'not the export’s\n', ...contentsOf(s.path(`ref-${ONLY_Z}`)) });
  assert.equal(readdirSync(dir).sort(), ['keep.txt', 'z.json'], 'no staging, and no directory made by the export that stopped');
});

test('an export merging into a directory stopped by a file taken meanwhile takes back only its own: a file another export replaced (--overwrite) since stays', async () => {
  const dir = existingDirectory('merge-overwritten');
  const first = await held(exportArgs('c0', dir), stopAfter({ path: join(dir, 'a', '1.json') }));
  // The second replaces the first's a/1.json and moves in its own z.json.
  const second = await s.run(exportArgs('c1', dir, '--overwrite'));
  assert.is(second.code, 0, second.stderr);
  const r = await resume(first);
  assert.is(r.code, 4, `${r.code}: ${r.stderr}`);
  assert.match(r.stderr, `${join(dir, 'z.json')}: already exists`);
  assert.equal(contentsOf(dir), { 'keep.txt': 'not the export’s\n', ...contentsOf(s.path('ref-c1')) }, 'the second export’s files, all of them');
  assert.equal(readdirSync(dir).sort(), ['a', 'keep.txt', 'z.json'], 'no staging');
});

test.run();
