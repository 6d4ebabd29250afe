/**
 * `trajstore serve` and clients that stop reading their answers: the connection is closed once the
 * answer has not moved for SEND_TIMEOUT_MS (a minute), and meanwhile the answers such clients hold
 * in the server's memory are bounded all together (MAX_HELD_ANSWER_BYTES). Its own file: it waits
 * out that minute.
 */
import { join } from 'node:path';
import { connect, type Socket } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServeProcess } from '../../bench/lib/serve-process.js';
import { MAX_HELD_ANSWER_BYTES, SEND_TIMEOUT_MS } from '../../lib/http-limits.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { sandbox } from './helpers/sandbox.js';

const { home, env, run } = sandbox('serve-slow-client-');

test('a client that stops reading a big answer is disconnected after SEND_TIMEOUT_MS; the server answers others meanwhile', async () => {
  assert.is((await run(['import', '-f', join(SHARED_FIXTURES, 'persisting', 'atif', 'dialogue_10.json'), '-t', join(home, 'ds')])).code, 0);
  const server = await startServeProcess(['serve', join(home, 'ds'), '--listen', '127.0.0.1:0'], { env, cwd: home });
  try {
    const { hostname, port } = new URL(server.url);
    const socket = connect(Number(port), hostname);
    socket.on('error', () => {});
    const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    // About 60 MB of answer (a query's answer may be 64 MiB): far more than the kernel's socket buffers take, so most of it waits in the server.
    const body = JSON.stringify({ sql: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 60) SELECT hex(zeroblob(500000)) FROM c' });
    socket.write(`POST /api/mounts/default/query HTTP/1.1\r\nHost: ${hostname}:${port}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    // Reads the first bytes (the answer has begun), then nothing more.
    await new Promise((resolve) => socket.once('data', resolve));
    socket.pause();
    assert.is((await fetch(new URL('/api/mounts', server.url))).status, 200, 'others are answered');
    await new Promise((resolve) => setTimeout(resolve, SEND_TIMEOUT_MS + 5000));
    // Reading again: the server has given up, so what it had sent ends, and so does the connection
    // (one whose answer was all sent would be kept alive, open).
    socket.resume();
    const ended = await Promise.race([closed.then(() => true), new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 10_000))]);
    socket.destroy();
    assert.ok(ended, 'the stalled connection was closed');
    assert.is((await fetch(new URL('/api/mounts', server.url))).status, 200);
  } finally {
    await server.stop();
  }
});

test('clients that stop reading big answers hold at most MAX_HELD_ANSWER_BYTES of them in the server: past it a big answer is a 503 naming the limit, small ones still go through, and once those clients go big answers come again', async () => {
  assert.is((await run(['import', '-f', join(SHARED_FIXTURES, 'persisting', 'atif', 'dialogue_10.json'), '-t', join(home, 'held')])).code, 0);
  const server = await startServeProcess(['serve', join(home, 'held'), '--listen', '127.0.0.1:0'], { env, cwd: home });
  const stalled: Socket[] = [];
  try {
    const { hostname, port } = new URL(server.url);
    // About 60 MB of answer each: the kernel's socket buffers take little of it, the rest waits in the server.
    const body = JSON.stringify({ sql: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 60) SELECT hex(zeroblob(500000)) FROM c' });
    const big = () => fetch(new URL('/api/mounts/default/query', server.url), { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const fits = Math.floor(MAX_HELD_ANSWER_BYTES / 60e6);
    for (let i = 0; i < fits; i++) {
      const socket = connect(Number(port), hostname);
      socket.on('error', () => {});
      stalled.push(socket);
      socket.write(`POST /api/mounts/default/query HTTP/1.1\r\nHost: ${hostname}:${port}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
      const head = await new Promise<string>((resolve) => socket.once('data', (chunk: Buffer) => resolve(chunk.toString('latin1', 0, 20))));
      socket.pause();
      assert.match(head, 'HTTP/1.1 200', `stalled client ${i + 1} of ${fits} is answered`);
    }
    const refused = await big();
    const answer = (await refused.json()) as { error: { code: string; message: string } };
    assert.is(refused.status, 503, JSON.stringify(answer).slice(0, 200));
    assert.is(answer.error.code, 'unavailable');
    assert.match(answer.error.message, `${MAX_HELD_ANSWER_BYTES / 1024 / 1024} MiB`);
    assert.ok(Number(refused.headers.get('retry-after')) > 0, 'says when to try again');
    assert.is((await fetch(new URL('/api/mounts', server.url))).status, 200, 'a small answer goes through');
    stalled.forEach((socket) => socket.destroy());
    // Their answers are let go as their connections close.
    let again = 0;
    for (let tries = 0; tries < 50 && again !== 200; tries++) {
      const response = await big();
      await response.arrayBuffer();
      again = response.status;
      if (again !== 200) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    assert.is(again, 200, 'big answers come again');
  } finally {
    stalled.forEach((socket) => socket.destroy());
    await server.stop();
  }
});

test.run();
