/**
 * `trajstore find` through the real CLI: over the ATIF fixtures imported with `trajstore import`
 * (expected answers computed here from the fixture JSON, not by the code under test), and over a
 * small hand-made dataset for typed JSON comparisons, word and phrase rules, LIKE wildcards and NULL columns.
 */
import { createHash } from 'node:crypto';
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import Database from 'better-sqlite3';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool } from '../../lib/testing/run-tool.js';
import { parseExpression } from '../search/grammar/parser.js';
import { planFind, searchMode } from '../search/planner.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { writeLargeDataset, writeSampleDataset } from './helpers/search-dataset.js';

const home = mkdtempSync(join(tmpdir(), 'find-test-'));
const env = { HOME: home, XDG_CONFIG_HOME: join(home, 'config'), XDG_DATA_HOME: join(home, 'data'), XDG_CACHE_HOME: join(home, 'cache') };
const trajstore = (args: string[]) => runTool('trajstore', args, { env, cwd: home });

const ATIF_DIR = join(SHARED_FIXTURES, 'persisting', 'atif');
const atifDataset = join(home, 'atif');
let sampleDataset = '';

interface FixtureStep {
  step_id: number;
  source: string;
  message: string | Array<{ type: string; text?: string }>;
  reasoning_content?: string;
  observation?: { results: Array<{ content: string | Array<{ text?: string }> }> };
  metrics?: Record<string, number>;
  extra?: Record<string, unknown>;
}
interface FixtureDoc {
  trajectory_id: string;
  session_id: string;
  extra?: Record<string, unknown>;
  steps: FixtureStep[];
}
const fixtures: Array<{ file: string; doc: FixtureDoc }> = readdirSync(ATIF_DIR)
  .filter((f) => f.endsWith('.json'))
  .map((file) => ({ file, doc: JSON.parse(readFileSync(join(ATIF_DIR, file), 'utf8')) as FixtureDoc }));

const partsText = (value: string | Array<{ text?: string }>): string[] => (typeof value === 'string' ? [value] : value.map((p) => p.text ?? ''));
/** The texts of a step that `find` searches by default: message, reasoning, observation results. */
function stepTexts(step: FixtureStep, field: 'content' | 'reasoning' | 'message' = 'content'): string[] {
  const message = partsText(step.message);
  const reasoning = step.reasoning_content ? [step.reasoning_content] : [];
  const observation = (step.observation?.results ?? []).flatMap((r) => partsText(r.content));
  return field === 'message' ? message : field === 'reasoning' ? reasoning : [...message, ...reasoning, ...observation];
}
/** `document_id/step_id` of every fixture step for which `keep` holds. */
function expectedSteps(keep: (step: FixtureStep, doc: FixtureDoc) => boolean): string[] {
  return fixtures.flatMap(({ doc }) => doc.steps.filter((s) => keep(s, doc)).map((s) => `${doc.trajectory_id}/${s.step_id}`)).sort();
}
/**
 * The test's own reading of the full-text rule: words are runs of letters and digits, compared
 * without case or accents, each Chinese, Japanese or Korean character is a word of its own, and a term matches a
 * text that holds its words in order.
 */
const CJK = '[\\p{Script=Han}\\p{Script=Hiragana}\\p{Script=Katakana}\\p{Script=Hangul}\u30FC]';
const WORD = new RegExp(`${CJK}|(?:(?!${CJK})[\\p{L}\\p{N}])+`, 'gu');
const words = (text: string): string[] => text.normalize('NFD').replace(/\p{M}/gu, '').toLowerCase().match(WORD) ?? [];
function containsPhrase(texts: string[], term: string): boolean {
  const phrase = words(term);
  return texts.some((text) => {
    const all = words(text);
    for (let i = 0; i + phrase.length <= all.length; i++) if (phrase.every((w, j) => all[i + j] === w)) return true;
    return false;
  });
}

interface FindDoc {
  dataset_uri: string;
  snapshot_id: string;
  query: { matches: string[]; expression: string | null };
  search: { mode: string; scope: string; fts_available: boolean; tokenizer: string | null };
  truncated: boolean;
  matches: Array<Record<string, string | null>>;
}
async function findJson(dataset: string, args: string[]): Promise<FindDoc> {
  const r = await trajstore(['find', dataset, ...args, '--format', 'json', '--max-results', '1000']);
  assert.is(r.code, 0, r.stderr);
  return JSON.parse(r.stdout) as FindDoc;
}
/** Runs the cases four at a time (each is a whole process). */
async function inBatches<T>(cases: readonly T[], run: (c: T) => Promise<void>): Promise<void> {
  for (let i = 0; i < cases.length; i += 4) await Promise.all(cases.slice(i, i + 4).map(run));
}
const stepKeys = (doc: FindDoc) => doc.matches.map((m) => `${m.document_id}/${m.step_id}`).sort();
const runKeys = (doc: FindDoc) => doc.matches.map((m) => m.document_id).sort();

test.before(async () => {
  const r = await trajstore(['import', '-f', ATIF_DIR, '-t', atifDataset]);
  assert.is(r.code, 0, r.stderr);
  sampleDataset = await writeSampleDataset();
});

test('the JSON document has exactly the reference fields', async () => {
  const doc = await findJson(atifDataset, ['--match', '无损存储']);
  assert.equal(Object.keys(doc), ['dataset_uri', 'snapshot_id', 'query', 'search', 'truncated', 'matches']);
  assert.equal(doc.query, { matches: ['无损存储'], expression: '无损存储' });
  assert.equal(doc.search, { mode: 'fts', scope: 'steps', sort: 'stored', fts_available: true, tokenizer: 'unicode61+cjk-chars' });
  assert.is(doc.dataset_uri, atifDataset);
  const manifest = JSON.parse(readFileSync(join(atifDataset, 'trajstore.json'), 'utf8')) as { snapshot_id: string };
  assert.is(doc.snapshot_id, manifest.snapshot_id);
  assert.ok(doc.matches.length > 0);
  for (const m of doc.matches) {
    assert.equal(Object.keys(m), ['source_path', 'document_id', 'run_id', 'session_id', 'step_id', 'step_source', 'effective_kind', 'timestamp', 'preview']);
  }
  assert.is(doc.matches[0]?.source_path, 'unicode_zh_15.json');
  assert.is(doc.matches[0]?.session_id, 'fixture-unicode_zh_15');
});

test('a Chinese phrase is found through the full-text index, wherever its characters stand together', async () => {
  for (const term of ['无损存储', '验证中文、标点']) {
    const doc = await findJson(atifDataset, ['--match', `"${term}"`]);
    const expected = expectedSteps((s) => containsPhrase(stepTexts(s), term));
    assert.ok(expected.length > 0);
    assert.equal(stepKeys(doc), expected);
    for (const m of doc.matches) assert.match(m.preview ?? '', term);
  }
});

test('Chinese terms of 1-2 characters are found too', async () => {
  for (const term of ['中文', '轮']) {
    const doc = await findJson(atifDataset, ['--match', term]);
    assert.equal(stepKeys(doc), expectedSteps((s) => containsPhrase(stepTexts(s), term)));
    assert.ok(doc.matches.length > 0);
  }
});

test('scoped fields select the column and the step source', async () => {
  const reasoning = await findJson(atifDataset, ['--match', '#reasoning(evidence)']);
  assert.equal(stepKeys(reasoning), expectedSteps((s) => containsPhrase(stepTexts(s, 'reasoning'), 'evidence')));
  assert.ok(reasoning.matches.length > 0);
  const user = await findJson(atifDataset, ['--match', '#user("Unicode")']);
  assert.equal(stepKeys(user), expectedSteps((s) => s.source === 'user' && containsPhrase(stepTexts(s, 'message'), 'Unicode')));
  assert.ok(user.matches.every((m) => m.step_source === 'user'));
  const agent = await findJson(atifDataset, ['--match', '#agent("Unicode")']);
  assert.equal(stepKeys(agent), expectedSteps((s) => s.source === 'agent' && containsPhrase(stepTexts(s, 'message'), 'Unicode')));
});

test('AND, OR, NOT and parentheses combine as the grammar says', async () => {
  const either = await findJson(atifDataset, ['--match', '无损存储 OR #reasoning(evidence)']);
  assert.equal(stepKeys(either), expectedSteps((s) => containsPhrase(stepTexts(s), '无损存储') || containsPhrase(stepTexts(s, 'reasoning'), 'evidence')));
  const butNot = await findJson(atifDataset, ['--match', '无损存储 AND NOT (#user(Unicode) OR #system(Unicode))']);
  assert.equal(
    stepKeys(butNot),
    expectedSteps((s) => containsPhrase(stepTexts(s), '无损存储') && !(['user', 'system'].includes(s.source) && containsPhrase(stepTexts(s, 'message'), 'Unicode'))),
  );
  // Repeated --match: all must hold.
  const both = await findJson(atifDataset, ['--match', '无损存储', '--match', '#reasoning(evidence)']);
  assert.equal(stepKeys(both), expectedSteps((s) => containsPhrase(stepTexts(s), '无损存储') && containsPhrase(stepTexts(s, 'reasoning'), 'evidence')));
  assert.equal(both.query.expression, '(无损存储) AND (#reasoning(evidence))');
});

test('a JSON-only expression searches the runs', async () => {
  const doc = await findJson(atifDataset, ['--match', '$.coverage.tools=true AND NOT $.coverage.reasoning=true']);
  assert.equal(doc.search, { mode: 'json', scope: 'runs', sort: 'stored', fts_available: true, tokenizer: 'unicode61+cjk-chars' });
  const expected = fixtures
    .filter(({ doc: d }) => (d.extra?.coverage as Record<string, boolean>).tools === true && (d.extra?.coverage as Record<string, boolean>).reasoning !== true)
    .map(({ doc: d }) => d.trajectory_id)
    .sort();
  assert.equal(runKeys(doc), expected);
  assert.ok(doc.matches.every((m) => m.step_id === null));
});

test('#json.metrics(...) alone searches steps; text and JSON together search step JSON', async () => {
  const metrics = await findJson(atifDataset, ['--match', '#json.metrics("$.prompt_tokens") > 170']);
  assert.equal(metrics.search.mode, 'json');
  assert.equal(metrics.search.scope, 'steps');
  assert.equal(stepKeys(metrics), expectedSteps((s) => (s.metrics?.prompt_tokens ?? -1) > 170));
  const mixed = await findJson(atifDataset, ['--match', '无损存储 AND $.ordinal <= 4']);
  assert.equal(mixed.search.mode, 'fts+json');
  assert.equal(stepKeys(mixed), expectedSteps((s) => containsPhrase(stepTexts(s), '无损存储') && typeof s.extra?.ordinal === 'number' && s.extra.ordinal <= 4));
  assert.is(mixed.matches.length, 4);
});

test('identity modes: run, document, session, session + step, and --source', async () => {
  const byDoc = await findJson(atifDataset, ['--document-id', 'run-dialogue_10']);
  assert.equal(byDoc.search.mode, 'identity');
  assert.equal(byDoc.search.scope, 'runs');
  assert.equal(runKeys(byDoc), ['run-dialogue_10']);
  const bySession = await findJson(atifDataset, ['--session-id', 'fixture-unicode_zh_15']);
  assert.equal(runKeys(bySession), ['run-unicode_zh_15']);
  const byStep = await findJson(atifDataset, ['--session-id', 'fixture-unicode_zh_15', '--step-id', '3']);
  assert.equal(byStep.search.scope, 'steps');
  assert.equal(stepKeys(byStep), ['run-unicode_zh_15/3']);
  assert.is(byStep.matches[0]?.step_source, 'agent');
  const byRun = await findJson(sampleDataset, ['--run-id', 'run-2']);
  assert.equal(runKeys(byRun), ['doc-b']);
  const none = await findJson(atifDataset, ['--document-id', 'no-such-doc']);
  assert.equal(none.matches, []);
  const sourced = await findJson(atifDataset, ['--match', '#json.metrics("$.prompt_tokens") > 0', '--source', 'dialogue_10.json']);
  assert.ok(sourced.matches.length > 0);
  assert.ok(sourced.matches.every((m) => m.source_path === 'dialogue_10.json'));
});

test('typed JSON comparisons: a number never equals a string, null and booleans are exact', async () => {
  const cases: Array<[string, string[]]> = [
    ['$.count = 5', ['doc-a']],
    ['$.count = "5"', []],
    ['$.label = "5"', ['doc-a']],
    ['$.label = 5', []],
    ['$.count > 10', ['doc-b']],
    ['$.score >= 0.2', ['doc-a', 'doc-b']],
    ['$.flag = true', ['doc-a']],
    ['$.flag != true', []],
    ['$.nothing = null', ['doc-a']],
    ['$.nothing != null', []],
    ['$.status != done', ['doc-b']],
    ['$.status = "done" OR $.team = blue', ['doc-a', 'doc-b']],
    ['NOT $.missing = 1', ['doc-a', 'doc-b']],
    ['#json.meta("$.team") = blue', ['doc-b']],
    ['#json.final_metrics("$.total_steps") = 3', ['doc-a']],
  ];
  await inBatches(cases, async ([expression, expected]) => {
    const doc = await findJson(sampleDataset, ['--match', expression]);
    assert.equal(runKeys(doc), expected, expression);
  });
});

test('text terms: words and phrases, accents folded, wildcards literal, NULL columns count as not containing, #model uses the agent model', async () => {
  const cases: Array<[string, string[]]> = [
    // Terms without letters or digits are substring scans, where LIKE's wildcards are plain characters.
    ['"%_"', ['doc-a/3']],
    ['_', ['doc-a/3']],
    // Others are phrases of whole words, whatever punctuation stands between them.
    ['"100%_used"', ['doc-a/3']],
    ['"100 used"', ['doc-a/3']],
    ['"0%_u"', []],
    ['dis', []],
    ['"cafe noel"', ['doc-a/1']],
    ['"CAFÉ NOËL"', ['doc-a/1']],
    ['"noel cafe"', []],
    // Japanese, character by character: any run of characters where it stands, not the same ones apart.
    ['コーヒー', ['doc-a/1']],
    ['ーヒ', ['doc-a/1']],
    ['"茶店"', ['doc-a/1']],
    ['"喫店"', []],
    // Korean too, so a word is found with a particle attached.
    ['서버', ['doc-a/2']],
    ['"서버를"', []],
    ['NOT disk', ['doc-a/1', 'doc-b/1', 'doc-b/2', 'doc-b/3']],
    ['ok', ['doc-b/3']],
    ['DISK', ['doc-a/2', 'doc-a/3']],
    ['#model(gpt-x-mini)', ['doc-a/3']],
    ['#model(claude)', ['doc-b/1', 'doc-b/2', 'doc-b/3']],
    ['#all(claude-y)', ['doc-b/1', 'doc-b/2', 'doc-b/3']],
    ['#prompt(disk)', ['doc-a/2']],
    ['#observation("100% used")', ['doc-a/3']],
    ['日志 AND #assistant(日志)', ['doc-b/2']],
    // Longer than SQLite takes as a LIKE pattern (50000 bytes): still a substring scan, not an SQL error.
    [`"${'-'.repeat(60_000)}"`, []],
    [`#model("${'x'.repeat(60_000)}")`, []],
    [`NOT #model("${'x'.repeat(60_000)}") AND #model(GPT-X-MINI)`, ['doc-a/3']],
  ];
  await inBatches(cases, async ([expression, expected]) => {
    const doc = await findJson(sampleDataset, ['--match', expression]);
    assert.equal(stepKeys(doc), expected, expression);
  });
});

test('limits: --max-results truncates, previews are cut at a code point, tables say so', async () => {
  const all = expectedSteps((s) => containsPhrase(stepTexts(s), '无损存储'));
  const r = await trajstore(['find', atifDataset, '--match', '无损存储', '--format', 'json', '--max-results', '3', '--max-preview-bytes', '10']);
  assert.is(r.code, 0, r.stderr);
  const doc = JSON.parse(r.stdout) as FindDoc;
  assert.ok(all.length > 3);
  assert.is(doc.matches.length, 3);
  assert.is(doc.truncated, true);
  for (const m of doc.matches) {
    const bytes = Buffer.from(m.preview ?? '', 'utf8');
    assert.ok(bytes.length <= 10, `preview of ${bytes.length} bytes`);
    assert.not.match(m.preview ?? '', '\ufffd');
  }
  const table = await trajstore(['find', atifDataset, '--match', '无损存储', '--max-results', '2']);
  assert.is(table.code, 0);
  assert.match(table.stdout, /^DOCUMENT_ID\s+STEP\s+SOURCE\s+TIMESTAMP\s+PREVIEW\n/);
  assert.match(table.stdout, '(truncated)\n');
  const empty = await trajstore(['find', atifDataset, '--match', 'zzzz-no-such-text']);
  assert.is(empty.code, 0);
  assert.is(empty.stdout, '(0 matches)\n');
  const total = await trajstore(['find', atifDataset, '--match', '无损存储', '--format', 'json', '--max-total-bytes', '600']);
  const cut = JSON.parse(total.stdout) as FindDoc;
  assert.is(cut.truncated, true);
  assert.ok(Buffer.byteLength(JSON.stringify(cut.matches)) <= 600);
});

test('--timeout stops the search and exits 6', async () => {
  // Substring scans (terms without letters) over 20,000 steps of 500 bytes take tens of
  // milliseconds: time enough for the watchdog's thread to run on a loaded machine.
  const big = await writeLargeDataset(200, 100);
  try {
    const r = await trajstore(['find', big, '--match', '"%_" OR "-=" OR "+*" OR "<>" OR "^~" OR "|;"', '--timeout', '1ms']);
    assert.is(r.code, 6, r.stderr);
    assert.match(r.stderr, 'did not finish within 0.001 s');
    assert.is(r.stdout, '');
  } finally {
    rmSync(dirname(big), { recursive: true, force: true });
  }
});

test('bad input exits 2 and names it: grammar errors with a caret, options, modes', async () => {
  const grammar = await trajstore(['find', atifDataset, '--match', 'disk AND (full']);
  assert.is(grammar.code, 2);
  assert.is(grammar.stdout, '');
  assert.match(grammar.stderr, 'invalid --match expression at column 10: unclosed `(`\n  disk AND (full\n           ^\n');
  const second = await trajstore(['find', atifDataset, '--match', 'ok', '--match', '$.a >']);
  assert.is(second.code, 2);
  assert.match(second.stderr, 'invalid --match #2 expression at column 6');
  const cases: Array<[string[], string]> = [
    [[], 'find needs --match, --run-id, --document-id or --session-id'],
    [['--match', 'x', '--run-id', 'r'], 'give only one of'],
    [['--step-id', '3'], '--step-id needs --session-id'],
    [['--match', 'x', '--max-results', '0'], 'invalid --max-results "0"'],
    [['--match', 'x', '--max-preview-bytes', 'lots'], 'invalid --max-preview-bytes "lots"'],
    [['--match', 'x', '--timeout', 'soon'], 'invalid --timeout "soon"'],
    [['--match', 'x', '--format', 'xml'], 'invalid --format "xml"'],
  ];
  for (const [args, message] of cases) {
    const r = await trajstore(['find', atifDataset, ...args]);
    assert.is(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message);
  }
  // Expressions built to exhaust the parser or SQLite are refused as input, not crashes.
  for (const expression of [`${'('.repeat(3000)}x${')'.repeat(3000)}`, `${'NOT '.repeat(20_000)}x`, Array.from({ length: 5000 }, (_, i) => `w${i}`).join(' OR ')]) {
    const r = await trajstore(['find', atifDataset, '--match', expression]);
    assert.is(r.code, 2, r.stderr.slice(0, 300));
    assert.match(r.stderr, /nests deeper than 64 levels|more than 256 search terms/);
  }
  const missing = await trajstore(['find', join(home, 'no-such-dataset'), '--match', 'x']);
  assert.is(missing.code, 3);
});

test('an unavailable full-text index is reported, and text is still found by a scan', async () => {
  const copy = join(home, 'no-fts');
  cpSync(atifDataset, copy, { recursive: true });
  const db = new Database(join(copy, 'index.sqlite'));
  db.exec("DROP TABLE steps_fts; UPDATE index_meta SET value = '0' WHERE key = 'fts_available'");
  db.close();
  const r = await trajstore(['find', copy, '--match', '无损存储', '--format', 'json', '--max-results', '1000']);
  assert.is(r.code, 0, r.stderr);
  const doc = JSON.parse(r.stdout) as FindDoc;
  assert.is(doc.search.fts_available, false);
  assert.match(r.stderr, 'full-text index');
  assert.match(r.stderr, 'not available');
  assert.equal(stepKeys(doc), expectedSteps((s) => containsPhrase(stepTexts(s), '无损存储')));
});

test('the planner: modes and scopes, and user values only ever as parameters', () => {
  const mode = (e: string) => searchMode([parseExpression(e)]);
  assert.equal(mode('disk'), { mode: 'fts', scope: 'steps' });
  assert.equal(mode('$.a=1'), { mode: 'json', scope: 'runs' });
  assert.equal(mode('#json("$.a")=1 OR #json.extra($.b)=2'), { mode: 'json', scope: 'runs' });
  assert.equal(mode('#json.metrics("$.a")=1'), { mode: 'json', scope: 'steps' });
  assert.equal(mode('#json.metrics("$.a")=1 OR $.b=2'), { mode: 'json', scope: 'steps' });
  assert.equal(mode('disk OR $.a=1'), { mode: 'fts+json', scope: 'steps' });
  // A term every match must contain drives the search from the FTS index (so LIMIT stops early); OR, NOT,
  // terms without letters or digits and #model/#all cannot drive it.
  const drives = (e: string) => planFind({ expressions: [parseExpression(e)], limit: 5, ftsAvailable: true }).sql.includes('FROM steps_fts JOIN steps s');
  assert.ok(drives('disk'));
  assert.ok(drives('ab disk NOT full'));
  assert.ok(drives('#user(disk) $.a=1'));
  assert.not.ok(drives('disk OR full'));
  assert.not.ok(drives('NOT disk'));
  assert.ok(drives('ab'));
  assert.not.ok(drives('"%_"'));
  assert.not.ok(drives('#model(gpt-x) #all(claude)'));
  assert.not.ok(planFind({ expressions: [parseExpression('disk')], limit: 5, ftsAvailable: false }).sql.includes('steps_fts'));
  const hostile = `x'); DROP TABLE runs; --`;
  const plan = planFind({ expressions: [parseExpression(`"${hostile}" OR $.status="${hostile}" OR #model("${hostile}")`)], sourcePath: hostile, limit: 5, ftsAvailable: true });
  assert.not.match(plan.sql, 'DROP');
  assert.ok(plan.params.some((p) => typeof p === 'string' && p.includes('DROP TABLE')));
});

test('find, stats, list and query leave the dataset byte for byte unchanged', async () => {
  const digest = (dir: string): string => {
    const hash = createHash('sha256');
    const walk = (d: string): void => {
      for (const name of readdirSync(d).sort()) {
        const p = join(d, name);
        if (statSync(p).isDirectory()) walk(p);
        else hash.update(name).update(readFileSync(p));
      }
    };
    walk(dir);
    return hash.digest('hex');
  };
  const before = digest(atifDataset);
  for (const args of [
    ['find', atifDataset, '--match', 'evidence OR $.a=1'],
    ['stats', atifDataset],
    ['stats', 'tools', atifDataset],
    ['ls', atifDataset],
    ['query', atifDataset, '--sql', 'SELECT count(*) FROM dataset.steps'],
    ['query', atifDataset, '--sql', 'DELETE FROM steps'],
  ]) {
    await trajstore(args);
  }
  assert.is(digest(atifDataset), before);
});

test.after(() => {
  rmSync(home, { recursive: true, force: true });
  if (sampleDataset) rmSync(dirname(sampleDataset), { recursive: true, force: true });
});

test.run();
