/**
 * The Router's HTTP API under a low open-file limit (300) and a flood of held connections: the
 * listener's cap keeps the node's descriptors under the limit, a client connected before the flood
 * is still answered, and new clients are after it.
 */
import { Agent } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { freePort } from '../../bench/lib/free-port.js';
import { holdConnections, requestOn, sampleDescriptors, underOpenFileLimit } from '../../lib/testing/descriptors.js';
import { killAll, startNode } from './helpers/cluster.js';

const NOFILE = 300;

test.after(async () => {
  await killAll();
});

test('a flood of held connections beyond the cap: descriptors stay under the limit, a connected client is answered, new ones after', async () => {
  const port = await freePort();
  const router = await startNode({ classPath: 'framework.serving.Router', name: 'router', params: ['--http_port', String(port), '--model_name', 'tiny'], wrap: underOpenFileLimit(NOFILE) });
  const base = `http://127.0.0.1:${port}`;
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  assert.is((await requestOn(agent, `${base}/v1/models`)).status, 200);
  const held = holdConnections(port, 2 * NOFILE);
  const descriptors = sampleDescriptors(router.proc.pid!);
  try {
    await sleep(1000);
    const models = await requestOn(agent, `${base}/v1/models`);
    assert.is(models.status, 200, models.text);
    const most = descriptors.stop();
    assert.ok(most < NOFILE, `the node held ${most} descriptors of its ${NOFILE}`);
  } finally {
    descriptors.stop();
    held.release();
    agent.destroy();
  }
  await sleep(200);
  assert.is((await fetch(`${base}/v1/models`)).status, 200);
  assert.is(router.output().match(/at its cap of \d+ connections/g)?.length, 1, router.output());
});

test.run();
