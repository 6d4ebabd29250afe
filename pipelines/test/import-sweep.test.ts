/**
 * What a killed import leaves behind is cleaned up by the next import of that dataset: the hidden build
 * directory of a `kill -9`ed create, and Parquet parts a `kill -9`ed append had finished but no
 * snapshot lists. Each leftover is made by killing a real writer process with SIGKILL at a moment it is
 * busy writing; kill-points.test.ts stops writers after each of their steps instead.
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { DIST_ROOT, toolScript } from '../../lib/testing/run-tool.js';
import { openDataset } from '../dataset/open.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { filesUnder, sandbox } from './helpers/sandbox.js';

const STORYLINES = join(SHARED_FIXTURES, 'synthetic', 'storyline');


/** Starts a process, waits until `ready()` holds (or 30 s), then kills it with SIGKILL. */
async function killWhen(args: string[], env: NodeJS.ProcessEnv, ready: () => boolean): Promise<void> {
  const child = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: 'ignore' });
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, signal) => resolve(signal)));
  const started = Date.now();
  while (Date.now() - started < 30_000 && !ready()) await new Promise((r) => setTimeout(r, 20));
  child.kill('SIGKILL');
  assert.is(await exited, 'SIGKILL', 'the writer was still running when killed');
}

test('a create killed with kill -9 leaves a hidden build directory that the next import of that dataset removes', async () => {
  const s = sandbox('import-sweep');
  const base = JSON.parse(readFileSync(join(STORYLINES, readdirSync(STORYLINES).sort()[0] as string), 'utf8'));
  const lines: string[] = [];
  for (let i = 0; i < 20_000; i++) lines.push(JSON.stringify({ ...base, trajectory: `big-${i}` }));
  writeFileSync(s.path('big.jsonl'), `${lines.join('\n')}\n`);
  const builds = (): string[] => readdirSync(s.home).filter((n) => n.startsWith('.ds.tmp-'));
  await killWhen([toolScript('trajstore'), 'import', '-f', s.path('big.jsonl'), '-t', s.path('ds')], s.env, () => builds().length > 0);
  assert.is(builds().length, 1, 'the killed create left its build directory');
  assert.not.ok(existsSync(s.path('ds')));
  // Another dataset's build directory is not this import's business.
  const other = await s.run(['import', '-f', STORYLINES, '-t', s.path('other')]);
  assert.is(other.code, 0, other.stderr);
  assert.is(builds().length, 1);
  const again = await s.run(['import', '-f', STORYLINES, '-t', s.path('ds')]);
  assert.is(again.code, 0, again.stderr);
  assert.equal(builds(), []);
});

test('parts finished by an append killed with kill -9 before its commit are removed by the next append', async () => {
  const s = sandbox('import-sweep');
  assert.is((await s.run(['import', '-f', STORYLINES, '-t', s.path('ds')])).code, 0);
  const committed = filesUnder(s.path('ds', 'parts'));
  // A real writer appending with tiny parts, so finished parts pile up long before any commit.
  const writer = pathToFileURL(join(DIST_ROOT, 'pipelines', 'dataset', 'writer.js')).href;
  const script = `
    const { DatasetWriter } = await import(${JSON.stringify(writer)});
    const w = await DatasetWriter.begin({ path: ${JSON.stringify(s.path('ds'))}, mode: 'append', kind: 'storyline', batchRows: 10, partBytes: 1 });
    for (let i = 0; ; i++) {
      await w.add('sources', [{ source_path: 'x.jsonl', source_document: i, format: 'storyline', run_count: 0, byte_size: null, sha256: null, raw: null, imported_at: '2026-05-03T00:00:00.000Z' }]);
    }`;
  const finished = (): string[] => filesUnder(s.path('ds', 'parts')).filter((f) => f.endsWith('.parquet') && !committed.includes(f));
  // A file, not `-e`: the writer's threads inherit the process's flags, and --input-type is refused there.
  writeFileSync(s.path('append.mjs'), script);
  await killWhen([s.path('append.mjs')], s.env, () => finished().length >= 3);
  const orphans = finished();
  assert.ok(orphans.length >= 3, 'the killed append left finished parts no snapshot lists');
  const before = await openDataset(s.path('ds'));
  const snapshotId = before.snapshotId;
  before.close();
  const after = await s.run(['import', '-f', STORYLINES, '-t', s.path('ds'), '--mode', 'append', '--format', 'json']);
  assert.is(after.code, 0, after.stderr);
  const parts = filesUnder(s.path('ds', 'parts'));
  for (const orphan of orphans) assert.not.ok(parts.includes(orphan), orphan);
  for (const part of committed) assert.ok(parts.includes(part), part);
  // The previous snapshot still lists only parts that exist.
  const ds = await openDataset(s.path('ds'));
  try {
    assert.is.not(ds.snapshotId, snapshotId);
    assert.is((ds.db.prepare('SELECT count(*) AS n FROM runs').get() as { n: number }).n, 4);
    const listed = Object.values(ds.snapshot.relations).flatMap((refs) => (refs ?? []).map((r) => r.key.slice('parts/'.length)));
    assert.equal(parts, [...listed].sort());
  } finally {
    ds.close();
  }
});

test.run();
