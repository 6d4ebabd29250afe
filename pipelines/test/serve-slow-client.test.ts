/**
 * `trajstore serve` and a client that stops reading its answer: the connection is closed once the
 * answer has not moved for SEND_TIMEOUT_MS (a minute), so such clients cannot pile up answers in
 * the server's memory. Its own file: it waits out that minute.
 */
import { join } from 'node:path';
import { connect } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServeProcess } from '../../bench/lib/serve-process.js';
import { SEND_TIMEOUT_MS } from '../../lib/http-limits.js';
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

test.run();
