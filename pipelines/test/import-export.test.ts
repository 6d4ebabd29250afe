/**
 * `trajstore import` / `export` through the real CLI over real datasets: round trips, byte-exact
 * preserve and compact exports, create/append/replace semantics (exit 4, failures leave nothing
 * behind, `kill -9` in the middle of an append leaves the previous snapshot readable), bad inputs and
 * flag misuse, and the Parquet parts read back by an independent reader (parquet-wasm + apache-arrow).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readParquet } from 'parquet-wasm/node';
import { tableFromIPC } from 'apache-arrow';
import { toolScript, runTool } from '../../lib/testing/run-tool.js';
import { openDataset } from '../dataset/open.js';
import { STORYLINE_RELATIONS, RECORDS, type ColumnDef } from '../dataset/relations.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { filesUnder, sandbox } from './helpers/sandbox.js';
import { INDEX_FORMAT } from '../dataset/index-meta.js';
import { LAYOUT_VERSION } from '../dataset/layout.js';

const SYNTHETIC = join(SHARED_FIXTURES, 'synthetic');
const STORYLINES = join(SYNTHETIC, 'storyline');
const COMPACT = join(SYNTHETIC, 'compact-jsonl');


const fixtureStorylines = () => readdirSync(STORYLINES).sort().map((f) => JSON.parse(readFileSync(join(STORYLINES, f), 'utf8')));

test('a Storyline import makes a dataset whose index and parts hold the documents', async () => {
  const s = sandbox('import-export');
  const r = await s.run(['import', '-f', STORYLINES, '-t', s.path('ds'), '--format', 'json']);
  assert.is(r.code, 0, r.stderr);
  const summary = JSON.parse(r.stdout);
  assert.is(summary.total.runs, 2);
  assert.is(summary.total.steps, 6);
  assert.is(summary.total.tool_calls, 1);
  assert.equal(summary.by_format.map((f: { format: string }) => f.format), ['storyline']);
  assert.equal(filesUnder(s.path('ds')).filter((f) => !f.startsWith('parts')), ['index.sqlite', `snapshots/${summary.snapshot_id}.json`, 'trajstore.json']);
  const ds = await openDataset(s.path('ds'));
  try {
    assert.is(ds.snapshotId, summary.snapshot_id);
    assert.is(ds.indexState, 'present');
    const runs = ds.db.prepare('SELECT document_id, step_count, tool_call_count, started_at FROM runs ORDER BY document_id').all() as Array<Record<string, unknown>>;
    assert.equal(runs.map((x) => x.document_id), ['incident-triage-0007/sub-1', 'traj-incident-0007']);
    assert.match(String(runs[1]?.started_at), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    const meta = Object.fromEntries((ds.db.prepare('SELECT key, value FROM index_meta').all() as Array<{ key: string; value: string }>).map((m) => [m.key, m.value]));
    assert.equal({ ...meta, built_at: 'x' }, { snapshot_id: ds.snapshotId, index_format: INDEX_FORMAT, layout_version: String(LAYOUT_VERSION), kind: 'storyline', fts_available: '1', tokenizer: 'unicode61+cjk-chars', built_at: 'x' });
    const text = ds.db.prepare('SELECT message_text FROM steps WHERE rowid = 1').get() as { message_text: string };
    const term = text.message_text.split(/\s+/).slice(0, 2).join(' ');
    const hit = ds.db.prepare('SELECT count(*) AS n FROM steps_fts WHERE steps_fts MATCH ?').get(`"${term.replaceAll('"', '""')}"`) as { n: number };
    assert.ok(hit.n >= 1, `FTS finds ${term}`);
  } finally {
    ds.close();
  }
  // A missing index is rebuilt from the parts, identical in content.
  rmSync(s.path('ds', 'index.sqlite'));
  const again = await openDataset(s.path('ds'));
  try {
    assert.is(again.indexState, 'rebuilt');
    assert.equal((again.db.prepare('SELECT count(*) AS n FROM steps').get() as { n: number }).n, 6);
  } finally {
    again.close();
  }
});

/** Arrow type names for relations.ts types, as an independent Parquet reader reports them. */
const ARROW_TYPE: Record<ColumnDef['type'], string> = { string: 'Utf8', json: 'Utf8', int64: 'Int64', double: 'Float64', bool: 'Bool', binary: 'Binary' };

function arrowSchemaOf(file: string) {
  const table = tableFromIPC(readParquet(readFileSync(file)).intoIPCStream());
  return { rows: table.numRows, fields: table.schema.fields.map((f) => ({ name: f.name, type: String(f.type), nullable: f.nullable })), table };
}

test('Parquet parts read back by parquet-wasm + apache-arrow have the documented columns and types', async () => {
  const s = sandbox('import-export');
  assert.is((await s.run(['import', '-f', STORYLINES, '-t', s.path('ds'), '-o', 'preserve'])).code, 0);
  const snapshot = JSON.parse(readFileSync(s.path('ds', 'snapshots', `${JSON.parse(readFileSync(s.path('ds', 'trajstore.json'), 'utf8')).snapshot_id}.json`), 'utf8'));
  const expectedRows: Record<string, number> = { runs: 2, steps: 6, tool_calls: 1, sources: 2 };
  for (const [relation, columns] of Object.entries(STORYLINE_RELATIONS)) {
    const parts = snapshot.relations[relation] as Array<{ key: string; rows: number }>;
    // These documents have no string long enough for the content store (content-store.test.ts reads its parts),
    // and an import writes no gateway events (the gateway's projection does: gateway-events.test.ts).
    if (relation === 'contents' || relation === 'events') {
      assert.equal(parts, []);
      continue;
    }
    assert.is(parts.length, 1, relation);
    const { rows, fields, table } = arrowSchemaOf(s.path('ds', ...parts[0]!.key.split('/')));
    assert.is(rows, expectedRows[relation], relation);
    assert.equal(fields, columns.map((c) => ({ name: c.name, type: ARROW_TYPE[c.type], nullable: c.nullable })), relation);
    if (relation === 'sources') {
      const raw = table.getChild('raw')!.get(0) as Uint8Array;
      assert.equal(Buffer.from(raw), readFileSync(join(STORYLINES, 'incident-triage-0007.storyline.json')));
    }
  }
});

test('storyline round trip: encode path is semantically equal, preserve path is byte-exact', async () => {
  const s = sandbox('import-export');
  assert.is((await s.run(['import', '-f', STORYLINES, '-t', s.path('plain')])).code, 0);
  const jsonl = await s.run(['export', '-f', s.path('plain'), '-t', '-', '-o', 'storyline']);
  assert.is(jsonl.code, 0, jsonl.stderr);
  const exported = jsonl.stdout.trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(exported, fixtureStorylines());
  const dir = await s.run(['export', '-f', s.path('plain'), '-t', `${s.path('out')}/`, '-o', 'storyline']);
  assert.is(dir.code, 0, dir.stderr);
  assert.equal(filesUnder(s.path('out')), ['incident-triage-0007_sub-1.storyline.json', 'traj-incident-0007.storyline.json']);

  assert.is((await s.run(['import', '-f', STORYLINES, '-t', s.path('kept'), '-o', 'preserve'])).code, 0);
  const raw = await s.run(['export', '-f', s.path('kept'), '-t', `${s.path('raw')}/`, '-o', 'storyline']);
  assert.is(raw.code, 0, raw.stderr);
  assert.match(raw.stdout, 'stored source bytes');
  for (const name of readdirSync(STORYLINES)) assert.equal(readFileSync(s.path('raw', name)), readFileSync(join(STORYLINES, name)), name);
  const stream = await runTool('trajstore', ['export', '-f', s.path('kept'), '-t', '-', '-o', 'storyline'], { env: s.env });
  assert.is(stream.stdout, readdirSync(STORYLINES).sort().map((f) => readFileSync(join(STORYLINES, f), 'utf8')).join(''));
});

test('stdin import and JSONL with blank lines keep the bytes for a preserve export', async () => {
  const s = sandbox('import-export');
  const docs = fixtureStorylines();
  const input = `\n${JSON.stringify(docs[0])}\r\n\n${JSON.stringify(docs[1])}`;
  const r = await s.run(['import', '-f', '-', '-t', s.path('ds'), '-o', 'preserve', '--format', 'json'], input);
  assert.is(r.code, 0, r.stderr);
  assert.is(JSON.parse(r.stdout).total.runs, 2);
  const back = await s.run(['export', '-f', s.path('ds'), '-t', '-', '-o', 'storyline']);
  assert.is(back.stdout, input);
});

test('create refuses an existing destination (exit 4) and a failed create leaves nothing behind', async () => {
  const s = sandbox('import-export');
  mkdirSync(s.path('taken'));
  writeFileSync(s.path('taken', 'keep.txt'), 'mine');
  const conflict = await s.run(['import', '-f', STORYLINES, '-t', s.path('taken')]);
  assert.is(conflict.code, 4);
  assert.match(conflict.stderr, 'already exists');
  assert.equal(readdirSync(s.path('taken')), ['keep.txt']);

  mkdirSync(s.path('mixed'));
  for (const f of readdirSync(STORYLINES)) writeFileSync(s.path('mixed', f), readFileSync(join(STORYLINES, f)));
  writeFileSync(s.path('mixed', 'zz-broken.jsonl'), `${JSON.stringify(fixtureStorylines()[0])}\n{"schema_version":"storyline/v1",\n`);
  const failed = await s.run(['import', '-f', s.path('mixed'), '-t', s.path('new')]);
  assert.is(failed.code, 2);
  assert.match(failed.stderr, 'zz-broken.jsonl:2');
  assert.not.ok(existsSync(s.path('new')));
  assert.equal(readdirSync(s.home).sort(), ['mixed', 'taken']);
});

test('append adds a snapshot on top; duplicates get #N or are skipped; the parent stays readable', async () => {
  const s = sandbox('import-export');
  const first = JSON.parse((await s.run(['import', '-f', STORYLINES, '-t', s.path('ds'), '--format', 'json'])).stdout);
  const appended = await s.run(['import', '-f', STORYLINES, '-t', s.path('ds'), '--mode', 'append', '--format', 'json']);
  assert.is(appended.code, 0, appended.stderr);
  const second = JSON.parse(appended.stdout);
  assert.is.not(second.snapshot_id, first.snapshot_id);
  const snap = JSON.parse(readFileSync(s.path('ds', 'snapshots', `${second.snapshot_id}.json`), 'utf8'));
  assert.is(snap.parent, first.snapshot_id);
  assert.is(snap.rows.runs, 4);
  assert.ok(existsSync(s.path('ds', 'snapshots', `${first.snapshot_id}.json`)), 'the parent snapshot is kept');
  const skipped = JSON.parse((await s.run(['import', '-f', STORYLINES, '-t', s.path('ds'), '--mode', 'append', '--on-duplicate', 'skip', '--format', 'json'])).stdout);
  assert.is(skipped.skipped_duplicates, 2);
  assert.is(skipped.total.runs, 0);
  const ds = await openDataset(s.path('ds'));
  try {
    assert.is(ds.snapshotId, skipped.snapshot_id);
    const ids = (ds.db.prepare('SELECT document_id FROM runs ORDER BY rowid').all() as Array<{ document_id: string }>).map((x) => x.document_id);
    assert.equal(ids, ['traj-incident-0007', 'incident-triage-0007/sub-1', 'traj-incident-0007#2', 'incident-triage-0007/sub-1#2']);
  } finally {
    ds.close();
  }
  const missing = await s.run(['import', '-f', STORYLINES, '-t', s.path('nothing'), '--mode', 'append']);
  assert.is(missing.code, 3);
});

test('replace needs --yes without a terminal, then swaps the dataset and removes the old one', async () => {
  const s = sandbox('import-export');
  assert.is((await s.run(['import', '-f', join(STORYLINES, 'incident-triage-0007.storyline.json'), '-t', s.path('ds')])).code, 0);
  const refused = await s.run(['import', '-f', STORYLINES, '-t', s.path('ds'), '--mode', 'replace']);
  assert.is(refused.code, 2);
  assert.match(refused.stderr, '--yes');
  const replaced = await s.run(['import', '-f', STORYLINES, '-t', s.path('ds'), '--mode', 'replace', '--yes', '--format', 'json']);
  assert.is(replaced.code, 0, replaced.stderr);
  assert.is(JSON.parse(replaced.stdout).total.runs, 2);
  assert.equal(readdirSync(s.home).filter((n) => n !== 'cfg'), ['ds']);
  const ds = await openDataset(s.path('ds'));
  try {
    assert.is((ds.db.prepare('SELECT count(*) AS n FROM runs').get() as { n: number }).n, 2);
    assert.is(ds.snapshot.parent, null);
  } finally {
    ds.close();
  }
});

test('kill -9 in the middle of an append leaves the previous snapshot intact and readable', async () => {
  const s = sandbox('import-export');
  const before = JSON.parse((await s.run(['import', '-f', STORYLINES, '-t', s.path('ds'), '--format', 'json'])).stdout);
  // An input big enough that the append is still writing parts when it is killed.
  const base = fixtureStorylines()[0];
  const lines: string[] = [];
  for (let i = 0; i < 20_000; i++) lines.push(JSON.stringify({ ...base, trajectory: `big-${i}` }));
  writeFileSync(s.path('big.jsonl'), `${lines.join('\n')}\n`);
  const child = spawn(process.execPath, [toolScript('trajstore'), 'import', '-f', s.path('big.jsonl'), '-t', s.path('ds'), '--mode', 'append'], { env: { ...process.env, ...s.env }, stdio: 'ignore' });
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, signal) => resolve(signal)));
  // Kill once the append has started writing (a temporary part or index copy exists).
  const started = Date.now();
  while (Date.now() - started < 30_000) {
    if (filesUnder(s.path('ds')).some((f) => f.includes('.tmp-'))) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  await new Promise((r) => setTimeout(r, 300));
  child.kill('SIGKILL');
  assert.is(await exited, 'SIGKILL');
  const ds = await openDataset(s.path('ds'));
  try {
    assert.is(ds.snapshotId, before.snapshot_id);
    assert.is((ds.db.prepare('SELECT count(*) AS n FROM runs').get() as { n: number }).n, 2);
  } finally {
    ds.close();
  }
  // The next append sweeps the leftovers and succeeds.
  const after = await s.run(['import', '-f', STORYLINES, '-t', s.path('ds'), '--mode', 'append', '--format', 'json']);
  assert.is(after.code, 0, after.stderr);
  assert.not.ok(filesUnder(s.path('ds')).some((f) => f.includes('.tmp-')));
});

test('every bad fixture is refused with exit 2 naming the file, the line where known, and the reason; nothing is left', async () => {
  const s = sandbox('import-export');
  const bad = join(SYNTHETIC, 'bad');
  const cases: Array<[string, RegExp]> = [
    ['empty.jsonl', /empty\.jsonl: empty file: no records/],
    ['truncated.atif.json', /truncated\.atif\.json:\d+:\d+: .*(JSON|unterminated)/i],
    ['wrong-schema-version.atif.json', /wrong-schema-version\.atif\.json:\d+(:\d+)?(:| at )/],
    ['wrong-schema-version.storyline.json', /wrong-schema-version\.storyline\.json:2:\d+ at \/schema_version: unsupported schema_version "storyline\/v2"/],
    ['wrong-shape.json', /wrong-shape\.json:1: .*no trajectory format recognises/],
    ['not-json-line', /8d4e42da-788a-4035-8586-739e2f0dd34f\.jsonl:\d+/],
    ['invalid-utf8', /bad8\.jsonl:4(:\d+)?: .*UTF-8/],
  ];
  assert.equal(cases.map(([n]) => n).sort(), readdirSync(bad).sort(), 'every bad fixture has a case');
  for (const [name, expected] of cases) {
    const r = await s.run(['import', '-f', join(bad, name), '-t', s.path(`out-${name}`)]);
    assert.is(r.code, 2, `${name}: ${r.stderr}`);
    assert.match(r.stderr, expected, name);
    assert.not.ok(existsSync(s.path(`out-${name}`)), `${name}: nothing left behind`);
  }
  assert.equal(readdirSync(s.home), []);
});

test('flag misuse exits 2 naming the flag', async () => {
  const s = sandbox('import-export');
  const cases: Array<[string[], string]> = [
    [['import', '-t', s.path('x')], '-f/--from is required'],
    [['import', '-f', STORYLINES, '-t', s.path('x'), '--mode', 'merge'], 'invalid --mode "merge"'],
    [['import', '-f', STORYLINES, '-t', s.path('x'), '-i', 'yaml'], 'invalid -i/--input-format "yaml"'],
    [['import', '-f', STORYLINES, '-t', s.path('x'), '-o', 'atif'], 'invalid -o/--output-format "atif"'],
    [['import', '-f', STORYLINES, '-t', s.path('x'), '--on-duplicate', 'rename'], 'invalid --on-duplicate "rename"'],
    [['import', '-f', STORYLINES, '-t', s.path('x'), '--format', 'xml'], 'invalid --format "xml"'],
    [['import', '-f', STORYLINES, '-t', s.path('x'), '--column', 'a=$.a'], '--column applies to compact-jsonl imports only'],
    [['import', '-f', '-', '-t', s.path('x'), '-i', 'compact-jsonl'], '-f -: compact-jsonl import does not read stdin'],
    [['import', '-f', COMPACT, '-t', s.path('x'), '-i', 'compact-jsonl', '--mode', 'append'], '--mode append: compact-jsonl'],
    [['import', '-f', COMPACT, '-t', s.path('x'), '-i', 'compact-jsonl', '--column', 'raw=$.a'], 'raw is a reserved column name'],
    [['import', '-f', COMPACT, '-t', s.path('x'), '-i', 'compact-jsonl', '--column', 'a=.a'], 'must start with $'],
    [['import', '-f', COMPACT, '-t', s.path('x'), '-i', 'compact-jsonl', '--column', 'a=$.a..b'], 'not supported at offset'],
    [['import', '-f', COMPACT, '-t', s.path('x'), '-i', 'storyline', '-o', 'compact-jsonl'], 'record store, not a trajectory conversion'],
    [['export', '-f', s.path('x'), '-t', '-'], '-o/--output-format is required'],
    [['export', '-f', s.path('x'), '-o', 'storyline'], '-t/--to is required'],
    [['export', '-f', s.path('x'), '-t', '-', '-o', 'yaml'], 'invalid -o/--output-format "yaml"'],
  ];
  for (const [args, message] of cases) {
    const r = await s.run(args);
    assert.is(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message, args.join(' '));
  }
  const missing = await s.run(['import', '-f', s.path('nope'), '-t', s.path('x')]);
  assert.is(missing.code, 3);
  assert.match(missing.stderr, '-f ');
});

test('export is create-only unless --overwrite, refuses what a dataset cannot give, and exits 3 on a missing dataset', async () => {
  const s = sandbox('import-export');
  assert.is((await s.run(['import', '-f', STORYLINES, '-t', s.path('ds')])).code, 0);
  writeFileSync(s.path('out.jsonl'), 'old');
  const conflict = await s.run(['export', '-f', s.path('ds'), '-t', s.path('out.jsonl'), '-o', 'storyline']);
  assert.is(conflict.code, 4);
  assert.match(conflict.stderr, `-t ${s.path('out.jsonl')}: already exists`);
  assert.is(readFileSync(s.path('out.jsonl'), 'utf8'), 'old');
  const overwrite = await s.run(['export', '-f', s.path('ds'), '-t', s.path('out.jsonl'), '-o', 'storyline', '--overwrite']);
  assert.is(overwrite.code, 0, overwrite.stderr);
  assert.equal(readFileSync(s.path('out.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l)), fixtureStorylines());
  const compact = await s.run(['export', '-f', s.path('ds'), '-t', '-', '-o', 'compact-jsonl']);
  assert.is(compact.code, 2);
  assert.match(compact.stderr, 'compact record stores only');
  const missing = await s.run(['export', '-f', s.path('none'), '-t', '-', '-o', 'storyline']);
  assert.is(missing.code, 3);
  assert.match(missing.stderr, `-f ${s.path('none')}: no such dataset`);
});

test('compact-jsonl: records with --column values, the id fallback, and a byte-exact export (CRLF, no final newline)', async () => {
  const s = sandbox('import-export');
  const r = await s.run(['import', '-f', join(COMPACT, 'valid'), '-t', s.path('c'), '-i', 'compact-jsonl', '--column', 'svc=$.service.name', '--column', 'tag=$.tags[0]', '--format', 'json']);
  assert.is(r.code, 0, r.stderr);
  assert.is(JSON.parse(r.stdout).total.runs, 10);
  const ds = await openDataset(s.path('c'));
  try {
    assert.is(ds.kind, 'compact');
    const rows = ds.db.prepare('SELECT id, filename, line, svc, tag FROM records ORDER BY rowid').all() as Array<Record<string, unknown>>;
    assert.is(rows.length, 10);
    assert.equal([...new Set(rows.map((x) => x.filename))], ['A-ops.jsonl', 'chat/2026-05-20.jsonl', 'metrics/queue.jsonl']);
    assert.ok(rows.some((x) => typeof x.svc === 'string' && x.svc.startsWith('"')), 'svc holds JSON text');
    assert.ok(rows.some((x) => x.tag !== null));
  } finally {
    ds.close();
  }
  const parts = readdirSync(s.path('c', 'parts', 'records'));
  const { fields } = arrowSchemaOf(s.path('c', 'parts', 'records', parts[0]!));
  assert.equal(fields.map((f) => f.name), [...RECORDS.map((c: ColumnDef) => c.name), 'svc', 'tag']);

  const out = await s.run(['export', '-f', s.path('c'), '-t', `${s.path('out')}/`, '-o', 'compact-jsonl']);
  assert.is(out.code, 0, out.stderr);
  for (const f of filesUnder(join(COMPACT, 'valid'))) assert.equal(readFileSync(s.path('out', f)), readFileSync(join(COMPACT, 'valid', f)), f);
  const stream = await s.run(['export', '-f', s.path('c'), '-t', '-', '-o', 'compact-jsonl']);
  assert.is(stream.stdout, filesUnder(join(COMPACT, 'valid')).map((f) => readFileSync(join(COMPACT, 'valid', f), 'utf8')).join(''));
  const storyline = await s.run(['export', '-f', s.path('c'), '-t', '-', '-o', 'storyline']);
  assert.is(storyline.code, 2);

  const fallback = await s.run(['import', '-f', join(COMPACT, 'missing-id'), '-t', s.path('m'), '-i', 'compact-jsonl']);
  assert.is(fallback.code, 0, fallback.stderr);
  const m = await openDataset(s.path('m'));
  try {
    const row = m.db.prepare("SELECT id FROM records WHERE filename = 'chat/2026-05-20.jsonl' AND line = 3").get() as { id: string };
    assert.is(row.id, 'chat/2026-05-20.jsonl#3');
  } finally {
    m.close();
  }
  const exists = await s.run(['import', '-f', join(COMPACT, 'valid'), '-t', s.path('c'), '-i', 'compact-jsonl']);
  assert.is(exists.code, 4);
  const replaced = await s.run(['import', '-f', join(COMPACT, 'missing-id'), '-t', s.path('c'), '-i', 'compact-jsonl', '--mode', 'replace', '--yes']);
  assert.is(replaced.code, 0, replaced.stderr);
});

test.run();
