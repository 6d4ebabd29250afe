/**
 * The content store (layout 5): a long string is stored once however many cells hold it, the cells
 * refer to it, and every reader (query, find, export, an independent Parquet reader joining the
 * `contents` relation) gets the source's values back. Strings that begin with the marker character
 * survive as they are.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { tableFromIPC } from 'apache-arrow';
import { readParquet } from 'parquet-wasm';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { CONTENT_MARK, CONTENT_MIN_CHARS } from '../dataset/contents.js';
import { contentHash } from '../dataset/content-refs.js';
import { indexLookup, readingOrderLookup } from '../dataset/content-lookup.js';
import { CONTENTS } from '../dataset/relations.js';
import { sandbox } from './helpers/sandbox.js';

const s = sandbox('content-store');

const output = Array.from({ length: 40 }, (_, i) => `src/module-${i}.ts:${i * 3}: const value = compute(${i});`).join('\n');
const marked = `${CONTENT_MARK}not a reference, a string that begins with U+0001`;
const markedLong = `${CONTENT_MARK}${'x'.repeat(CONTENT_MIN_CHARS)}`;
const justShort = 'y'.repeat(CONTENT_MIN_CHARS - 1);

/** An ATIF trajectory whose tool output stands in its observation, and again in the call's extra. */
function trajectory(session: string): unknown {
  return {
    schema_version: 'ATIF-v1.7',
    session_id: session,
    agent: { name: 'content-agent', version: '1', extra: { prompt: output } },
    extra: { marked, markedLong, justShort },
    steps: [
      { step_id: 1, source: 'user', message: marked },
      {
        step_id: 2,
        source: 'agent',
        message: markedLong,
        reasoning_content: output,
        tool_calls: [{ tool_call_id: 'c1', function_name: 'grep', arguments: { pattern: 'compute' }, extra: { stdout: output, exit: 0 } }],
        observation: { results: [{ source_call_id: 'c1', content: output }] },
      },
    ],
  };
}

test('a long string is stored once, cells refer to it, and query, find and export give it back', async () => {
  writeFileSync(s.path('a.json'), JSON.stringify(trajectory('a')));
  writeFileSync(s.path('b.json'), JSON.stringify(trajectory('b')));
  const r = await s.run(['import', '-f', s.path('a.json'), '-t', s.path('ds')]);
  assert.is(r.code, 0, r.stderr);
  const appended = await s.run(['import', '-f', s.path('b.json'), '-t', s.path('ds'), '--mode', 'append']);
  assert.is(appended.code, 0, appended.stderr);

  const manifest = JSON.parse(readFileSync(s.path('ds', 'trajstore.json'), 'utf8')) as { snapshot_id: string };
  const snapshot = JSON.parse(readFileSync(s.path('ds', 'snapshots', `${manifest.snapshot_id}.json`), 'utf8')) as {
    rows: Record<string, number>;
    relations: Record<string, Array<{ key: string }>>;
  };
  // The output, and the marked long message: once each, whatever the number of cells and imports.
  assert.is(snapshot.rows.contents, 2);
  const contents = snapshot.relations.contents?.map((part) => tableFromIPC(readParquet(readFileSync(s.path('ds', ...part.key.split('/')))).intoIPCStream())) ?? [];
  assert.equal(contents[0]?.schema.fields.map((f) => f.name), CONTENTS.map((c) => c.name));
  const values = contents.flatMap((table) => table.toArray().map((row) => ({ hash: String(row.hash), value: String(row.value) })));
  assert.equal(values.map((v) => v.hash).sort(), [contentHash(output), contentHash(markedLong)].sort());
  for (const { hash, value } of values) assert.is(contentHash(value), hash);

  // The parts refer to the store: the output is in none of them.
  for (const relation of ['runs', 'steps', 'tool_calls']) {
    for (const part of snapshot.relations[relation] ?? []) assert.not.ok(readFileSync(s.path('ds', ...part.key.split('/'))).includes(Buffer.from('compute(39)')), relation);
  }

  const q = await s.run(['query', s.path('ds'), '--format', 'json', '--sql', `SELECT s.message_text, s.reasoning_content, s.observation_text, t.result_json, t.extra_json, r.agent_extra_json, r.extra_json AS run_extra
      FROM steps s JOIN runs r USING (document_id) LEFT JOIN tool_calls t USING (document_id, step_id) WHERE s.source = 'agent' ORDER BY s.document_id`]);
  assert.is(q.code, 0, q.stderr);
  const rows = JSON.parse(q.stdout) as Array<Record<string, string>>;
  assert.is(rows.length, 2);
  for (const row of rows) {
    assert.equal(row, {
      message_text: markedLong,
      reasoning_content: output,
      observation_text: output,
      result_json: JSON.stringify(output),
      extra_json: JSON.stringify({ stdout: output, exit: 0 }),
      agent_extra_json: JSON.stringify({ extra: { prompt: output } }),
      run_extra: JSON.stringify({ marked, markedLong, justShort }),
    });
  }
  const user = await s.run(['query', s.path('ds'), '--format', 'json', '--sql', "SELECT message_text FROM steps WHERE source = 'user'"]);
  assert.equal(JSON.parse(user.stdout), [{ message_text: marked }, { message_text: marked }]);
  // JSON functions see the values too.
  const json = await s.run(['query', s.path('ds'), '--format', 'csv', '--sql', "SELECT count(*) FROM tool_calls WHERE json_extract(extra_json, '$.stdout') = json_extract(result_json, '$')"]);
  assert.is(json.stdout.trim().split('\n')[1], '2');

  const found = await s.run(['find', s.path('ds'), '--match', '"compute(39)"', '--format', 'json']);
  assert.is(found.code, 0, found.stderr);
  const matches = (JSON.parse(found.stdout) as { matches: Array<{ preview: string }> }).matches;
  assert.is(matches.length, 2);
  for (const match of matches) assert.match(match.preview, 'compute(39)');

  const exported = await s.run(['export', '-f', s.path('ds'), '-o', 'atif', '-t', '-']);
  assert.is(exported.code, 0, exported.stderr);
  const docs = exported.stdout.trim().split('\n').map((line) => JSON.parse(line) as { session_id: string });
  assert.equal(docs.map((d) => d.session_id), ['a', 'b']);
  for (const doc of docs) assert.equal(doc, trajectory(doc.session_id));
});

test('Chinese, Japanese and Korean text in the content store is found like any other', async () => {
  const log = `服务器日志显示磁盘已满。${'检查日志文件的大小并清理旧的归档。'.repeat(40)}サーバーのログ。서버가 응답하지 않습니다.`;
  const doc = {
    schema_version: 'ATIF-v1.7',
    session_id: 'cjk',
    agent: { name: 'a', version: '1' },
    steps: [{ step_id: 1, source: 'agent', message: 'reading', tool_calls: [{ tool_call_id: 'c', function_name: 'cat', arguments: {} }], observation: { results: [{ source_call_id: 'c', content: log }] } }],
  };
  assert.ok(log.length >= CONTENT_MIN_CHARS);
  writeFileSync(s.path('cjk.json'), JSON.stringify(doc));
  assert.is((await s.run(['import', '-f', s.path('cjk.json'), '-t', s.path('cjk')])).code, 0);
  for (const term of ['磁盘', '归档', 'ログ', '서버가']) {
    const r = await s.run(['find', s.path('cjk'), '--match', term, '--format', 'json']);
    assert.is(r.code, 0, r.stderr);
    assert.is((JSON.parse(r.stdout) as { matches: unknown[] }).matches.length, 1, term);
  }
});

test('the index holds the content store once and its tables refer to it', async () => {
  const { default: Database } = await import('better-sqlite3');
  const db = new Database(s.path('ds', 'index.sqlite'), { readonly: true });
  try {
    assert.is((db.prepare('SELECT count(*) AS n FROM contents').get() as { n: number }).n, 2);
    const stored = db.prepare("SELECT observation_text FROM steps_stored WHERE source = 'agent'").pluck().all() as string[];
    assert.equal(stored, [CONTENT_MARK + contentHash(output), CONTENT_MARK + contentHash(output)]);
  } finally {
    db.close();
  }
});

test('lookups give every value whatever the order they are asked in, and name a missing one', async () => {
  const { default: Database } = await import('better-sqlite3');
  const db = new Database(':memory:');
  try {
    db.exec('CREATE TABLE contents (hash TEXT PRIMARY KEY, value TEXT NOT NULL)');
    const values = Array.from({ length: 3000 }, (_, i) => `${i}:`.padEnd(CONTENT_MIN_CHARS + (i % 7) * 300, String.fromCharCode(97 + (i % 26))));
    const insert = db.prepare('INSERT INTO contents VALUES (?, ?)');
    for (const value of values) insert.run(contentHash(value), value);
    // In order, twice over (as an export refers to a value from two cells), backwards, and shuffled:
    // the reading-order lookup must fall back to searching by hash wherever the orders part.
    let seed = 7;
    const shuffled = [...values.keys()].sort(() => ((seed = (seed * 48271) % 2147483647) % 3) - 1);
    const orders = [values.flatMap((_, i) => [i, i]), [...values.keys()].reverse(), shuffled];
    for (const order of orders) {
      for (const lookup of [readingOrderLookup(db, 'ds'), indexLookup(db, 'ds')]) {
        for (const i of order) assert.is(lookup(contentHash(values[i] as string)), values[i]);
      }
    }
    const missing = contentHash('never stored');
    for (const lookup of [readingOrderLookup(db, 'ds'), indexLookup(db, 'ds')]) {
      assert.throws(() => lookup(missing), (error: Error) => error.message === `ds: the content store has no value ${missing}; the dataset is damaged`);
    }
  } finally {
    db.close();
  }
});

test('export puts values back when an append refers to values stored before it', async () => {
  const docs = ['p', 'q', 'r'].map((session) => trajectory(session) as { session_id: string; extra: Record<string, unknown> });
  (docs[2] as { extra: Record<string, unknown> }).extra.own = 'z'.repeat(CONTENT_MIN_CHARS * 3);
  writeFileSync(s.path('pq.jsonl'), `${JSON.stringify(docs[0])}\n${JSON.stringify(docs[1])}\n`);
  writeFileSync(s.path('r.jsonl'), `${JSON.stringify(docs[2])}\n${JSON.stringify(docs[0])}\n`);
  assert.is((await s.run(['import', '-f', s.path('pq.jsonl'), '-t', s.path('mixed')])).code, 0);
  const appended = await s.run(['import', '-f', s.path('r.jsonl'), '-t', s.path('mixed'), '--mode', 'append', '--on-duplicate', 'skip']);
  assert.is(appended.code, 0, appended.stderr);
  const exported = await s.run(['export', '-f', s.path('mixed'), '-o', 'atif', '-t', '-']);
  assert.is(exported.code, 0, exported.stderr);
  assert.equal(exported.stdout.trim().split('\n').map((line) => JSON.parse(line) as unknown), docs);
});

test.run();
