/**
 * `trajstore sync`: a mirror `--to` is one sync's (one source, one `--convert` dataset), through the
 * real command. Run one after the other, a sync of another source (or into another dataset) would
 * keep the first source's files in the mirror and write its own over the same paths: it is refused
 * with exit 4 and the mirror and the first dataset stay as they were. The same sync runs again (after
 * a kill too); a source renamed is taken over; an unrelated non-empty `--to` is neither written nor
 * emptied; a mirror an earlier version wrote (no owner record) is adopted when its dataset knows its files.
 */
import { spawn } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, readFileSync, realpathSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool, toolScript } from '../../lib/testing/run-tool.js';
import { claudeLine, sessionFile } from './helpers/claude-log-writer.js';
import { filesUnder, sandbox } from './helpers/sandbox.js';

const s = sandbox('sync-owner');

const writeSession = (src: string, n: number, lines: number): void => {
  mkdirSync(join(src, 'project'), { recursive: true });
  writeFileSync(sessionFile(src, n), Array.from({ length: lines }, (_, i) => claudeLine(n, i)).join(''));
};

const sync = (src: string, to: string, convert: string, ...more: string[]) =>
  runTool('trajstore', ['sync', '--from', src, '--to', to, '--convert', convert, '--once', ...more], { env: s.env, cwd: s.home });

/** The marker steps in the dataset: [all, distinct]. */
async function markers(convert: string): Promise<[number, number]> {
  const r = await s.run(['query', convert, '--sql', "SELECT count(*), count(DISTINCT message_text) FROM steps WHERE message_text LIKE 'marker-%'", '--format', 'csv']);
  assert.is(r.code, 0, r.stderr);
  const [all, distinct] = r.stdout.trim().split('\n')[1]!.split(',').map(Number);
  return [all!, distinct!];
}

/** Every file under `dir` with its bytes: what must not change. */
const contents = (dir: string): Record<string, string> => Object.fromEntries(filesUnder(dir).map((rel) => [rel, readFileSync(join(dir, rel), 'latin1')]));

/** The mirror holds exactly the source's files, byte for byte, and the dataset every line once. */
async function inStep(src: string, to: string, convert: string, lines: number): Promise<void> {
  assert.equal(contents(to), contents(src), 'the mirror is the source, byte for byte');
  assert.equal(await markers(convert), [lines, lines], 'every line converted once');
}

test('a second source synced into the mirror of a first, one after the other: refused (exit 4) naming both, mirror and first dataset unchanged; the first goes on', async () => {
  const [srcA, srcB] = [s.path('seq-a'), s.path('seq-b')];
  const [to, dsA] = [s.path('seq-mirror'), s.path('seq-ds-a')];
  // Same relative path in both (session 0): the second would write over the first's copy.
  writeSession(srcA, 0, 2);
  writeSession(srcA, 1, 2);
  writeSession(srcB, 0, 3);
  writeSession(srcB, 2, 1);
  const first = await sync(srcA, to, dsA);
  assert.is(first.code, 0, first.stderr);
  await inStep(srcA, to, dsA, 4);
  const mirrorBefore = contents(to);
  const datasetBefore = contents(dsA);
  for (const args of [['--once'], ['--interval', '100ms']]) {
    const other = await runTool('trajstore', ['sync', '--from', srcB, '--to', to, '--convert', s.path('seq-ds-b'), ...args], { env: s.env, cwd: s.home, timeoutMs: 20_000 });
    assert.is(other.code, 4, other.stderr);
    assert.match(other.stderr, `--to ${realpathSync(to)}: the mirror of sync --from ${realpathSync(srcA)} --convert ${realpathSync(dsA)}`);
    assert.match(other.stderr, `not of --from ${realpathSync(srcB)} --convert ${realpathSync(s.home)}/seq-ds-b`);
    assert.match(other.stderr, /another --to/);
    assert.match(other.stderr, `remove ${realpathSync(to)}`);
    assert.not.ok(existsSync(join(s.path('seq-ds-b'), 'trajstore.json')), 'nothing converted');
  }
  // The first source into another dataset: that dataset's state knows nothing of the mirror's files.
  const otherDataset = await sync(srcA, to, s.path('seq-ds-a2'));
  assert.is(otherDataset.code, 4, otherDataset.stderr);
  assert.match(otherDataset.stderr, `not of --from ${realpathSync(srcA)} --convert ${realpathSync(s.home)}/seq-ds-a2`);
  assert.equal(contents(to), mirrorBefore, 'the mirror untouched');
  assert.equal(contents(dsA), datasetBefore, 'the first dataset untouched');
  // The owner is recorded beside the mirror, not in it.
  assert.ok(existsSync(s.path('.seq-mirror.sync-owner.json')));
  // The first sync goes on as before, deletions included.
  appendFileSync(sessionFile(srcA, 0), claudeLine(0, 2));
  rmSync(sessionFile(srcA, 1));
  const again = await sync(srcA, to, dsA);
  assert.is(again.code, 0, again.stderr);
  await inStep(srcA, to, dsA, 3);
  // Once the mirror is removed, the second source may have that path.
  rmSync(to, { recursive: true });
  const taken = await sync(srcB, to, s.path('seq-ds-b'));
  assert.is(taken.code, 0, taken.stderr);
  await inStep(srcB, to, s.path('seq-ds-b'), 4);
  const back = await sync(srcA, to, dsA);
  assert.is(back.code, 4, back.stderr);
  assert.match(back.stderr, `the mirror of sync --from ${realpathSync(srcB)}`);
});

test('the same sync again: --once twice, resident after --once, and after a kill -9, each goes on; through a symbolic link to the source too', async () => {
  const src = s.path('same-src');
  const [to, convert] = [s.path('same-mirror'), s.path('same-ds')];
  writeSession(src, 0, 2);
  for (let i = 0; i < 2; i++) {
    const r = await sync(src, to, convert);
    assert.is(r.code, 0, r.stderr);
  }
  await inStep(src, to, convert, 2);
  const child = spawn(process.execPath, [toolScript('trajstore'), 'sync', '--from', src, '--to', to, '--convert', convert, '--interval', '50ms'], { cwd: s.home, env: { ...process.env, ...s.env }, stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString('utf8')));
  const exited = new Promise<void>((resolve) => child.on('close', () => resolve()));
  appendFileSync(sessionFile(src, 0), claudeLine(0, 2));
  const end = Date.now() + 20_000;
  while (!/batch \d+: 1 file\(s\), 1 record\(s\).*ok/.test(err) && Date.now() < end) await sleep(25);
  child.kill('SIGKILL');
  await exited;
  assert.match(err, /ok$/m, err);
  writeSession(src, 1, 2);
  const link = s.path('same-link');
  symlinkSync(src, link);
  const after = await sync(link, to, convert);
  assert.is(after.code, 0, after.stderr);
  await inStep(src, to, convert, 5);
});

test('a source renamed (moved) is the same sync: the mirror is taken over with a warning naming the old path, and follows the new one', async () => {
  const src = s.path('moved-src');
  const [to, convert] = [s.path('moved-mirror'), s.path('moved-ds')];
  writeSession(src, 0, 2);
  writeSession(src, 1, 2);
  assert.is((await sync(src, to, convert)).code, 0);
  const moved = s.path('moved-src-2');
  renameSync(src, moved);
  // Deleted after the move: the dataset taken over knows nothing of it, yet its copy leaves the mirror.
  rmSync(sessionFile(moved, 1));
  const r = await sync(moved, to, convert);
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stderr, `${realpathSync(to)} mirrored ${realpathSync(s.home)}/moved-src, which is gone; it mirrors ${realpathSync(moved)} now`);
  // Its runs leave the dataset too (those of a path the new source has are replaced by its).
  await inStep(moved, to, convert, 2);
  // Its new owner is the renamed source: a new directory at the old path is another source.
  writeSession(src, 5, 1);
  const old = await sync(src, to, convert);
  assert.is(old.code, 4, old.stderr);
  assert.equal(contents(to), contents(moved));
});

test('a dataset dropped while its sync was stopped, and a source file deleted meanwhile: the rebuild leaves the mirror equal to the source', async () => {
  const src = s.path('rebuilt-src');
  const [to, convert] = [s.path('rebuilt-mirror'), s.path('rebuilt-ds')];
  writeSession(src, 0, 2);
  writeSession(src, 1, 2);
  assert.is((await sync(src, to, convert)).code, 0);
  // A file in the mirror that sync would not have written (no watched extension) is not the sync's to remove.
  writeFileSync(join(to, 'README.txt'), 'kept\n');
  rmSync(sessionFile(src, 1));
  assert.is((await s.run(['drop', convert, '--yes'])).code, 0);
  const r = await sync(src, to, convert);
  assert.is(r.code, 0, r.stderr);
  assert.ok(existsSync(join(to, 'README.txt')));
  rmSync(join(to, 'README.txt'));
  await inStep(src, to, convert, 2);
});

test('a --to that holds files no sync mirrored: refused (exit 2) naming it, nothing written into it nor deleted from it; an empty one is taken', async () => {
  const src = s.path('unrelated-src');
  writeSession(src, 0, 2);
  const to = s.path('unrelated-to');
  mkdirSync(join(to, 'project'), { recursive: true });
  writeFileSync(join(to, 'notes.txt'), 'mine\n');
  // A file at a path the source has too: a sync would write over it.
  writeFileSync(sessionFile(to, 0), '{"mine":1}\n');
  const before = contents(to);
  for (const args of [[], ['--interval', '100ms']]) {
    const r = await runTool('trajstore', ['sync', '--from', src, '--to', to, '--convert', s.path('unrelated-ds'), ...(args.length ? args : ['--once'])], { env: s.env, cwd: s.home, timeoutMs: 20_000 });
    assert.is(r.code, 2, r.stderr);
    assert.match(r.stderr, `--to ${realpathSync(to)}: not empty, and no mirror of this sync`);
    assert.equal(contents(to), before, 'the directory untouched');
    assert.not.ok(existsSync(join(s.path('unrelated-ds'), 'trajstore.json')), 'nothing converted');
  }
  const empty = s.path('empty-to');
  mkdirSync(empty);
  const r = await sync(src, empty, s.path('empty-ds'));
  assert.is(r.code, 0, r.stderr);
  await inStep(src, empty, s.path('empty-ds'), 2);
});

test('a mirror an earlier version wrote (no owner record) is adopted when its dataset\'s sync state knows its files; then it is refused to another source', async () => {
  const src = s.path('old-src');
  const [to, convert] = [s.path('old-mirror'), s.path('old-ds')];
  writeSession(src, 0, 2);
  writeSession(src, 1, 2);
  assert.is((await sync(src, to, convert)).code, 0);
  // As an earlier version left it: the mirror and the dataset, no record of the mirror's owner.
  rmSync(s.path('.old-mirror.sync-owner.json'));
  rmSync(sessionFile(src, 1));
  const r = await sync(src, to, convert);
  assert.is(r.code, 0, r.stderr);
  await inStep(src, to, convert, 2);
  const other = s.path('old-other');
  writeSession(other, 0, 1);
  const refused = await sync(other, to, s.path('old-other-ds'));
  assert.is(refused.code, 4, refused.stderr);
  // Without the record, a mirror whose files the dataset does not know (another source's) is not adopted.
  rmSync(s.path('.old-mirror.sync-owner.json'));
  const unknown = await sync(other, to, s.path('old-other-ds'));
  assert.is(unknown.code, 2, unknown.stderr);
  await inStep(src, to, convert, 2);
});

test('compact-jsonl writes no mirror, so it claims none: another sync\'s mirror named as its --to is left as it is', async () => {
  const [srcA, srcB] = [s.path('compact-a'), s.path('compact-b')];
  const to = s.path('compact-mirror');
  writeSession(srcA, 0, 2);
  writeSession(srcB, 0, 3);
  assert.is((await sync(srcA, to, s.path('compact-ds-a'))).code, 0);
  const before = contents(to);
  const r = await sync(srcB, to, s.path('compact-ds-b'), '--input-format', 'compact-jsonl');
  assert.is(r.code, 0, r.stderr);
  assert.equal(contents(to), before);
  assert.is((await sync(srcA, to, s.path('compact-ds-a'))).code, 0);
});

test.run();
