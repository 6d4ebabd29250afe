/**
 * Layout version 3: a Storyline document is stored once for export (runs.document_json + steps.turn_json
 * and the large step columns + tool_calls.result_json and extra_json) and export rebuilds it exactly.
 * Checked over every shared fixture directory of a decodable format (each file decoded here as import
 * does, compared with what `export -o storyline` gives back); plus the index's columns, a version 2
 * dataset read as it is and the refusal of a version 1 Storyline dataset.
 */
import { createHash } from 'node:crypto';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { PassThrough } from 'node:stream';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Logger } from '../../lib/log.js';
import { openDataset, type OpenDataset } from '../dataset/open.js';
import { LAYOUT_VERSION, readSnapshot, type Snapshot } from '../dataset/layout.js';
import { PartWriter, flatCells, relationRowGroups, type Row } from '../dataset/parquet.js';
import { REFERS, storedRowGroups } from '../dataset/resolve.js';
import { resolveJson, resolveText, type ContentLookup } from '../dataset/contents.js';
import { indexLookup } from '../dataset/content-lookup.js';
import { LocalObjectStore } from '../dataset/store.js';
import { REFERRING_RELATIONS, STORYLINE_RELATIONS, holdsContent, type ColumnDef, type Relation } from '../dataset/relations.js';
import { relationColumns } from '../dataset/sqlite-index.js';
import { loadFormats } from '../formats/registry.js';
import { detectFormat } from '../import/detect.js';
import { listSources } from '../import/sources.js';
import { OBSERVATION_CONTENT_FROM_CALL, TURN_RESULTS_FROM_OBSERVATION } from '../dataset/rows.js';
import type { Storyline } from '../storyline/schema.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { sandbox } from './helpers/sandbox.js';

/** The Storylines `import -f dir` decodes, in import order. */
async function decodedStorylines(dir: string): Promise<Storyline[]> {
  const formats = await loadFormats();
  const extensions = [...new Set(formats.flatMap((f) => f.extensions))];
  const docs: Storyline[] = [];
  const ctx = { log: new Logger('error', new PassThrough()), keepRaw: false, signal: new AbortController().signal, diagnostic: () => {} };
  for (const file of listSources(dir, new PassThrough(), extensions)) {
    const detected = await detectFormat(file, formats);
    for await (const decoded of detected?.format.decode(file, ctx) ?? []) docs.push(decoded.storyline);
  }
  return docs;
}

const DIRS = ['synthetic/claude-code', 'synthetic/codex', 'synthetic/actf', 'synthetic/chat-messages', 'synthetic/storyline', 'synthetic/edge', 'persisting/atif'];

for (const dir of DIRS) {
  test(`${dir}: export -o storyline gives back exactly the decoded documents`, async () => {
    const s = sandbox('dataset-layout');
    const imported = await s.run(['import', '-f', join(SHARED_FIXTURES, dir), '-t', s.path('ds')]);
    assert.is(imported.code, 0, imported.stderr);
    const exported = await s.run(['export', '-f', s.path('ds'), '-t', '-', '-o', 'storyline']);
    assert.is(exported.code, 0, exported.stderr);
    const back = exported.stdout.trim().split('\n').map((line) => JSON.parse(line) as Storyline);
    const expected = await decodedStorylines(join(SHARED_FIXTURES, dir));
    assert.ok(expected.length > 0, dir);
    assert.is(back.length, expected.length);
    // JSON text of both sides: undefined members vanish as they do on disk.
    assert.equal(back, JSON.parse(JSON.stringify(expected)));
  });
}

/** Every row of a relation, read from the dataset's Parquet parts. */
async function partRows(ds: OpenDataset, relation: Relation, columns: string[]): Promise<Row[]> {
  const rows: Row[] = [];
  for await (const group of relationRowGroups(ds.store, ds.snapshot, relation, columns)) rows.push(...group);
  return rows;
}

test('tool output is stored once for export, not again in turn_json, observation_json or runs', async () => {
  const s = sandbox('dataset-layout');
  assert.is((await s.run(['import', '-f', join(SHARED_FIXTURES, 'synthetic/claude-code'), '-t', s.path('ds')])).code, 0);
  const ds = await openDataset(s.path('ds'));
  try {
    const steps = await partRows(ds, 'steps', ['document_id', 'turn_ordinal', 'turn_json']);
    const calls = await partRows(ds, 'tool_calls', ['document_id', 'turn_ordinal', 'result_json']);
    const turnJson = new Map(steps.map((row) => [`${row.document_id}/${row.turn_ordinal}`, String(row.turn_json)]));
    assert.ok(steps.some((row) => String(row.turn_json).includes(TURN_RESULTS_FROM_OBSERVATION)), 'some call results are linked to their observation instead of repeated');
    const results = calls.filter((call) => typeof call.result_json === 'string' && call.result_json.length > 40);
    assert.ok(results.length > 0, 'the fixture has long results');
    const repeated = results.filter((call) => turnJson.get(`${call.document_id}/${call.turn_ordinal}`)?.includes(String(call.result_json)));
    assert.is(repeated.length, 0, 'no result text inside turn_json');
    const observations = (await partRows(ds, 'steps', ['observation_json'])).map((row) => String(row.observation_json ?? ''));
    assert.ok(observations.some((text) => text.includes(OBSERVATION_CONTENT_FROM_CALL)), 'some observation contents stand for their call result');
    const inObservation = results.filter((call) => observations.some((text) => text.includes(String(call.result_json))));
    assert.is(inObservation.length, 0, 'no result text inside observation_json');
    const runs = await partRows(ds, 'runs', ['document_json']);
    assert.ok(runs.length > 0);
    assert.ok(runs.every((run) => !('turns' in JSON.parse(String(run.document_json)))), 'runs.document_json has no turns');
  } finally {
    ds.close();
  }
});

test('the index holds the columns made for reading, not those only export reads', async () => {
  const s = sandbox('dataset-layout');
  assert.is((await s.run(['import', '-f', join(SHARED_FIXTURES, 'synthetic/claude-code'), '-t', s.path('ds'), '-o', 'preserve'])).code, 0);
  const ds = await openDataset(s.path('ds'));
  try {
    for (const [relation, columns] of Object.entries(STORYLINE_RELATIONS)) {
      const inIndex = (ds.db.prepare(`SELECT name FROM pragma_table_info('${relation}')`).all() as Array<{ name: string }>).map((c) => c.name);
      // The relations that refer to the content store are views, which name their rowid.
      const rowid = REFERRING_RELATIONS.has(relation as Relation) ? ['rowid'] : [];
      assert.equal(inIndex, [...rowid, ...columns.filter((c) => c.sql).map((c) => c.name)], relation);
    }
    const readable = ds.db.prepare("SELECT count(*) AS n FROM steps WHERE observation_text <> ''").get() as { n: number };
    assert.ok(readable.n > 0, 'observations are readable in SQL as observation_text');
    const observations = await partRows(ds, 'steps', ['observation_json']);
    assert.ok(observations.some((row) => row.observation_json !== null), 'observation_json is in the Parquet parts');
  } finally {
    ds.close();
  }
});

test('a layout version 1 Storyline dataset is refused as unsupported (exit 2) with a hint; --mode replace rewrites it', async () => {
  const s = sandbox('dataset-layout');
  const source = join(SHARED_FIXTURES, 'synthetic/storyline');
  assert.is((await s.run(['import', '-f', source, '-t', s.path('ds')])).code, 0);
  const manifestPath = s.path('ds', 'trajstore.json');
  const manifest = JSON.parse(readFileSync(manifestPath, 'utf8'));
  writeFileSync(manifestPath, JSON.stringify({ ...manifest, layout_version: 1 }));
  const refused = await s.run(['export', '-f', s.path('ds'), '-t', '-', '-o', 'storyline']);
  assert.is(refused.code, 2);
  assert.match(refused.stderr, 'layout version 1');
  assert.match(refused.stderr, 'import its sources again');
  const replaced = await s.run(['import', '-f', source, '-t', s.path('ds'), '--mode', 'replace', '--yes']);
  assert.is(replaced.code, 0, replaced.stderr);
  assert.is(JSON.parse(readFileSync(manifestPath, 'utf8')).layout_version, LAYOUT_VERSION);
  assert.is((await s.run(['export', '-f', s.path('ds'), '-t', '-', '-o', 'storyline'])).code, 0);

  // A layout from a newer trajstore is unsupported too, and says so.
  writeFileSync(manifestPath, JSON.stringify({ ...JSON.parse(readFileSync(manifestPath, 'utf8')), layout_version: LAYOUT_VERSION + 1 }));
  const newer = await s.run(['stats', s.path('ds')]);
  assert.is(newer.code, 2, newer.stderr);
  assert.match(newer.stderr, `layout version ${LAYOUT_VERSION + 1} is not supported`);
  assert.match(newer.stderr, 'a newer trajstore wrote it');
});

test('a layout version 2 Storyline dataset is read as it is, and an append writes the current version', async () => {
  const s = sandbox('dataset-layout');
  assert.is((await s.run(['import', '-f', join(SHARED_FIXTURES, 'synthetic/storyline'), '-t', s.path('ds')])).code, 0);
  const before = await s.run(['export', '-f', s.path('ds'), '-t', '-', '-o', 'storyline']);
  const manifestPath = s.path('ds', 'trajstore.json');
  writeFileSync(manifestPath, JSON.stringify({ ...JSON.parse(readFileSync(manifestPath, 'utf8')), layout_version: 2 }));
  const read = await s.run(['export', '-f', s.path('ds'), '-t', '-', '-o', 'storyline']);
  assert.is(read.code, 0, read.stderr);
  assert.is(read.stdout, before.stdout);
  const appended = await s.run(['import', '-f', join(SHARED_FIXTURES, 'synthetic/claude-code'), '-t', s.path('ds'), '--mode', 'append']);
  assert.is(appended.code, 0, appended.stderr);
  assert.is(JSON.parse(readFileSync(manifestPath, 'utf8')).layout_version, LAYOUT_VERSION);
});

test("a snapshot lists each part's SHA-256 (of the bytes written); one without it reads as before, a malformed one is refused (exit 2) naming the part", async () => {
  const s = sandbox('dataset-layout');
  assert.is((await s.run(['import', '-f', join(SHARED_FIXTURES, 'synthetic/storyline'), '-t', s.path('ds')])).code, 0);
  const before = await s.run(['export', '-f', s.path('ds'), '-t', '-', '-o', 'storyline']);
  assert.is(before.code, 0, before.stderr);
  const id = (JSON.parse(readFileSync(s.path('ds', 'trajstore.json'), 'utf8')) as { snapshot_id: string }).snapshot_id;
  const descriptorPath = s.path('ds', 'snapshots', `${id}.json`);
  const descriptor = JSON.parse(readFileSync(descriptorPath, 'utf8')) as Snapshot;
  const parts = Object.values(descriptor.relations).flat();
  assert.ok(parts.length > 0);
  for (const part of parts) assert.is(part.sha256, createHash('sha256').update(readFileSync(s.path('ds', ...part.key.split('/')))).digest('hex'), part.key);

  // As a build before the field wrote it: read as it was.
  const withoutDigests = structuredClone(descriptor);
  for (const part of Object.values(withoutDigests.relations).flat()) delete part.sha256;
  writeFileSync(descriptorPath, JSON.stringify(withoutDigests));
  const old = await s.run(['export', '-f', s.path('ds'), '-t', '-', '-o', 'storyline']);
  assert.is(old.code, 0, old.stderr);
  assert.is(old.stdout, before.stdout);

  const malformed = structuredClone(descriptor);
  const first = Object.values(malformed.relations).flat()[0]!;
  first.sha256 = 'not a digest';
  writeFileSync(descriptorPath, JSON.stringify(malformed));
  const refused = await s.run(['export', '-f', s.path('ds'), '-t', '-', '-o', 'storyline']);
  assert.is(refused.code, 2, refused.stderr);
  assert.match(refused.stderr, `not a valid snapshot descriptor: ${first.key}: sha256 must be 64 lowercase hex digits`);
});

/** A relation's row groups with the content store's values put back, as a layout 3 writer had them. */
async function* resolvedRowGroups(store: LocalObjectStore, snapshot: Snapshot, relation: Relation, columns: readonly ColumnDef[], lookup: ContentLookup): AsyncGenerator<Row[]> {
  const referring = REFERRING_RELATIONS.has(relation) ? columns.filter(holdsContent) : [];
  for await (const rows of storedRowGroups(store, snapshot, relation, columns.map((c) => c.name))) {
    for (const row of rows) {
      if (!(row as { [REFERS]?: true })[REFERS]) continue;
      for (const column of referring) row[column.name] = column.type === 'json' ? resolveJson(row[column.name], lookup) : resolveText(row[column.name], lookup);
    }
    yield rows;
  }
}

test('parts written before the usage columns (layout 3) are read with those columns NULL', async () => {
  const s = sandbox('dataset-layout');
  assert.is((await s.run(['import', '-f', join(SHARED_FIXTURES, 'synthetic/claude-code'), '-t', s.path('ds')])).code, 0);
  // Rewrite every part without the columns layout 4 added, as a layout 3 writer wrote them.
  const added = new Set(['cache_write_tokens', 'response_id']);
  const store = new LocalObjectStore(s.path('ds'));
  const manifestPath = s.path('ds', 'trajstore.json');
  const manifest = JSON.parse(readFileSync(manifestPath, 'utf8')) as { snapshot_id: string };
  const snapshot = await readSnapshot(store, manifest.snapshot_id);
  // Layout 3 knew no content store either: its parts hold whole values.
  const ds = await openDataset(s.path('ds'));
  const lookup = indexLookup(ds.db, s.path('ds'));
  for (const relation of ['runs', 'steps', 'tool_calls'] as const) {
    const all = relationColumns('storyline')[relation] ?? [];
    const columns = relation === 'tool_calls' ? all : all.filter((c) => !added.has(c.name));
    const groups: Row[][] = [];
    for await (const rows of resolvedRowGroups(store, snapshot, relation, all, lookup)) groups.push(rows);
    for (const part of snapshot.relations[relation] ?? []) rmSync(s.path('ds', ...part.key.split('/')));
    const writer = new PartWriter(store, snapshot.relations[relation]?.[0]?.key as string, columns, [{ key: 'trajstore.relation', value: relation }]);
    for (const rows of groups) await writer.writeCells(flatCells(columns, rows));
    const written = await writer.close();
    snapshot.relations[relation] = [written];
  }
  ds.close();
  for (const part of snapshot.relations.contents ?? []) rmSync(s.path('ds', ...part.key.split('/')));
  const { contents: _none, ...older } = snapshot.relations;
  const { contents: _rows, ...olderRows } = snapshot.rows;
  writeFileSync(s.path('ds', 'snapshots', `${snapshot.id}.json`), JSON.stringify({ ...snapshot, layout_version: 3, relations: older, rows: olderRows }));
  writeFileSync(manifestPath, JSON.stringify({ ...manifest, layout_version: 3 }));
  rmSync(s.path('ds', 'index.sqlite'));
  const steps = await s.run(['query', s.path('ds'), '--format', 'json', '--sql', 'SELECT count(*) AS n, count(response_id) AS ids, count(cache_write_tokens) AS writes FROM steps']);
  assert.is(steps.code, 0, steps.stderr);
  const [counts] = JSON.parse(steps.stdout) as Array<{ n: number; ids: number; writes: number }>;
  assert.ok((counts?.n ?? 0) > 0);
  assert.equal({ ids: counts?.ids, writes: counts?.writes }, { ids: 0, writes: 0 });
  const exported = await s.run(['export', '-f', s.path('ds'), '-t', '-', '-o', 'storyline']);
  assert.is(exported.code, 0, exported.stderr);
});

test.run();
