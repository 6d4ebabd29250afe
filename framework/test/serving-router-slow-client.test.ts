/**
 * The Router and a client that stops reading its stream: once the stream has not moved for
 * SEND_TIMEOUT_MS (a minute), the Router closes the connection and cancels the reply on its worker,
 * so that such clients hold neither a worker's sequence nor the Router's memory for good. Its own
 * file: it waits out that minute.
 */
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { freePort } from '../../bench/lib/free-port.js';
import { SEND_TIMEOUT_MS } from '../../lib/http-limits.js';
import { killAll, startNode, waitFor } from './helpers/cluster.js';

test.after(async () => {
  await killAll();
});

test('a client that stops reading its stream is disconnected after SEND_TIMEOUT_MS and its reply cancelled on the worker; others are served meanwhile', async () => {
  const port = await freePort();
  const router = await startNode({ classPath: 'framework.serving.Router', name: 'router', params: ['--http_port', String(port), '--model_name', 'tiny', '--worker_name', 'worker'] });
  await startNode({ classPath: 'framework.test.helpers.endless-worker.EndlessWorker', name: 'worker', seeds: [router.addr] });
  const base = `http://127.0.0.1:${port}`;
  type Health = { workers: Array<{ active?: number }> };
  const health = async (): Promise<Health> => (await (await fetch(`${base}/health`)).json()) as Health;
  await waitFor('the Router to know its worker and its load', async () => (await health()).workers[0]?.active === 0);

  const socket = connect(port, '127.0.0.1');
  socket.on('error', () => {});
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
  const body = JSON.stringify({ model: 'tiny', prompt: 'The', stream: true });
  socket.write(`POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  // Reads the first bytes (the stream has begun), then nothing more: the reply fills the socket buffers and waits.
  await new Promise((resolve) => socket.once('data', resolve));
  socket.pause();
  await waitFor('the worker to report the reply under way', async () => (await health()).workers[0]?.active === 1);
  await sleep(SEND_TIMEOUT_MS + 5000);
  // Others are answered; the stalled reply was let go on the worker.
  const after = await health();
  assert.is(after.workers[0]?.active, 0, `the reply still runs on the worker: ${JSON.stringify(after)}`);
  socket.resume();
  const ended = await Promise.race([closed.then(() => true), sleep(10_000).then(() => false)]);
  socket.destroy();
  assert.ok(ended, 'the stalled connection was closed');
});

test.run();
