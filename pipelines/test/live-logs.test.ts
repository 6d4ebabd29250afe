/**
 * Trees as people have them: session logs still being written (a partial last line), files that
 * are not trajectories or are broken (`--on-error skip`), and compressed files (gzip, zstd),
 * through the real command.
 */
import { appendFileSync, cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync, zstdCompressSync } from 'node:zlib';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { filesUnder, sandbox } from './helpers/sandbox.js';

const s = sandbox('live-logs');
const CLAUDE = join(SHARED_FIXTURES, 'synthetic', 'claude-code', 'projects');
const CODEX = join(SHARED_FIXTURES, 'synthetic', 'codex', 'sessions');
const ATIF = join(SHARED_FIXTURES, 'persisting', 'atif');
const LEDGER = '-home-dev-ledger-svc/2ad842e0-db61-4fd6-8a57-f55969d81e22.jsonl';

const csv = async (dataset: string, sql: string): Promise<string[]> => {
  const r = await s.run(['query', dataset, '--sql', sql, '--format', 'csv']);
  assert.is(r.code, 0, r.stderr);
  return r.stdout.trim().split('\n').slice(1);
};
const stepCount = async (dataset: string): Promise<number> => Number((await csv(dataset, 'SELECT count(*) FROM steps'))[0]);

test('a live session: the partial last line is left out with an info diagnostic, and taken once it is complete', async () => {
  const tree = s.path('live');
  cpSync(CLAUDE, tree, { recursive: true });
  const complete = await s.run(['import', '-f', tree, '-t', s.path('live-complete')]);
  assert.is(complete.code, 0, complete.stderr);
  const steps = await stepCount(s.path('live-complete'));

  // The agent has written half of its next line.
  const file = join(tree, LEDGER);
  const sessionId = LEDGER.split('/')[1]?.replace('.jsonl', '');
  const next = JSON.stringify({ type: 'user', sessionId, uuid: 'f0000000-0000-4000-8000-000000000001', timestamp: '2026-05-12T10:30:00.000Z', message: { role: 'user', content: 'And the GBP case?' } });
  appendFileSync(file, next.slice(0, 40));
  const partial = await s.run(['--log-level', 'info', 'import', '-f', tree, '-t', s.path('live-partial')]);
  assert.is(partial.code, 0, partial.stderr);
  assert.match(partial.stderr, /2ad842e0-db61-4fd6-8a57-f55969d81e22\.jsonl:25: partial_line: the last line has no newline yet \(40 bytes/);
  assert.is(await stepCount(s.path('live-partial')), steps);

  appendFileSync(file, `${next.slice(40)}\n`);
  const later = await s.run(['import', '-f', tree, '-t', s.path('live-partial'), '--mode', 'replace', '--yes']);
  assert.is(later.code, 0, later.stderr);
  assert.is(await stepCount(s.path('live-partial')), steps + 1);

  // A Codex rollout whose only line is still being written is no session yet: not an error.
  const codex = s.path('codex-live');
  cpSync(CODEX, codex, { recursive: true });
  writeFileSync(join(codex, 'rollout-2026-05-16T10-00-00-0196d9ff-0000-7000-8000-000000000001.jsonl'), '{"timestamp":"2026-05-16T10:00:00.000Z","type":"session_me');
  const r = await s.run(['--log-level', 'info', 'import', '-f', codex, '-t', s.path('codex-live-ds')]);
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stderr, 'partial_line');
});

test('a truncated last line of a file that is not a live log (ATIF JSONL) is still an error', async () => {
  const doc = JSON.parse(readFileSync(join(ATIF, 'dialogue_10.json'), 'utf8'));
  writeFileSync(s.path('cut.jsonl'), `${JSON.stringify(doc)}\n${JSON.stringify({ ...doc, session_id: 'other' }).slice(0, 100)}`);
  const r = await s.run(['import', '-f', s.path('cut.jsonl'), '-t', s.path('cut')]);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, /cut\.jsonl:2:\d+: invalid JSON/);
});

/** A tree of good files and files that cannot be imported, each bad for another reason. */
function mixedTree(): { tree: string; goodRuns: number } {
  const tree = s.path('mixed');
  mkdirSync(tree, { recursive: true });
  cpSync(ATIF, join(tree, 'atif'), { recursive: true });
  cpSync(CLAUDE, join(tree, 'claude'), { recursive: true });
  writeFileSync(join(tree, 'notes.json'), '{"hello": "not a trajectory"}\n');
  writeFileSync(join(tree, 'broken.json'), '{"schema_version": "ATIF-v1.7", "steps": [');
  writeFileSync(join(tree, 'latin1.jsonl'), Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xe9, 0x22, 0x7d, 0x0a]));
  // Two good documents, then a bad one: the file goes in whole or not at all.
  const doc = JSON.parse(readFileSync(join(ATIF, 'dialogue_10.json'), 'utf8'));
  const lines = [{ ...doc, session_id: 'ok-1' }, { ...doc, session_id: 'ok-2' }, { ...doc, session_id: 'bad', steps: [{ step_id: 7, source: 'user', message: 'x' }] }];
  writeFileSync(join(tree, 'partly-bad.jsonl'), `${lines.map((l) => JSON.stringify(l)).join('\n')}\n`);
  // The same with rows over 16 MB, where the file is checked before anything of it is written.
  const big: string[] = [];
  for (let i = 0; big.length < 2500; i++) big.push(JSON.stringify({ ...doc, session_id: `big-${i}` }));
  big.push(JSON.stringify(lines[2]));
  writeFileSync(join(tree, 'big-bad.jsonl'), `${big.join('\n')}\n`);
  const goodRuns = readdirSync(ATIF).length + 3; // the ATIF files, and the two Claude Code sessions plus one subagent
  return { tree, goodRuns };
}

test('--on-error skip imports every good file whole, lists each bad one with its reason, and exits 0', async () => {
  const { tree, goodRuns } = mixedTree();
  const failed = await s.run(['import', '-f', tree, '-t', s.path('mixed-fail')]);
  assert.is(failed.code, 2, failed.stderr);
  assert.not.ok(existsSync(s.path('mixed-fail')));

  const r = await s.run(['--log-level', 'debug', 'import', '-f', tree, '-t', s.path('mixed-ds'), '--on-error', 'skip', '--format', 'json']);
  assert.is(r.code, 0, r.stderr);
  const summary = JSON.parse(r.stdout) as { files: number; skipped_files: Array<{ source_path: string; reason: string; exit_code: number }> };
  const skipped = Object.fromEntries(summary.skipped_files.map((f) => [f.source_path, f]));
  assert.equal(Object.keys(skipped).sort(), ['big-bad.jsonl', 'broken.json', 'latin1.jsonl', 'notes.json', 'partly-bad.jsonl']);
  assert.match(skipped['broken.json']?.reason ?? '', 'invalid JSON');
  assert.match(skipped['latin1.jsonl']?.reason ?? '', 'invalid UTF-8');
  assert.match(skipped['notes.json']?.reason ?? '', 'no trajectory format recognises');
  assert.match(skipped['partly-bad.jsonl']?.reason ?? '', 'partly-bad.jsonl:3');
  for (const file of Object.keys(skipped)) assert.match(r.stderr, `warn: skipped ${file}`);
  assert.match(r.stderr, /skipped 5 of \d+ file\(s\) that could not be imported/);
  assert.match(r.stderr, 'big-bad.jsonl: too big to hold until it is through; checking it first');
  assert.not.match(r.stderr, 'partly-bad.jsonl: too big to hold');
  assert.is(summary.files, filesUnder(tree).length - 5);
  // Nothing of a skipped file is in the dataset, not even the good documents before its bad line.
  assert.equal(await csv(s.path('mixed-ds'), "SELECT count(*) FROM runs WHERE session_id LIKE 'ok-%' OR session_id LIKE 'big-%'"), ['0']);
  assert.equal(await csv(s.path('mixed-ds'), 'SELECT count(*) FROM runs'), [String(goodRuns)]);
});

test('--on-error skip when every file is bad: the first file\'s exit code, and no dataset', async () => {
  const tree = s.path('all-bad');
  mkdirSync(tree);
  writeFileSync(join(tree, 'a.json'), '{"hello": 1}');
  writeFileSync(join(tree, 'b.json'), '[1, 2');
  const r = await s.run(['import', '-f', tree, '-t', s.path('all-bad-ds'), '--on-error', 'skip']);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, 'no file imported: all 2 files were skipped');
  assert.not.ok(existsSync(s.path('all-bad-ds')));
});

test('gzip and zstd sources, by their magic bytes: the same runs as the plain files; damaged data exits 2 naming the file', async () => {
  const tree = s.path('compressed');
  cpSync(CLAUDE, join(tree, 'claude'), { recursive: true });
  cpSync(ATIF, join(tree, 'atif'), { recursive: true });
  const plain = await s.run(['import', '-f', tree, '-t', s.path('plain-ds')]);
  assert.is(plain.code, 0, plain.stderr);
  filesUnder(tree).forEach((rel, i) => {
    const path = join(tree, rel);
    const bytes = readFileSync(path);
    // One gzip file keeps its plain name, known by its magic bytes; the others alternate the codecs.
    if (rel.endsWith('unicode_zh_15.json')) return writeFileSync(path, gzipSync(bytes));
    writeFileSync(`${path}${i % 2 ? '.gz' : '.zst'}`, i % 2 ? gzipSync(bytes) : zstdCompressSync(bytes));
    rmSync(path);
  });
  const r = await s.run(['import', '-f', tree, '-t', s.path('compressed-ds'), '-o', 'preserve']);
  assert.is(r.code, 0, r.stderr);
  const query = 'SELECT session_id, step_count, prompt_tokens FROM runs ORDER BY session_id, step_count';
  assert.equal(await csv(s.path('compressed-ds'), query), await csv(s.path('plain-ds'), query));

  // Preserved sources export under the names of their content, with its exact bytes.
  const atif = await s.run(['import', '-f', join(tree, 'atif'), '-t', s.path('compressed-atif'), '-o', 'preserve']);
  assert.is(atif.code, 0, atif.stderr);
  const out = s.path('preserved/');
  const exported = await s.run(['export', '-f', s.path('compressed-atif'), '-o', 'atif', '-t', out]);
  assert.is(exported.code, 0, exported.stderr);
  assert.equal(filesUnder(out).sort(), readdirSync(ATIF).sort());
  for (const f of readdirSync(ATIF)) assert.ok(readFileSync(join(out, f)).equals(readFileSync(join(ATIF, f))), f);

  writeFileSync(s.path('damaged.jsonl.gz'), gzipSync(readFileSync(join(CLAUDE, LEDGER))).subarray(0, 300));
  const damaged = await s.run(['import', '-f', s.path('damaged.jsonl.gz'), '-t', s.path('damaged-ds'), '-i', 'agentb-code']);
  assert.is(damaged.code, 2, damaged.stderr);
  assert.match(damaged.stderr, 'damaged.jsonl.gz: not valid gzip data');
  assert.not.ok(existsSync(s.path('damaged-ds')));
});

test('compact-jsonl: compressed files and --on-error skip', async () => {
  const tree = s.path('records');
  mkdirSync(tree);
  writeFileSync(join(tree, 'a.jsonl.gz'), gzipSync('{"id":"a1","t":"2026-01-01"}\n{"id":"a2","t":"2026-01-02"}\n'));
  writeFileSync(join(tree, 'b.jsonl'), '{"id":"b1","t":"2026-01-03"}\n{"id":\n');
  const failed = await s.run(['import', '-f', tree, '-t', s.path('records-fail'), '-i', 'compact-jsonl', '--column', 'id=$.id', '--column', 't=$.t']);
  assert.is(failed.code, 2, failed.stderr);
  const r = await s.run(['import', '-f', tree, '-t', s.path('records-ds'), '-i', 'compact-jsonl', '--on-error', 'skip']);
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stderr, 'skipped b.jsonl:2');
  assert.equal(await csv(s.path('records-ds'), 'SELECT filename, line FROM records ORDER BY line'), ['a.jsonl.gz,1', 'a.jsonl.gz,2']);
});

test.run();
