/**
 * A worker that membership only suspects (it missed a probe, as a node busy decoding may) still
 * takes the Router's requests when no worker is Alive: left out until it refuted the suspicion, a
 * Router with one worker refused every request meanwhile (503 no_worker; 89 to 237 of 700 requests
 * under the tests' fast timers). Two systems in this process; probes are slowed so that the
 * suspicion set here stands while the requests are sent.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { freePort } from '../../bench/lib/free-port.js';
import { remote } from '../core/actor.js';
import { ActorSystem } from '../core/system.js';
import type { GenerateChunk, LoadReport } from '../serving/contract.js';
import { Router } from '../serving/index.js';
import { waitFor } from './helpers/cluster.js';

class Worker {
  async *generateStream(): AsyncGenerator<GenerateChunk> {
    yield { type: 'text', text: 'hi', tokens: 1 };
    yield { type: 'end', finish_reason: 'stop', usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } };
  }

  load(): LoadReport {
    return { model: 'tiny', active: 0, queued: 0, sequences: 8, tokens_per_s: 0, generated_tokens: 0, completed: 0, cancelled: 0 };
  }
}

/** No probe, hence no refutation, for the length of the test. */
const SLOW_PROBES = { probeIntervalMs: 60_000 };

test('requests reach the only worker while membership suspects it, and 503 only once no worker is Alive or Suspect', async () => {
  const workers = await ActorSystem.start({ timers: SLOW_PROBES, log: () => {} });
  const routers = await ActorSystem.start({ timers: SLOW_PROBES, seeds: [workers.addr], log: () => {} });
  try {
    await workers.spawn(remote(Worker), { name: 'worker' });
    await waitFor('the Router node to see the worker', () => routers.instances('worker').length === 1);
    const port = await freePort();
    await routers.spawn(Router, { name: 'router', params: { http_port: port, model_name: 'tiny', worker_name: 'worker' } });
    const complete = async () => {
      const answer = await fetch(`http://127.0.0.1:${port}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', prompt: 'The', max_tokens: 1 }) });
      return { status: answer.status, body: await answer.text() };
    };
    assert.is((await complete()).status, 200);

    const record = routers.membership.get(workers.nodeId)!;
    routers.membership.apply({ ...record, status: 'Suspect' });
    for (let i = 0; i < 5; i++) {
      const answer = await complete();
      assert.is(answer.status, 200, answer.body);
      assert.match(answer.body, '"text":"hi"');
    }
    assert.is(routers.membership.get(workers.nodeId)?.status, 'Suspect', 'the requests were sent while the worker was suspected');

    routers.membership.apply({ ...record, status: 'Failed' });
    const none = await complete();
    assert.is(none.status, 503, none.body);
    assert.match(none.body, 'no_worker');
  } finally {
    await routers.shutdown();
    await workers.shutdown();
  }
});

test.run();
