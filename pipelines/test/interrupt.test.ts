/**
 * SIGINT and SIGTERM stop a writer cleanly: exit 130 or 143, and the dataset (or output file) is as it
 * was before the command: a create leaves nothing, an append leaves the old snapshot and no parts of
 * its own, an export leaves no file.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { toolScript } from '../../lib/testing/run-tool.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { filesUnder, sandbox } from './helpers/sandbox.js';

const s = sandbox('interrupt');
const STORYLINES = join(SHARED_FIXTURES, 'synthetic', 'storyline');

/** A Storyline JSONL source big enough that importing it takes seconds. */
function bigSource(name: string, runs: number): string {
  const base = JSON.parse(readFileSync(join(STORYLINES, readdirSync(STORYLINES).sort()[0] as string), 'utf8'));
  const lines: string[] = [];
  for (let i = 0; i < runs; i++) lines.push(JSON.stringify({ ...base, trajectory: `${name}-${i}` }));
  writeFileSync(s.path(`${name}.jsonl`), `${lines.join('\n')}\n`);
  return s.path(`${name}.jsonl`);
}

/** Runs trajstore, sends `signal` once `ready()` holds, and returns its exit code and stderr. */
async function interrupt(args: string[], signal: 'SIGINT' | 'SIGTERM', ready: () => boolean): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, [toolScript('trajstore'), ...args], { env: { ...process.env, ...s.env }, cwd: s.home, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  const closed = new Promise<number | null>((resolve) => child.on('close', resolve));
  const started = Date.now();
  while (Date.now() - started < 30_000 && !ready()) await new Promise((r) => setTimeout(r, 10));
  child.kill(signal);
  return { code: await closed, stderr };
}

const hidden = (): string[] => readdirSync(s.home).filter((n) => n.startsWith('.'));

test('SIGINT during a create: exit 130, no dataset and no build directory', async () => {
  const source = bigSource('create', 20_000);
  const r = await interrupt(['import', '-f', source, '-t', s.path('created')], 'SIGINT', () => hidden().some((n) => n.startsWith('.created.tmp-')));
  assert.is(r.code, 130, r.stderr);
  assert.match(r.stderr, 'interrupted');
  assert.not.ok(existsSync(s.path('created')));
  assert.equal(hidden().filter((n) => n.startsWith('.created')), []);
});

test('SIGTERM during an append: exit 143, the old snapshot and only its files', async () => {
  const dataset = s.path('appended');
  const first = await s.run(['import', '-f', STORYLINES, '-t', dataset]);
  assert.is(first.code, 0, first.stderr);
  const manifest = readFileSync(join(dataset, 'trajstore.json'), 'utf8');
  const before = filesUnder(dataset);
  const source = bigSource('append', 20_000);
  // Parts of the append appear under parts/ before its commit: stop it while it writes them.
  const r = await interrupt(['import', '-f', source, '-t', dataset, '--mode', 'append'], 'SIGTERM', () => filesUnder(dataset).length > before.length);
  assert.is(r.code, 143, r.stderr);
  assert.match(r.stderr, 'terminated');
  assert.is(readFileSync(join(dataset, 'trajstore.json'), 'utf8'), manifest);
  assert.equal(filesUnder(dataset), before);
  const runs = await s.run(['query', dataset, '--sql', 'SELECT count(*) AS n FROM runs', '--format', 'csv']);
  assert.is(runs.stdout.trim().split('\n')[1], String(readdirSync(STORYLINES).length));
});

test('SIGINT during an export: exit 130 and no output file', async () => {
  const dataset = s.path('exported');
  assert.is((await s.run(['import', '-f', bigSource('export', 20_000), '-t', dataset])).code, 0);
  const output = s.path('out.jsonl');
  const r = await interrupt(['export', '-f', dataset, '-o', 'storyline', '-t', output], 'SIGINT', () => readdirSync(s.home).some((n) => n.includes('out.jsonl')));
  assert.is(r.code, 130, r.stderr);
  assert.not.ok(existsSync(output));
  assert.equal(readdirSync(s.home).filter((n) => n.includes('out.jsonl')), []);
});

/** Files under the entries of the home whose name holds `name` (the target and any staging beside it), recursively. */
const writtenFor = (name: string): number => readdirSync(s.home).filter((n) => n.includes(name)).reduce((sum, n) => sum + (existsSync(join(s.home, n)) ? filesUnder(join(s.home, n)).length : 0), 0);

test('SIGTERM during an export to a new directory: exit 143, no directory and nothing beside it', async () => {
  const dataset = s.path('exported-dir');
  assert.is((await s.run(['import', '-f', bigSource('export-dir', 20_000), '-t', dataset])).code, 0);
  // One file per document: stopped once some are written, a directory of them would look like a whole export.
  const r = await interrupt(['export', '-f', dataset, '-o', 'storyline', '-t', s.path('newdir/')], 'SIGTERM', () => writtenFor('newdir') >= 100);
  assert.is(r.code, 143, r.stderr);
  assert.not.ok(existsSync(s.path('newdir')));
  assert.equal(readdirSync(s.home).filter((n) => n.includes('newdir')), []);
});

test('SIGINT during an export into an existing directory: exit 130, only what was there', async () => {
  const dataset = s.path('exported-dir');
  mkdirSync(s.path('olddir'));
  writeFileSync(s.path('olddir', 'keep.txt'), 'mine');
  const r = await interrupt(['export', '-f', dataset, '-o', 'storyline', '-t', s.path('olddir')], 'SIGINT', () => writtenFor('olddir') >= 100);
  assert.is(r.code, 130, r.stderr);
  assert.equal(readdirSync(s.path('olddir'), { recursive: true }), ['keep.txt']);
  assert.equal(readdirSync(s.home).filter((n) => n.includes('olddir')), ['olddir']);
});

test.run();
