/**
 * What the Router's 503s tell a client about when to come back. The official clients retry a 503
 * (twice by default) after the `retry-after-ms` or `retry-after` it carries; without either they
 * wait 0.5 s, then 1 s, and give up long before a worker that is still loading its model joins.
 * The Router runs in this process; the worker that joins late is an `actorctl actor` process on the
 * tiny model, and the overloaded one a stand-in beside the Router.
 */
import OpenAI from 'openai';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { freePort } from '../../bench/lib/free-port.js';
import { remote } from '../core/actor.js';
import { ActorSystem } from '../core/system.js';
import type { GenerateChunk, LoadReport } from '../serving/contract.js';
import { Router } from '../serving/index.js';
import { FAST_CLIENT_TIMERS, killAll, startNode, waitFor } from './helpers/cluster.js';

/** A worker whose queue is always full. */
class OverloadedWorker {
  async *generateStream(): AsyncGenerator<GenerateChunk> {
    yield { type: 'error', code: 'overloaded', message: 'the queue is full (256 waiting)' };
  }

  load(): LoadReport {
    return { model: 'tiny', active: 8, queued: 256, sequences: 8, tokens_per_s: 0, generated_tokens: 0, completed: 0, cancelled: 0 };
  }
}

let system: ActorSystem;

test.before(async () => {
  system = await ActorSystem.start({ timers: FAST_CLIENT_TIMERS, log: () => {} });
});

test.after(async () => {
  await killAll();
  await system.shutdown();
});

/** A Router on this process's node for the workers named `worker_name`; its base URL. */
async function startRouter(name: string, workerName: string): Promise<string> {
  const port = await freePort();
  await system.spawn(Router, { name, params: { http_port: port, model_name: 'tiny', worker_name: workerName } });
  return `http://127.0.0.1:${port}`;
}

const completion = (base: string) => fetch(`${base}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', prompt: 'The', max_tokens: 2 }) });

/** A 503 with the error `code`, telling the client to come back in `seconds` (both headers). */
async function assertTurnedAway(answer: Response, code: string, seconds: number): Promise<void> {
  const body = (await answer.json()) as { error: { code: string } };
  assert.equal([answer.status, body.error.code], [503, code], JSON.stringify(body));
  assert.is(answer.headers.get('retry-after'), String(seconds));
  assert.is(answer.headers.get('retry-after-ms'), String(seconds * 1000));
}

test('every worker overloaded: 503 overloaded, to come back in a second', async () => {
  await system.spawn(remote(OverloadedWorker), { name: 'busy' });
  const base = await startRouter('busy-router', 'busy');
  await assertTurnedAway(await completion(base), 'overloaded', 1);
});

test('no worker alive: 503 no_worker, to come back in 5 s; a client that retries as told gets its reply from a worker that joins meanwhile', async () => {
  const base = await startRouter('router', 'worker');
  await assertTurnedAway(await completion(base), 'no_worker', 5);

  // The client's own attempts, as they reach the Router.
  const attempts: Array<{ at: number; status: number }> = [];
  const recorded: typeof fetch = async (input, init) => {
    const response = await fetch(input, init);
    attempts.push({ at: Date.now(), status: response.status });
    return response;
  };
  const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'not-needed', maxRetries: 2, timeout: 30_000, fetch: recorded });
  const reply = openai.completions.create({ model: 'tiny', prompt: 'The', temperature: 0, max_tokens: 3 });
  // Awaited below; a failure meanwhile is not left unhandled.
  reply.catch(() => undefined);
  await waitFor('the first attempt', () => attempts.length === 1);
  // Started after the client's default backoff (0.5 s, then 1 s) would have given up.
  await new Promise((resolve) => setTimeout(resolve, 2_000));
  await startNode({ classPath: 'framework.serving.engine.EngineWorker', name: 'worker', seeds: [system.addr], params: ['--model', 'tiny', '--role', 'aggregated', '--max_new_tokens', '16', '--sequences', '1'] });
  const completed = await reply;
  assert.is(completed.usage?.completion_tokens, 3);
  assert.is(attempts[0]!.status, 503);
  assert.is(attempts[attempts.length - 1]!.status, 200);
  for (let i = 1; i < attempts.length; i++) assert.ok(attempts[i]!.at - attempts[i - 1]!.at >= 4_900, `attempt ${i + 1} came ${attempts[i]!.at - attempts[i - 1]!.at} ms after the one before`);
});

test.run();
