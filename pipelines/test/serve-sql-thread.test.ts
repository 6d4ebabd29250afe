/**
 * `serve` runs the statements of query and find on its SQL thread, one at a time: a statement that
 * runs until its timeout must not hold up the server's other requests (the API's and the event
 * gateway's), and what the endpoints answer must stay what it was when they ran on the event loop.
 */
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServeProcess, type ServeProcess } from '../../bench/lib/serve-process.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { sandbox } from './helpers/sandbox.js';

const { home, env, run: trajstore } = sandbox('serve-sql-thread-');
const dataset = join(home, 'ds');
/** Runs until it is stopped: it yields no row before its end, so only the watchdog ends it. */
const ENDLESS = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c';
let server: ServeProcess;

type Json = Record<string, any>;
interface Answer {
  status: number;
  body: Json;
  /** Milliseconds from sending to the whole answer. */
  ms: number;
}
async function send(url: URL, init: RequestInit = {}): Promise<Answer> {
  const started = Date.now();
  const response = await fetch(url, init);
  const body = (await response.json()) as Json;
  return { status: response.status, body, ms: Date.now() - started };
}
const get = (path: string, base = server.url): Promise<Answer> => send(new URL(path, base));
const post = (path: string, body: unknown, base = server.url, signal?: AbortSignal): Promise<Answer> =>
  send(new URL(path, base), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), ...(signal ? { signal } : {}) });
const query = (body: Json, signal?: AbortSignal): Promise<Answer> => post('/api/mounts/default/query', body, server.url, signal);
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

test.before(async () => {
  const imported = await trajstore(['import', '-f', join(SHARED_FIXTURES, 'persisting', 'atif'), '-t', dataset]);
  assert.is(imported.code, 0, imported.stderr);
  server = await startServeProcess(['serve', dataset, '--listen', '127.0.0.1:0', '--gateway', '127.0.0.1:0', '--gateway-dataset', join(home, 'gw'), '--gateway-split-idle', '1h'], { env, cwd: home });
});

test.after(async () => {
  await server?.stop();
});

test('a statement running until its timeout holds up neither the API nor the event gateway', async () => {
  const long = query({ sql: ENDLESS, timeout_ms: 3000 });
  await sleep(500);
  const mounts = await get('/api/mounts');
  assert.is(mounts.status, 200);
  assert.ok(mounts.ms < 500, `GET /api/mounts took ${mounts.ms} ms while a statement ran`);
  const health = await get('/healthz', server.gatewayUrl);
  assert.is(health.status, 200);
  assert.ok(health.ms < 500, `GET /healthz took ${health.ms} ms while a statement ran`);
  const event = await post('/v1/events', { agent_id: 'agent', session_id: 'during-a-query', records: [{ seq: 1, source: 'sdk', kind: 'note', payload: { text: 'hello' } }] }, server.gatewayUrl);
  assert.is(event.status, 200, JSON.stringify(event.body));
  assert.ok(event.ms < 500, `POST /v1/events took ${event.ms} ms while a statement ran`);
  const ended = await long;
  assert.is(ended.status, 200);
  assert.equal(ended.body.columns, ['count(*)']);
  assert.equal(ended.body.rows, []);
  assert.is(ended.body.truncated, 'timeout');
  // The watchdog stops it at its deadline on the thread as it did on the event loop.
  assert.ok(ended.ms >= 3000 && ended.ms < 4500, `stopped after ${ended.ms} ms, not at its timeout of 3000 ms`);
});

test('statements run one at a time: concurrent query and find both answer what they answer alone', async () => {
  const sql = 'SELECT document_id, step_count FROM dataset.runs ORDER BY document_id';
  const alone = await query({ sql });
  const found = await get('/api/mounts/default/find?match=the');
  assert.is(found.status, 200);
  const [long, after, find] = await Promise.all([query({ sql: ENDLESS, timeout_ms: 1000 }), query({ sql }), get('/api/mounts/default/find?match=the')]);
  assert.is(long.body.truncated, 'timeout');
  assert.equal([after.status, after.body], [200, alone.body]);
  assert.equal([find.status, find.body], [200, found.body]);
  // Each waited for the statement before it.
  assert.ok(after.ms >= 900 && find.ms >= 900, `answered after ${after.ms} and ${find.ms} ms`);
});

test('the wait for a turn counts against the timeout: a request never waits past it', async () => {
  const long = query({ sql: ENDLESS, timeout_ms: 2500 });
  await sleep(200);
  const queued = await query({ sql: 'SELECT 1', timeout_ms: 500 });
  assert.equal([queued.status, queued.body.columns, queued.body.rows, queued.body.truncated], [200, [], [], 'timeout']);
  assert.ok(queued.ms < 1500, `answered after ${queued.ms} ms`);
  const find = await get('/api/mounts/default/find?match=the&timeout_ms=300');
  assert.is(find.status, 503, JSON.stringify(find.body));
  assert.match(find.body.error.message, /did not finish within 0.3 s/);
  assert.is((await long).body.truncated, 'timeout');
});

test('a client that goes away before its turn leaves nothing queued', async () => {
  const long = query({ sql: ENDLESS, timeout_ms: 1500 });
  await sleep(200);
  const leaving = new AbortController();
  const gone = query({ sql: ENDLESS, timeout_ms: 20_000 }, leaving.signal).catch((error: Error) => error);
  await sleep(200);
  leaving.abort();
  assert.instance(await gone, Error);
  // Had it stayed queued, this would wait for its 20 s.
  const next = await query({ sql: 'SELECT 2 AS n', timeout_ms: 20_000 });
  assert.equal([next.status, next.body.rows], [200, [[2]]]);
  assert.ok(next.ms < 5000, `answered after ${next.ms} ms`);
  assert.is((await long).body.truncated, 'timeout');
});

test('a client that goes away while its statement runs stops it: the next request is answered at once', async () => {
  const leaving = new AbortController();
  const gone = query({ sql: ENDLESS, timeout_ms: 20_000 }, leaving.signal).catch((error: Error) => error);
  await sleep(500);
  leaving.abort();
  assert.instance(await gone, Error);
  // Had it run on, this would wait for its 20 s.
  const next = await query({ sql: 'SELECT 3 AS n', timeout_ms: 20_000 });
  assert.equal([next.status, next.body.rows], [200, [[3]]]);
  assert.ok(next.ms < 1000, `answered after ${next.ms} ms`);
  const find = await get('/api/mounts/default/find?match=the');
  assert.is(find.status, 200);
  assert.ok(find.ms < 1000, `find answered after ${find.ms} ms`);
});

test('a value larger than the memory limit allows is a 413 that names the limit', async () => {
  const r = await query({ sql: 'SELECT length(randomblob(300000000)) AS n' });
  assert.equal([r.status, r.body.error.code], [413, 'payload_too_large'], JSON.stringify(r.body));
  assert.match(r.body.error.message, 'a value the statement made is larger than 256.0 MiB');
  // The server goes on.
  const next = await query({ sql: 'SELECT 4 AS n' });
  assert.equal([next.status, next.body.rows], [200, [[4]]]);
});

test('cells cross the thread as they were: BLOBs as base64, integers past 2^53 as text', async () => {
  const r = await query({ sql: "SELECT x'00ff10' AS b, zeroblob(2) AS z, 9007199254740993 AS big, -9007199254740993 AS neg, 9007199254740991 AS safe, 1.5 AS r, 'é' AS t, NULL AS n" });
  assert.is(r.status, 200);
  assert.equal(r.body.columns, ['b', 'z', 'big', 'neg', 'safe', 'r', 't', 'n']);
  assert.equal(r.body.rows, [['AP8Q', 'AAA=', '9007199254740993', '-9007199254740993', 9007199254740991, 1.5, 'é', null]]);
});

test('errors keep their status and words', async () => {
  const refused = await query({ sql: 'DELETE FROM runs_stored' });
  assert.equal([refused.status, refused.body.error.code], [422, 'invalid_input']);
  assert.match(refused.body.error.message, /not a read-only query/);
  assert.match(refused.body.error.hint, /writes, ATTACH/);
  const pragma = await query({ sql: 'PRAGMA mmap_size = 1' });
  assert.equal([pragma.status, pragma.body.error.message], [422, 'refused: the statement is not a read-only query (it sets a PRAGMA)']);
  const bad = await query({ sql: 'SELECT json_extract(1, 2)' });
  assert.equal([bad.status, bad.body.error.message], [422, "SQL error: bad JSON path: '2'"]);
  const expression = await get('/api/mounts/default/find?match=(((');
  assert.equal([expression.status, expression.body.error.code], [422, 'invalid_input']);
});

test('SIGTERM while a statement runs stops it, and serve exits 0 at once', async () => {
  const stopping = await startServeProcess(['serve', dataset, '--listen', '127.0.0.1:0'], { env, cwd: home });
  const running = post('/api/mounts/default/query', { sql: ENDLESS, timeout_ms: 20_000 }, stopping.url);
  await sleep(500);
  const queued = post('/api/mounts/default/query', { sql: ENDLESS, timeout_ms: 20_000 }, stopping.url);
  await sleep(200);
  const started = Date.now();
  assert.is(await stopping.stop(), 0);
  assert.ok(Date.now() - started < 3000, `exited after ${Date.now() - started} ms`);
  // The statement was stopped by the signal, as the command line's is; the queued one never ran.
  const stopped = await running;
  assert.equal([stopped.status, stopped.body.error.message], [500, 'interrupted']);
  const refused = await queued;
  assert.is(refused.status, 503, JSON.stringify(refused.body));
});

test.run();
