/**
 * What the Router tells its operator: a request it answers with a failure of its own side (500 and
 * up, but the 503s of a busy or empty pool) or a stream a failure cuts short gets one line on
 * stderr, with the request's id (the `x-request-id` the client saw) and what failed. The Router is
 * an `actorctl actor` process; the workers are stand-ins on this test's node, which it joins.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { freePort } from '../../bench/lib/free-port.js';
import { remote } from '../core/actor.js';
import { ActorSystem } from '../core/system.js';
import type { GenerateChunk, LoadReport } from '../serving/contract.js';
import { FAST_CLIENT_TIMERS, killAll, startNode, waitFor, type NodeProcess } from './helpers/cluster.js';

const LOAD: LoadReport = { model: 'tiny', active: 0, queued: 0, sequences: 1, tokens_per_s: 0, generated_tokens: 0, completed: 0, cancelled: 0 };

/** A worker whose model fails before the first token. */
class FailingWorker {
  async *generateStream(): AsyncGenerator<GenerateChunk> {
    yield { type: 'error', code: 'internal', message: 'llama_decode failed: out of memory' };
  }

  load(): LoadReport {
    return LOAD;
  }
}

/** A worker whose model fails after its first words. */
class FailingMidStreamWorker {
  async *generateStream(): AsyncGenerator<GenerateChunk> {
    yield { type: 'text', text: 'Once upon', tokens: 2 };
    yield { type: 'error', code: 'internal', message: 'llama_decode failed: out of memory' };
  }

  load(): LoadReport {
    return LOAD;
  }
}

let system: ActorSystem;

test.before(async () => {
  system = await ActorSystem.start({ timers: FAST_CLIENT_TIMERS, log: () => {} });
  await system.spawn(remote(FailingWorker), { name: 'failing' });
  await system.spawn(remote(FailingMidStreamWorker), { name: 'mid' });
});

test.after(async () => {
  await killAll();
  await system.shutdown();
});

/** A Router process for the workers named `workerName`, and its base URL. */
async function startRouter(workerName: string): Promise<{ node: NodeProcess; base: string }> {
  const port = await freePort();
  const node = await startNode({ classPath: 'framework.serving.Router', name: 'router', seeds: [system.addr], params: ['--http_port', String(port), '--model_name', 'tiny', '--worker_name', workerName] });
  return { node, base: `http://127.0.0.1:${port}` };
}

const complete = (base: string, stream: boolean) =>
  fetch(`${base}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', prompt: 'The', max_tokens: 4, stream }) });

/** The first answer not a 503: those come until the Router's membership knows the worker. */
const firstServed = (base: string, stream: boolean): Promise<Response> =>
  waitFor('the Router to know the worker', async () => {
    const response = await complete(base, stream);
    return response.status === 503 ? undefined : response;
  });

/** The Router's stderr lines that start `error:`. */
const errorLines = (node: NodeProcess): string[] => node.output().split('\n').filter((line) => line.startsWith('error:'));

/** Its `error:` lines, once there is one. */
const logged = (node: NodeProcess): Promise<string[]> => waitFor('the log line', () => (errorLines(node).length ? errorLines(node) : undefined));

test("a worker's failure answered 500: one line naming the request and the worker's message", async () => {
  const { node, base } = await startRouter('failing');
  const answer = await firstServed(base, false);
  const id = answer.headers.get('x-request-id');
  assert.is(answer.status, 500, await answer.text());
  const lines = await logged(node);
  assert.equal(lines, [`error: request ${id} answered 500: llama_decode failed: out of memory`], node.output());
});

test('a stream cut short by its worker: one line naming the request and why', async () => {
  const { node, base } = await startRouter('mid');
  const answer = await firstServed(base, true);
  const id = answer.headers.get('x-request-id');
  const text = await answer.text();
  assert.ok(text.includes('"error"') && !text.includes('[DONE]'), text);
  const lines = await logged(node);
  assert.equal(lines, [`error: request ${id}: stream ended by an error: llama_decode failed: out of memory`], node.output());
});

test('no worker alive (503): no line, however many are turned away', async () => {
  const { node, base } = await startRouter('nobody');
  for (let i = 0; i < 5; i++) assert.is((await complete(base, false)).status, 503);
  // A line written for the last 503 has had time to reach this process's pipe by the time /health answers.
  assert.is((await fetch(`${base}/health`)).status, 503);
  await new Promise((resolve) => setTimeout(resolve, 100));
  assert.equal(errorLines(node), [], node.output());
});

test.run();
