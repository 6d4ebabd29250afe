/**
 * The Router and clients that hold their requests, before a worker started them or after: requests
 * waiting for a worker are capped (each holds its body, up to 1 MiB, in the Router's memory); a
 * client that stops reading its stream is disconnected once the stream has not moved for
 * SEND_TIMEOUT_MS (a minute), and its reply cancelled on the worker, so that such clients hold
 * neither a worker's sequence nor the Router's memory for good. The worker's replies never end
 * (EndlessWorker). Its own file: it waits out that minute.
 */
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { freePort } from '../../bench/lib/free-port.js';
import { DEFAULT_LIMITS } from '../core/limits.js';
import { MAX_UNSTARTED_PER_WORKER } from '../serving/router/pool.js';
import { SEND_TIMEOUT_MS } from '../../lib/http-limits.js';
import { runTool } from '../../lib/testing/run-tool.js';
import { killAll, startNode, waitFor, type NodeProcess } from './helpers/cluster.js';

let port: number;
let base: string;
let router: NodeProcess;
type Health = { workers: Array<{ active?: number }> };
const health = async (): Promise<Health> => (await (await fetch(`${base}/health`)).json()) as Health;

test.before(async () => {
  port = await freePort();
  base = `http://127.0.0.1:${port}`;
  router = await startNode({ classPath: 'framework.serving.Router', name: 'router', params: ['--http_port', String(port), '--model_name', 'tiny', '--worker_name', 'worker'] });
  await startNode({ classPath: 'framework.test.helpers.endless-worker.EndlessWorker', name: 'worker', seeds: [router.addr] });
  await waitFor('the Router to know its worker and its load', async () => (await health()).workers[0]?.active === 0);
});

test.after(async () => {
  await killAll();
});

/** The API requests the Router has taken (its metadata, as `inspect actors` shows it). */
async function routed(): Promise<number> {
  const inspected = await runTool('actorctl', ['inspect', 'actors', '--endpoint', router.addr, '--format', 'json']);
  return (JSON.parse(inspected.stdout) as Array<{ requests: number }>)[0]!.requests;
}

/** A streamed completion request on a connection of its own, whose answer is not read; its chunks have `chunkChars` characters (EndlessWorker). */
function heldRequest(chunkChars?: number): Socket {
  const socket = connect(port, '127.0.0.1');
  socket.on('error', () => {});
  socket.pause();
  const body = JSON.stringify({ model: 'tiny', prompt: 'The', stream: true, max_tokens: chunkChars });
  socket.write(`POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  return socket;
}

test('requests a worker has not started are capped: past the cap, 503 overloaded at once; the ones held are let go when their clients go', async () => {
  // The channel to the worker carries max_streams replies at once, all started here; the rest wait in the Router.
  // Replies of a character a tick: hundreds of them cost the machine little.
  const held = Array.from({ length: DEFAULT_LIMITS.maxStreams }, () => heldRequest(1));
  try {
    await waitFor('the worker to have started as many replies as the channel carries', async () => (await health()).workers[0]?.active === DEFAULT_LIMITS.maxStreams, 30_000);
    held.push(...Array.from({ length: MAX_UNSTARTED_PER_WORKER }, () => heldRequest(1)));
    await waitFor('the Router to hold them all', async () => (await routed()) === held.length, 30_000);
    const response = await fetch(`${base}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', prompt: 'The' }), signal: AbortSignal.timeout(10_000) });
    const refused = (await response.json()) as { error: { code: string; message: string } };
    assert.is(response.status, 503);
    assert.is(refused.error.code, 'overloaded');
    assert.match(refused.error.message, `the Router holds ${MAX_UNSTARTED_PER_WORKER} requests that no worker has started (at most ${MAX_UNSTARTED_PER_WORKER} a worker)`);
    assert.is((await health()).workers[0]?.active, DEFAULT_LIMITS.maxStreams);
  } finally {
    for (const socket of held) socket.destroy();
  }
  await waitFor('the worker to have let go of every reply', async () => (await health()).workers[0]?.active === 0);
});

test('a client that stops reading its stream is disconnected after SEND_TIMEOUT_MS and its reply cancelled on the worker; others are served meanwhile', async () => {
  const socket = heldRequest();
  socket.resume();
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
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
