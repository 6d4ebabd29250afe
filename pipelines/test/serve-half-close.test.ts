/**
 * A client that half-closes its connection once its request is sent (`shutdown(SHUT_WR)`: `nc -N`,
 * a Node socket's `end()`) still waits for its answer, and gets it from `find` and `query`; a
 * client that closes its connection outright while its statement runs stops that statement, as
 * before. Both look alike to the server until it writes: see lib/client-gone.ts.
 */
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServeProcess, type ServeProcess } from '../../bench/lib/serve-process.js';
import { finalAnswer } from '../../lib/testing/host-header.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { sandbox } from './helpers/sandbox.js';

const { home, env, run: trajstore } = sandbox('serve-half-close-');
const dataset = join(home, 'ds');
/** Runs until it is stopped: it yields no row before its end, so only the watchdog ends it. */
const ENDLESS = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c';
let server: ServeProcess;
let port: number;

test.before(async () => {
  const imported = await trajstore(['import', '-f', join(SHARED_FIXTURES, 'persisting', 'atif'), '-t', dataset]);
  assert.is(imported.code, 0, imported.stderr);
  server = await startServeProcess(['serve', dataset, '--listen', '127.0.0.1:0'], { env, cwd: home });
  port = Number(new URL(server.url).port);
});

test.after(async () => {
  await server?.stop();
});

interface Raw {
  socket: Socket;
  /** Everything the server sent, once it closed the connection. */
  text: Promise<string>;
}

/** Sends a whole request over a fresh connection and half-closes it (a FIN after the request). */
function halfClosed(method: string, path: string, body = '', version = '1.1'): Raw {
  const socket = connect(port, '127.0.0.1');
  const head = `${method} ${path} HTTP/${version}\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`;
  socket.end(head + body);
  let text = '';
  socket.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
  const closed = new Promise<string>((resolve, reject) => {
    socket.on('error', reject);
    socket.on('close', () => resolve(text));
  });
  return { socket, text: closed };
}

/** The final answer of a raw exchange (after any 1xx interim ones): its status line and parsed body. */
function finalJson(text: string): { interim: string[]; status: string; body: any } {
  const { interim, head, body } = finalAnswer(text);
  return { interim, status: head.split('\r\n')[0] ?? '', body: body === '' ? undefined : JSON.parse(body) };
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function query(body: Record<string, unknown>): Promise<{ status: number; body: any; ms: number }> {
  const started = Date.now();
  const response = await fetch(new URL('/api/mounts/default/query', server.url), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: response.status, body: await response.json(), ms: Date.now() - started };
}

test('find and query answer a client that half-closed after its request, as they answer any other', async () => {
  const find = await fetch(new URL('/api/mounts/default/find?match=the', server.url));
  const expected = await find.json();
  const found = finalJson(await halfClosed('GET', '/api/mounts/default/find?match=the').text);
  assert.is(found.status, 'HTTP/1.1 200 OK');
  assert.equal(found.body, expected);

  const sql = JSON.stringify({ sql: 'SELECT 7 AS n' });
  const queried = finalJson(await halfClosed('POST', '/api/mounts/default/query', sql).text);
  assert.is(queried.status, 'HTTP/1.1 200 OK');
  assert.equal([queried.body.columns, queried.body.rows], [['n'], [[7]]]);
});

test('a statement that takes a while is answered to a half-closed client, after interim 102s that keep telling it is there', async () => {
  const started = Date.now();
  const answer = finalJson(await halfClosed('POST', '/api/mounts/default/query', JSON.stringify({ sql: ENDLESS, timeout_ms: 1500 })).text);
  assert.is(answer.status, 'HTTP/1.1 200 OK');
  assert.is(answer.body.truncated, 'timeout');
  assert.ok(Date.now() - started >= 1400, `answered after ${Date.now() - started} ms`);
  assert.ok(answer.interim.length > 0 && answer.interim.every((line) => line === 'HTTP/1.1 102 Processing'), JSON.stringify(answer.interim));
});

test('an HTTP/1.0 client that half-closed gets its answer, and no interim answer (1.0 has none)', async () => {
  const answer = finalJson(await halfClosed('POST', '/api/mounts/default/query', JSON.stringify({ sql: ENDLESS, timeout_ms: 800 }), '1.0').text);
  assert.is(answer.status, 'HTTP/1.1 200 OK');
  assert.is(answer.body.truncated, 'timeout');
  assert.equal(answer.interim, []);
});

test('a half-closed client that then closes its connection stops its statement: the next request is answered at once', async () => {
  const leaving = halfClosed('POST', '/api/mounts/default/query', JSON.stringify({ sql: ENDLESS, timeout_ms: 20_000 }));
  await sleep(700);
  leaving.socket.destroy();
  // Had it run on, this would wait for its 20 s.
  const next = await query({ sql: 'SELECT 3 AS n', timeout_ms: 20_000 });
  assert.equal([next.status, next.body.rows], [200, [[3]]]);
  assert.ok(next.ms < 2000, `answered after ${next.ms} ms`);
});

test('a client that closes its connection outright while its statement runs stops it', async () => {
  const socket = connect(port, '127.0.0.1');
  const body = JSON.stringify({ sql: ENDLESS, timeout_ms: 20_000 });
  socket.write(`POST /api/mounts/default/query HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  await sleep(500);
  socket.destroy();
  const next = await query({ sql: 'SELECT 4 AS n', timeout_ms: 20_000 });
  assert.equal([next.status, next.body.rows], [200, [[4]]]);
  assert.ok(next.ms < 2000, `answered after ${next.ms} ms`);
});

test.run();
