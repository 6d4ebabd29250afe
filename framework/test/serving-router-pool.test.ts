/**
 * The Router's choice of worker when one is reached but does not start its reply: the request is
 * not handed to the next worker (the request itself may be what holds the first, and would hold the
 * next too), and the client gets 504 `worker_timeout` naming the worker by node id, not address.
 * Two stand-in workers: one in a node process of its own that reports itself idle (so the Router
 * picks it first) and holds its event loop once it has a request; one beside the Router that
 * answers and reports itself busy.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { freePort } from '../../bench/lib/free-port.js';
import { remote } from '../core/actor.js';
import { ActorSystem } from '../core/system.js';
import type { GenerateChunk, LoadReport } from '../serving/contract.js';
import { Router } from '../serving/index.js';
import { OPEN_TIMEOUT_MS } from '../serving/router/pool.js';
import { FAST_CLIENT_TIMERS, killAll, startNode, waitFor, type NodeProcess } from './helpers/cluster.js';

let answered = 0;

class AnsweringWorker {
  async *generateStream(): AsyncGenerator<GenerateChunk> {
    answered++;
    yield { type: 'text', text: 'hi', tokens: 1 };
    yield { type: 'end', finish_reason: 'stop', usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } };
  }

  load(): LoadReport {
    return { model: 'tiny', active: 5, queued: 0, sequences: 8, tokens_per_s: 0, generated_tokens: 0, completed: 0, cancelled: 0 };
  }
}

let system: ActorSystem;
let stuck: NodeProcess;
let url = '';

test.before(async () => {
  system = await ActorSystem.start({ timers: FAST_CLIENT_TIMERS, log: () => {} });
  await system.spawn(remote(AnsweringWorker), { name: 'worker' });
  stuck = await startNode({ classPath: 'framework.test.helpers.stuck-worker.StuckWorker', name: 'worker', seeds: [system.addr] });
  const port = await freePort();
  await system.spawn(Router, { name: 'router', params: { http_port: port, model_name: 'tiny', worker_name: 'worker' } });
  url = `http://127.0.0.1:${port}`;
  // Until the Router has both workers' loads, it would take them in turns.
  await waitFor('the Router to know both loads', async () => {
    const health = (await (await fetch(`${url}/health`)).json()) as { workers: Array<{ active?: number }> };
    return health.workers.length === 2 && health.workers.every((w) => w.active !== undefined);
  });
});

test.after(async () => {
  await killAll();
  await system.shutdown();
});

test('a worker that was reached but does not start its reply is not replaced by the next: 504 worker_timeout, by node id', async () => {
  const started = Date.now();
  const answer = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', prompt: 'The', max_tokens: 2 }) });
  const body = (await answer.json()) as { error: { code: string; message: string } };
  assert.is(answer.status, 504, JSON.stringify(body));
  assert.is(body.error.code, 'worker_timeout');
  assert.is(body.error.message, `worker ${stuck.nodeId} did not start the reply within ${OPEN_TIMEOUT_MS / 1000} s`);
  assert.ok(Date.now() - started >= OPEN_TIMEOUT_MS - 500, 'it waited for the open time limit');
  assert.is(answered, 0, 'the request went to the stuck worker only');
});

test.run();
