/**
 * `trajstore query` through the real CLI: reads over one and two mounted datasets, every output
 * format and sink, and every kind of statement that must be refused (by SQLite's own verdict),
 * plus the row, byte and time limits.
 */
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { DIST_ROOT, toolScript, runTool } from '../../lib/testing/run-tool.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { SAMPLE_RUNS, writeSampleDataset } from './helpers/search-dataset.js';

const home = mkdtempSync(join(tmpdir(), 'query-test-'));
const env = { HOME: home, XDG_CONFIG_HOME: join(home, 'config'), XDG_DATA_HOME: join(home, 'data'), XDG_CACHE_HOME: join(home, 'cache') };
const trajstore = (args: string[], input?: string | Buffer) => runTool('trajstore', args, { env, cwd: home, ...(input !== undefined ? { input } : {}) });

const ATIF_DIR = join(SHARED_FIXTURES, 'persisting', 'atif');
const atif = join(home, 'atif');
let sample = '';
/** Steps in the ATIF fixtures, counted from the files. */
const atifSteps = readdirSync(ATIF_DIR)
  .filter((f) => f.endsWith('.json'))
  .reduce((n, f) => n + (JSON.parse(readFileSync(join(ATIF_DIR, f), 'utf8')) as { steps: unknown[] }).steps.length, 0);
const sampleSteps = SAMPLE_RUNS.reduce((n, r) => n + r.steps.length, 0);

test.before(async () => {
  const r = await trajstore(['import', '-f', ATIF_DIR, '-t', atif]);
  assert.is(r.code, 0, r.stderr);
  sample = await writeSampleDataset();
});

test('a single dataset is mounted as `dataset` (and is the default schema)', async () => {
  const r = await trajstore(['query', atif, '--sql', 'SELECT count(*) AS n FROM dataset.steps', '--format', 'json']);
  assert.is(r.code, 0, r.stderr);
  assert.equal(JSON.parse(r.stdout), [{ n: atifSteps }]);
  const plain = await trajstore(['query', atif, '--sql', 'SELECT count(*) AS n FROM runs', '--format', 'csv']);
  assert.is(plain.stdout, 'n\n4\n');
});

test('several mounts in one statement, joined across datasets', async () => {
  const sql = `SELECT 'a' AS m, count(*) AS n FROM a.steps UNION ALL SELECT 'b', count(*) FROM b.steps
               UNION ALL SELECT 'both', count(*) FROM a.runs JOIN b.runs ON a.runs.source_format != b.runs.source_format`;
  const r = await trajstore(['query', '--mount', `a=${atif}`, '--mount', `b=${sample}`, '--sql', sql, '--format', 'jsonl']);
  assert.is(r.code, 0, r.stderr);
  assert.equal(
    r.stdout.trim().split('\n').map((l) => JSON.parse(l)),
    [
      { m: 'a', n: atifSteps },
      { m: 'b', n: sampleSteps },
      { m: 'both', n: 4 * SAMPLE_RUNS.length },
    ],
  );
});

test('JSON columns work with SQLite JSON functions; formats, --output, --file and stdin', async () => {
  const sql = "SELECT document_id, json_extract(extra_json, '$.coverage.tools') AS tools FROM dataset.runs ORDER BY document_id";
  const json = await trajstore(['query', atif, '--sql', sql, '--format', 'json']);
  assert.is(json.code, 0, json.stderr);
  const rows = JSON.parse(json.stdout) as Array<{ document_id: string; tools: number }>;
  assert.equal(
    rows.map((r) => `${r.document_id}=${r.tools}`),
    ['run-dialogue_10=0', 'run-multimodal_18=1', 'run-sequential_tools_12=1', 'run-unicode_zh_15=1'],
  );
  const table = await trajstore(['query', atif, '--sql', sql]);
  assert.match(table.stdout, /^DOCUMENT_ID\s+TOOLS\nrun-dialogue_10\s+0\n/);
  const csv = await trajstore(['query', atif, '--sql', sql, '--format', 'csv']);
  assert.is(csv.stdout.split('\n')[0], 'document_id,tools');
  const out = join(home, 'out.csv');
  const toFile = await trajstore(['query', atif, '--sql', sql, '--format', 'csv', '--output', out]);
  assert.is(toFile.code, 0, toFile.stderr);
  assert.is(toFile.stdout, '');
  assert.is(readFileSync(out, 'utf8'), csv.stdout);
  const file = join(home, 'q.sql');
  writeFileSync(file, `${sql}\n`);
  const fromFile = await trajstore(['query', atif, '--file', file, '--format', 'csv']);
  assert.is(fromFile.stdout, csv.stdout);
  const fromStdin = await trajstore(['query', atif, '--file', '-', '--format', 'csv'], sql);
  assert.is(fromStdin.code, 0, fromStdin.stderr);
  assert.is(fromStdin.stdout, csv.stdout);
  const datasetAfter = await trajstore(['query', '--file', '-', atif, '--format', 'csv'], sql);
  assert.is(datasetAfter.stdout, csv.stdout, '`--file -` does not swallow the DATASET after it');
  const dup = await trajstore(['query', atif, '--sql', 'SELECT 1 AS a, 2 AS a', '--format', 'json']);
  assert.equal(JSON.parse(dup.stdout), [{ a: 1, a_2: 2 }]);
  const empty = await trajstore(['query', atif, '--sql', 'SELECT * FROM runs WHERE 0']);
  assert.match(empty.stdout, '(0 rows)');
});

/** Statements that must be refused, each with what the message says. */
const REFUSED: Array<[string, string]> = [
  // runs, steps and tool_calls are views (over the tables that refer to the content store): SQLite refuses first.
  ["INSERT INTO runs (document_id) VALUES ('x')", 'cannot modify runs because it is a view'],
  ["INSERT INTO runs (document_id) VALUES ('x') RETURNING document_id", 'cannot modify runs because it is a view'],
  ["INSERT INTO runs_stored (document_id) VALUES ('x')", 'not a read-only query'],
  ["INSERT INTO runs_stored (document_id) VALUES ('x') RETURNING document_id", 'would modify a database'],
  ['UPDATE runs SET notes = 1', 'cannot modify runs because it is a view'],
  ['UPDATE runs_stored SET notes = 1', 'not a read-only query'],
  ['DELETE FROM steps', 'cannot modify steps because it is a view'],
  ['DELETE FROM contents', 'not a read-only query'],
  ['DROP TABLE runs_stored', 'not a read-only query'],
  ['DROP VIEW runs', 'not a read-only query'],
  ['CREATE TABLE t (a)', 'not a read-only query'],
  ['CREATE TEMP TABLE t (a)', 'not a read-only query'],
  ['CREATE TEMP VIEW v AS SELECT 1', 'not a read-only query'],
  ["ATTACH DATABASE '/tmp/elsewhere.sqlite' AS other", 'not a read-only query'],
  ['DETACH DATABASE dataset', 'not a read-only query'],
  ["VACUUM INTO '/tmp/copy.sqlite'", 'not a read-only query'],
  ['VACUUM', 'not a read-only query'],
  ['PRAGMA query_only = 0', 'not a read-only query'],
  ['PRAGMA writable_schema = 1', 'not a read-only query'],
  ['PRAGMA dataset.journal_mode = wal', 'not a read-only query'],
  // Assignments that answer with a row and touch no file: SQLite calls them read-only, yet they change the connection.
  ['PRAGMA mmap_size = 1000000000', 'not a read-only query (it sets a PRAGMA)'],
  ['PRAGMA dataset.locking_mode = exclusive', 'not a read-only query (it sets a PRAGMA)'],
  ['PRAGMA busy_timeout = 100000', 'not a read-only query (it sets a PRAGMA)'],
  ['PRAGMA threads = 8', 'not a read-only query (it sets a PRAGMA)'],
  ['PRAGMA hard_heap_limit = 1', 'not a read-only query (it sets a PRAGMA)'],
  ['PRAGMA soft_heap_limit(1)', 'not a read-only query (it sets a PRAGMA)'],
  ['BEGIN', 'not a read-only query'],
  ['ANALYZE', 'not a read-only query'],
  ['REINDEX', 'not a read-only query'],
  ["SELECT load_extension('/tmp/evil.so')", 'not authorized'],
  ['SELECT 1; SELECT 2', 'more than one statement'],
  ['SELECT 1; DELETE FROM steps', 'more than one statement'],
  ['SELEKT 1', 'syntax error'],
  ['SELECT * FROM dataset.nope', 'no such table'],
];

test('every write, attach, pragma change, extension load and multi-statement is refused (exit 2)', async () => {
  // Four at a time: each is a whole process.
  for (let i = 0; i < REFUSED.length; i += 4) {
    await Promise.all(
      REFUSED.slice(i, i + 4).map(async ([sql, message]) => {
        const r = await trajstore(['query', sample, '--sql', sql]);
        assert.is(r.code, 2, `${sql}: ${r.stderr}`);
        assert.is(r.stdout, '', sql);
        assert.match(r.stderr, message, sql);
      }),
    );
  }
});

test('PRAGMAs that only report still run, with or without an argument', async () => {
  for (const [sql, column, value] of [
    ['PRAGMA dataset.table_info(runs)', 'name', 'rowid'],
    ["SELECT name FROM pragma_table_info('runs')", 'name', 'rowid'],
    ['PRAGMA integrity_check(1)', 'integrity_check', 'ok'],
    ['PRAGMA query_only', 'query_only', 1],
    ['PRAGMA mmap_size', 'mmap_size', 0],
  ] as const) {
    const r = await trajstore(['query', sample, '--sql', sql, '--format', 'jsonl']);
    assert.is(r.code, 0, `${sql}: ${r.stderr}`);
    assert.is((JSON.parse(r.stdout.split('\n')[0] as string) as Record<string, unknown>)[column], value, sql);
  }
});

test('an empty statement is refused', async () => {
  const file = join(home, 'blank.sql');
  writeFileSync(file, '  \n\t\n');
  const r = await trajstore(['query', sample, '--file', file]);
  assert.is(r.code, 2);
  assert.match(r.stderr, 'the SQL statement is empty');
});

test('refused statements wrote nothing anywhere', async () => {
  assert.not.ok(existsSync('/tmp/copy.sqlite'));
  const r = await trajstore(['query', sample, '--sql', 'SELECT count(*) AS n FROM steps', '--format', 'csv']);
  assert.is(r.stdout, `n\n${sampleSteps}\n`);
});

test('--max-output-rows and --max-output-bytes cut the output, say so, and exit 5', async () => {
  const rows = await trajstore(['query', atif, '--sql', 'SELECT step_id FROM steps', '--format', 'jsonl', '--max-output-rows', '3']);
  assert.is(rows.code, 5);
  assert.is(rows.stdout.trim().split('\n').length, 3);
  assert.match(rows.stderr, 'output cut at 3 rows (--max-output-rows)');
  const table = await trajstore(['query', atif, '--sql', 'SELECT step_id FROM steps', '--max-output-rows', '2']);
  assert.is(table.code, 5);
  assert.match(table.stdout, '(truncated: output cut at 2 rows (--max-output-rows))\n');
  const partial = join(home, 'partial.jsonl');
  const toFile = await trajstore(['query', atif, '--sql', 'SELECT step_id FROM steps', '--format', 'jsonl', '--max-output-rows', '3', '--output', partial]);
  assert.is(toFile.code, 5);
  assert.is(readFileSync(partial, 'utf8').trim().split('\n').length, 3, 'the cut output is still written');
  const exact = await trajstore(['query', atif, '--sql', 'SELECT step_id FROM steps LIMIT 3', '--format', 'jsonl', '--max-output-rows', '3']);
  assert.is(exact.code, 0, 'exactly the limit is not a cut');
  const bytes = await trajstore(['query', atif, '--sql', 'SELECT message_text FROM steps', '--format', 'jsonl', '--max-output-bytes', '300']);
  assert.is(bytes.code, 5);
  assert.ok(Buffer.byteLength(bytes.stdout) <= 300 + 64, `${Buffer.byteLength(bytes.stdout)} bytes`);
  assert.match(bytes.stderr, '(--max-output-bytes)');
});

/** A statement that would run for ever: only the watchdog stops it. */
const RUNAWAY = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c';

test('a runaway statement is stopped at --timeout and exits 6', async () => {
  const started = Date.now();
  const r = await trajstore(['query', sample, '--sql', RUNAWAY, '--timeout', '1s']);
  const elapsed = Date.now() - started;
  assert.is(r.code, 6, r.stderr);
  assert.match(r.stderr, 'did not finish within 1 s');
  assert.ok(elapsed < 15_000, `took ${elapsed} ms`);
});

test('SIGINT and SIGTERM stop a runaway statement at once: exit 130 and 143, and --output leaves no file behind', async () => {
  for (const [signal, exit, message] of [
    ['SIGINT', 130, 'interrupted'],
    ['SIGTERM', 143, 'terminated'],
  ] as const) {
    const output = join(home, `interrupted-${signal}.csv`);
    const child = spawn(process.execPath, [toolScript('trajstore'), 'query', sample, '--format', 'csv', '--output', output, '--timeout', '60s', '--sql', RUNAWAY], {
      env: { ...process.env, ...env },
      cwd: home,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const sent = Date.now();
    child.kill(signal);
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    assert.is(code, exit, stderr);
    assert.match(stderr, message);
    assert.ok(Date.now() - sent < 5000, `took ${Date.now() - sent} ms to stop`);
    assert.not.ok(existsSync(output), 'no output file');
    assert.equal(readdirSync(home).filter((f) => f.includes(`interrupted-${signal}.csv`)), [], 'no temporary file either');
  }
});

let measured = 0;
/** Runs trajstore as `trajstore` does, and reads its peak resident memory in MiB (bench/lib/rusage.ts records it at exit). */
async function withPeakMemory(args: string[]): Promise<Awaited<ReturnType<typeof trajstore>> & { peakMiB: number }> {
  const file = join(home, `rusage-${measured++}.json`);
  const r = await runTool('trajstore', args, { env: { ...env, NODE_OPTIONS: `--import ${join(DIST_ROOT, 'bench', 'lib', 'rusage.js')}`, BENCH_RSS_FILE: file }, cwd: home });
  return { ...r, peakMiB: (JSON.parse(readFileSync(file, 'utf8')) as { maxRssKb: number }).maxRssKb / 1024 };
}

test('a value larger than a quarter of the memory limit is refused before it is made: exit 5, and the process stays small', async () => {
  // Each of these was made (and copied to JavaScript): the process reached 4 GB.
  const blobs = 'SELECT randomblob(500000000), randomblob(500000000), randomblob(500000000), randomblob(500000000)';
  const r = await withPeakMemory(['query', sample, '--sql', blobs, '--format', 'csv']);
  assert.is(r.code, 5, r.stderr);
  assert.match(r.stderr, 'a value the statement made is larger than 256.0 MiB');
  assert.match(r.stderr, '--max-memory');
  assert.ok(r.peakMiB < 250, `peak resident memory ${r.peakMiB} MiB`);
  const allowed = await trajstore(['query', sample, '--sql', 'SELECT length(randomblob(300000000)) AS n', '--format', 'csv', '--max-memory', '2GiB']);
  assert.is(allowed.code, 0, allowed.stderr);
  assert.is(allowed.stdout, 'n\n300000000\n', '--max-memory raises it');
  // Past 2 GiB the quarter is no longer the bound: the runtime's longest string is, and no flag raises it.
  const beyond = await trajstore(['query', sample, '--sql', 'SELECT length(randomblob(1000000000)) AS n', '--max-memory', '16GiB']);
  assert.is(beyond.code, 5, beyond.stderr);
  assert.match(beyond.stderr, /larger than 512\.0 MiB, the most one value may take \(the longest string this runtime holds\)/);
  assert.not.match(beyond.stderr, '--max-memory');
});

test('a statement that makes the process grow past --max-memory is stopped: exit 5, naming the limit', async () => {
  // Sixteen aggregates that grow together, each well below the longest value (16 MiB here); told apart, or SQLite computes one.
  const columns = Array.from({ length: 16 }, (_, i) => `length(group_concat(hex(randomblob(${1000 + i})))) AS c${i}`).join(', ');
  const sql = `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000000) SELECT ${columns} FROM c`;
  const r = await withPeakMemory(['query', sample, '--sql', sql, '--max-memory', '64MiB', '--timeout', '60s']);
  assert.is(r.code, 5, r.stderr);
  assert.match(r.stderr, 'the statement made the process grow by more than 64.0 MiB and was stopped');
  assert.match(r.stderr, 'hint: ');
  assert.ok(r.peakMiB < 250, `peak resident memory ${r.peakMiB} MiB`);
  const invalid = await trajstore(['query', sample, '--sql', 'SELECT 1', '--max-memory', 'lots']);
  assert.is(invalid.code, 2);
  assert.match(invalid.stderr, 'invalid --max-memory "lots"');
});

test('the watchdog cannot be moved and extensions cannot be loaded by the statement', async () => {
  for (const sql of [
    'SELECT trajstore_watchdog(99999999)',
    'SELECT trajstore_watchdog(99999999, 1e12, 1e9, 0)',
    // The functions that cancel a statement exist only on connections of their own (sql/watchdog.ts).
    'SELECT trajstore_sql_cancel(1)',
    "SELECT load_extension('/lib/x86_64-linux-gnu/libc.so.6')",
  ]) {
    const r = await trajstore(['query', sample, '--sql', sql]);
    assert.is(r.code, 2, `${sql}: ${r.stderr}`);
    assert.match(r.stderr, 'SQL error:');
  }
});

test('bad options and mounts exit 2 (3 for a missing dataset or file) and name the input', async () => {
  const cases: Array<[string[], number, string]> = [
    [['query', sample], 2, 'exactly one of --sql SQL or --file FILE'],
    [['query', sample, '--sql', 'SELECT 1', '--file', 'x.sql'], 2, 'exactly one of --sql SQL or --file FILE'],
    [['query', sample, '--file', join(home, 'missing.sql')], 3, 'missing.sql: no such file'],
    [['query', '--mount', 'nodataset', '--sql', 'SELECT 1'], 2, 'invalid --mount "nodataset": expected NAME=DATASET'],
    [['query', '--mount', `main=${sample}`, '--sql', 'SELECT 1'], 2, 'invalid --mount name "main"'],
    [['query', '--mount', `1x=${sample}`, '--sql', 'SELECT 1'], 2, 'invalid --mount name "1x"'],
    [['query', '--mount', `a"b=${sample}`, '--sql', 'SELECT 1'], 2, 'invalid --mount name'],
    [['query', '--mount', `a=${sample}`, '--mount', `A=${atif}`, '--sql', 'SELECT 1'], 2, 'is given twice'],
    [['query', sample, '--mount', `a=${atif}`, '--sql', 'SELECT 1'], 2, 'either a DATASET or --mount'],
    [['query', '--mount', `a=${join(home, 'nope')}`, '--sql', 'SELECT 1'], 3, 'no such dataset'],
    [['query', sample, '--sql', 'SELECT 1', '--format', 'xml'], 2, 'invalid --format "xml"'],
    [['query', sample, '--sql', 'SELECT 1', '--output', join(home, 'no-dir', 'out.csv')], 2, 'no-dir/out.csv: cannot write there (ENOENT)'],
    [['query', sample, '--sql', 'SELECT 1', '--timeout', '0'], 2, 'invalid --timeout "0"'],
    [['query', sample, '--sql', 'SELECT 1', '--max-output-rows', 'many'], 2, 'invalid --max-output-rows "many"'],
  ];
  for (const [args, code, message] of cases) {
    const r = await trajstore(args);
    assert.is(r.code, code, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message);
  }
});

test('--output inside a mounted dataset is refused before the dataset loses a file (even with --overwrite)', async () => {
  const manifest = readFileSync(join(atif, 'trajstore.json'), 'utf8');
  const files = readdirSync(atif).sort();
  const cases: string[][] = [
    ['query', atif, '--sql', 'SELECT 1', '--output', join(atif, 'trajstore.json'), '--overwrite'],
    ['query', atif, '--sql', 'SELECT 1', '--output', join(atif, 'result.csv'), '--format', 'csv'],
    ['query', '--mount', `a=${sample}`, '--mount', `b=${atif}`, '--sql', 'SELECT 1', '--output', join(atif, 'index.sqlite'), '--overwrite'],
  ];
  for (const args of cases) {
    const r = await trajstore(args);
    assert.is(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /--output .*: inside the dataset mounted as (dataset|b) \(.*\); query writes outside it/);
  }
  assert.is(readFileSync(join(atif, 'trajstore.json'), 'utf8'), manifest, 'the manifest is intact');
  assert.equal(readdirSync(atif).sort(), files, 'nothing was added or removed');
  const after = await trajstore(['query', atif, '--sql', 'SELECT count(*) AS n FROM dataset.steps', '--format', 'jsonl']);
  assert.is(after.code, 0, after.stderr);
});

test('--file: a statement too long, not UTF-8 or with a NUL byte exits 2 naming the file; an endless file is not read past the limit', async () => {
  const cases: Array<[string, Buffer, RegExp]> = [
    ['huge.sql', Buffer.alloc(16 * 1024 * 1024 + 1, ' '), /huge\.sql: the statement is longer than 16777216 bytes/],
    // Read as UTF-8 the é would become U+FFFD and the statement would silently match nothing.
    ['latin1.sql', Buffer.from("SELECT count(*) FROM dataset.runs WHERE agent_name = 'caf\xe9'", 'latin1'), /latin1\.sql: the statement is not UTF-8 text/],
    // SQLite stops reading at a NUL: what follows it would be silently dropped.
    ['nul.sql', Buffer.from('SELECT 1\0; SELECT 2'), /nul\.sql: the statement holds a NUL byte/],
  ];
  for (const [name, content, message] of cases) {
    writeFileSync(join(home, name), content);
    const r = await trajstore(['query', sample, '--file', join(home, name)]);
    assert.is(r.code, 2, `${name}: ${r.stderr}`);
    assert.match(r.stderr, message);
    assert.is(r.stdout, '', name);
  }
  const endless = await trajstore(['query', sample, '--file', '/dev/zero']);
  assert.is(endless.code, 2, endless.stderr);
  assert.match(endless.stderr, /--file \/dev\/zero: the statement is longer than 16777216 bytes/);
  const piped = await trajstore(['query', sample, '--file', '-'], Buffer.from("SELECT 'caf\xe9'", 'latin1'));
  assert.is(piped.code, 2, piped.stderr);
  assert.match(piped.stderr, /--file -: the statement is not UTF-8 text/);
});

test.after(() => {
  rmSync(home, { recursive: true, force: true });
  if (sample) rmSync(dirname(sample), { recursive: true, force: true });
});

test.run();
