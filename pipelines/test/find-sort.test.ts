/**
 * `find --sort stored|time|relevance` through the real CLI: the order of the matches changes, the
 * set of matches never does (compared whole, for text, JSON, NOT and OR expressions), relevance is
 * BM25 (the step that says the term most, in the fewest words, first), and a relevance request
 * with nothing to rank by says so and keeps the stored order.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { sandbox } from './helpers/sandbox.js';
import { SAMPLE_RUNS, writeSampleDataset, type RunSpec } from './helpers/search-dataset.js';

const s = sandbox('find-sort-test-');
let ds = '';

const filler = 'the operator looked at many unrelated dashboards and graphs before lunch '.repeat(6);
const RUNS: RunSpec[] = [
  ...SAMPLE_RUNS,
  // Stored before the others that mention the disk, yet dated last and saying "disk" once among many words.
  { document_id: 'r-once', session_id: 's-once', source_path: 'r/once.json', steps: [{ source: 'user', message: `${filler} the disk`, timestamp: '2026-07-01T00:00:00.000Z' }] },
  { document_id: 'r-often', session_id: 's-often', source_path: 'r/often.json', steps: [{ source: 'agent', message: 'disk disk: the disk is full, disk', timestamp: '2026-04-01T00:00:00.000Z' }] },
  { document_id: 'r-undated', session_id: 's-undated', source_path: 'r/undated.json', steps: [{ source: 'user', message: 'which disk?' }] },
];

test.before(async () => {
  ds = await writeSampleDataset(RUNS);
});

interface Doc {
  search: { sort: string; mode: string };
  matches: Array<{ document_id: string; step_id: string | null }>;
}

async function find(args: string[]): Promise<{ doc: Doc; stderr: string }> {
  const r = await s.run(['find', ds, ...args, '--format', 'json', '--max-results', '1000']);
  assert.is(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
  return { doc: JSON.parse(r.stdout) as Doc, stderr: r.stderr };
}

const keys = (doc: Doc): string[] => doc.matches.map((m) => `${m.document_id}#${m.step_id ?? ''}`);

test('the match set is the same in every order', async () => {
  for (const expression of ['disk', 'disk AND NOT full', 'disk OR 日志', '#user(disk)', '$.status = "done"', 'Filesystem AND $.latency > 1', 'NOT disk']) {
    const sets = [];
    for (const sort of ['stored', 'time', 'relevance']) sets.push(keys((await find(['--match', expression, '--sort', sort])).doc).sort());
    assert.ok(sets[0]!.length > 0, `${expression} matches something`);
    assert.equal(sets[1], sets[0], `${expression}: time`);
    assert.equal(sets[2], sets[0], `${expression}: relevance`);
  }
});

test('stored is the default; time is oldest first with undated matches last; relevance is BM25 best first', async () => {
  const stored = await find(['--match', 'disk']);
  assert.is(stored.doc.search.sort, 'stored');
  assert.equal(keys(stored.doc), ['doc-a#2', 'doc-a#3', 'r-once#1', 'r-often#1', 'r-undated#1']);
  const time = await find(['--match', 'disk', '--sort', 'time']);
  assert.is(time.doc.search.sort, 'time');
  assert.equal(keys(time.doc), ['r-often#1', 'doc-a#2', 'doc-a#3', 'r-once#1', 'r-undated#1']);
  const relevance = await find(['--match', 'disk', '--sort', 'relevance']);
  assert.is(relevance.doc.search.sort, 'relevance');
  assert.is(keys(relevance.doc)[0], 'r-often#1');
  assert.is(keys(relevance.doc).at(-1), 'r-once#1');
  // With a cut, relevance keeps the best ones.
  const r = await s.run(['find', ds, '--match', 'disk', '--sort', 'relevance', '--max-results', '1', '--format', 'json']);
  assert.equal(keys(JSON.parse(r.stdout) as Doc), ['r-often#1']);
});

test('relevance with nothing to rank by keeps the stored order and says so; runs sort by start time', async () => {
  const json = await find(['--match', '$.count > 1', '--sort', 'relevance']);
  assert.is(json.doc.search.sort, 'stored');
  assert.match(json.stderr, /--sort relevance: nothing to rank by/);
  const runs = await find(['--match', '$.count > 1', '--sort', 'time']);
  assert.equal(keys(runs.doc), ['doc-a#', 'doc-b#']);
  const either = await find(['--match', 'disk OR 日志', '--sort', 'relevance']);
  assert.is(either.doc.search.sort, 'stored');
});

test('a bad --sort exits 2', async () => {
  const r = await s.run(['find', ds, '--match', 'disk', '--sort', 'best']);
  assert.is(r.code, 2);
  assert.match(r.stderr, /invalid --sort "best"/);
  assert.match(r.stderr, /stored, time, relevance/);
});

test.run();
