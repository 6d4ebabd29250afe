/**
 * A full disk in the middle of a write, through the real command on a small tmpfs of its own: an
 * append, a replace and a sync batch are each run with less and less room taken away, so that the
 * disk fills at every stage (the index copy, Parquet parts, the SQLite index, the snapshot, the
 * manifest). Each one that fails exits 5 saying the disk is full and naming the dataset, leaves the
 * dataset as it was, and the same command succeeds once there is room again.
 *
 * Mounting needs root (CAP_SYS_ADMIN); elsewhere the test says so and checks nothing.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, readdirSync, readFileSync, rmSync, statfsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { leftovers } from './helpers/dataset-state.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { sandbox } from './helpers/sandbox.js';

const s = sandbox('disk-full');
const CODEX = join(SHARED_FIXTURES, 'synthetic', 'codex');
const CLAUDE = join(SHARED_FIXTURES, 'synthetic', 'claude-code');
/** Room left, from none up in these steps, until the command fits. */
const STEP_BYTES = 32 * 1024;

/** Runs `check` with a 4 MiB tmpfs mounted at a fresh directory; undefined when this user may not mount. */
async function withTmpfs(check: (dir: string) => Promise<void>): Promise<boolean> {
  const dir = s.path(`tmpfs-${Math.random().toString(16).slice(2)}`);
  mkdirSync(dir);
  const mounted = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'tmpfs', dir], { encoding: 'utf8' });
  if (mounted.status !== 0) return false;
  try {
    await check(dir);
  } finally {
    spawnSync('umount', [dir]);
  }
  return true;
}

/** Takes all but `free` bytes of the filesystem of `dir` with a filler file, which is returned. */
function fill(dir: string, free: number): string {
  const filler = join(dir, 'filler');
  const stats = statfsSync(dir);
  const take = Math.max(0, stats.bavail * stats.bsize - free);
  writeFileSync(filler, Buffer.alloc(take));
  return filler;
}

const state = (dataset: string): string => readFileSync(join(dataset, 'trajstore.json'), 'utf8');

async function runs(dataset: string): Promise<number> {
  const r = await s.run(['query', dataset, '--sql', 'SELECT count(*) AS n FROM runs', '--format', 'csv']);
  assert.is(r.code, 0, r.stderr);
  return Number(r.stdout.trim().split('\n')[1]);
}

/**
 * Runs `command` (which writes `dataset`, made by `prepare` each time) with ever more room: every
 * failure is a full disk (exit 5, named, the dataset as it was); the first success ends the loop,
 * and each failing one must also succeed once its room is back. Returns the number of failures seen.
 */
async function fillEachStage(dir: string, dataset: string, prepare: () => Promise<void>, command: string[], named: string | RegExp = `${dataset}: `): Promise<number> {
  let failures = 0;
  for (let free = 0; ; free += STEP_BYTES) {
    rmSync(dataset, { recursive: true, force: true });
    await prepare();
    const before = state(dataset);
    const runsBefore = await runs(dataset);
    const filler = fill(dir, free);
    const r = await s.run(command);
    if (r.code === 0) {
      rmSync(filler);
      return failures;
    }
    failures += 1;
    const what = `${command[0]} with ${free} bytes free`;
    assert.is(r.code, 5, `${what}: ${r.stderr}`);
    assert.match(r.stderr, named, what);
    assert.match(r.stderr, /no space left on device|database or disk is full/, what);
    assert.not.match(r.stderr, 'internal error', what);
    rmSync(filler);
    assert.is(state(dataset), before, what);
    assert.is(await runs(dataset), runsBefore, what);
    assert.equal(leftovers(dataset), [], what);
    const again = await s.run(command);
    assert.is(again.code, 0, `${what}, run again with room: ${again.stderr}`);
  }
}

test('a disk that fills during an append, a replace or a sync batch: exit 5 naming the dataset, the dataset as it was, and the next run works', async () => {
  const mounted = await withTmpfs(async (dir) => {
    const dataset = join(dir, 'ds');
    const base = async (): Promise<void> => {
      const r = await s.run(['import', '-f', CODEX, '-t', dataset]);
      assert.is(r.code, 0, r.stderr);
    };
    for (const mode of ['append', 'replace']) {
      const failures = await fillEachStage(dir, dataset, base, ['import', '-f', CLAUDE, '-t', dataset, '--mode', mode, '--yes']);
      assert.ok(failures >= 5, `${mode}: only ${failures} full-disk failures`);
    }
    const src = join(dir, 'src');
    mkdirSync(src);
    const synced = async (): Promise<void> => {
      rmSync(join(src, 'projects'), { recursive: true, force: true });
      rmSync(join(dir, 'mirror'), { recursive: true, force: true });
      cpSync(join(CODEX, 'sessions'), join(src, 'sessions'), { recursive: true });
      const r = await s.run(['sync', '--from', src, '--to', join(dir, 'mirror'), '--convert', dataset, '--once']);
      assert.is(r.code, 0, r.stderr);
      cpSync(join(CLAUDE, 'projects'), join(src, 'projects'), { recursive: true });
    };
    // Named by the dataset, or by the mirror (its lock) or its copy of a file that could not be written.
    const named = new RegExp(`(${dataset}|${join(dir, 'mirror')}(/projects/\\S+)?): `);
    const failures = await fillEachStage(dir, dataset, synced, ['sync', '--from', src, '--to', join(dir, 'mirror'), '--convert', dataset, '--once'], named);
    assert.ok(failures >= 5, `sync: only ${failures} full-disk failures`);
  });
  if (!mounted) process.stdout.write('disk-full: skipped, this user may not mount a tmpfs\n');
});

test('a disk that fills in the compaction after a sync batch: the batch, committed, stands and exits 0 with a warning; a failing batch changed nothing', async () => {
  // Seven batches of one file each: the eighth makes eight small parts, which compaction rewrites.
  const prepared = s.path('compaction-prepared');
  const src = s.path('compaction-src');
  mkdirSync(src);
  const session = join(CLAUDE, 'projects', '-home-dev-ledger-svc', '2ad842e0-db61-4fd6-8a57-f55969d81e22.jsonl');
  for (let i = 1; i <= 7; i++) {
    cpSync(session, join(src, `s${i}.jsonl`));
    const r = await s.run(['sync', '--from', src, '--to', s.path('compaction-mirror'), '--convert', prepared, '--once']);
    assert.is(r.code, 0, r.stderr);
  }
  cpSync(session, join(src, 's8.jsonl'));
  let warned = 0;
  // The copy's own mirror: a mirror is one sync's, of one source into one dataset (sync/owner.ts).
  const mirror = s.path('compaction-mirror-of-copy');
  const mounted = await withTmpfs(async (dir) => {
    const dataset = join(dir, 'ds');
    for (let free = 0; ; free += 2 * STEP_BYTES) {
      rmSync(dataset, { recursive: true, force: true });
      cpSync(prepared, dataset, { recursive: true });
      const before = state(dataset);
      const filler = fill(dir, free);
      const r = await s.run(['sync', '--from', src, '--to', mirror, '--convert', dataset, '--once']);
      rmSync(filler);
      const what = `sync with ${free} bytes free`;
      if (r.code !== 0) {
        assert.is(r.code, 5, `${what}: ${r.stderr}`);
        assert.is(state(dataset), before, `${what} failed, yet the dataset changed: ${r.stderr}`);
        continue;
      }
      assert.is(await runs(dataset), 8, what);
      if (!r.stderr.includes('compacting the dataset failed')) break;
      assert.match(r.stderr, `${dataset}: `, what);
      warned += 1;
      // The next batch compacts, now that there is room.
      const next = await s.run(['sync', '--from', src, '--to', mirror, '--convert', dataset, '--once']);
      assert.is(next.code, 0, next.stderr);
    }
  });
  if (!mounted) process.stdout.write('disk-full: skipped, this user may not mount a tmpfs\n');
  else assert.ok(warned > 0, 'no room was found where the batch fits and its compaction does not');
});

test('a disk that fills during an export to a file or a directory: exit 5 naming -t, and nothing left there', async () => {
  const dataset = s.path('export-source');
  const imported = await s.run(['import', '-f', CLAUDE, '-t', dataset]);
  assert.is(imported.code, 0, imported.stderr);
  const mounted = await withTmpfs(async (dir) => {
    // Room for a part of the export (about 30 KB as Storyline), not all of it.
    const filler = fill(dir, 8 * 1024);
    for (const [target, shown] of [[join(dir, 'out.jsonl'), join(dir, 'out.jsonl')], [`${join(dir, 'outdir')}/`, join(dir, 'outdir')]] as const) {
      const r = await s.run(['export', '-f', dataset, '-t', target, '-o', 'storyline']);
      assert.is(r.code, 5, r.stderr);
      assert.match(r.stderr, `-t ${shown}: no space left on device`);
      assert.equal(readdirSync(dir), ['filler'], target);
    }
    rmSync(filler);
  });
  if (!mounted) process.stdout.write('disk-full: skipped, this user may not mount a tmpfs\n');
});

test.run();
