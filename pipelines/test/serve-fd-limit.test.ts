/**
 * `trajstore serve` under a low open-file limit (300) and a flood of held connections: the
 * listener's cap keeps descriptors for the server's own work, so a client connected before the
 * flood is still answered from the dataset, and after the flood new clients are too. Without the
 * cap the flood took every descriptor and reading the dataset failed with EMFILE.
 */
import { Agent } from 'node:http';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServeProcess } from '../../bench/lib/serve-process.js';
import { holdConnections, requestOn, sampleDescriptors, underOpenFileLimit } from '../../lib/testing/descriptors.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { sandbox } from './helpers/sandbox.js';

const NOFILE = 300;
const { home, env, run } = sandbox('serve-fd-limit-');

test('a flood of held connections beyond the cap: descriptors stay under the limit, a connected client is answered, new ones after', async () => {
  assert.is((await run(['import', '-f', join(SHARED_FIXTURES, 'persisting', 'atif', 'dialogue_10.json'), '-t', join(home, 'ds')])).code, 0);
  const server = await startServeProcess(['serve', join(home, 'ds'), '--listen', '127.0.0.1:0'], { env, cwd: home, wrap: underOpenFileLimit(NOFILE) });
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const runs = new URL('/api/mounts/default/runs', server.url).href;
    assert.is((await requestOn(agent, runs)).status, 200);
    const held = holdConnections(Number(new URL(server.url).port), 2 * NOFILE);
    const descriptors = sampleDescriptors(server.child.pid!);
    try {
      await sleep(1000);
      for (const path of ['/api/mounts/default/runs', '/api/mounts/default']) {
        const answer = await requestOn(agent, new URL(path, server.url).href);
        assert.is(answer.status, 200, `${path} during the flood: ${answer.text.slice(0, 300)}`);
      }
      const most = descriptors.stop();
      assert.ok(most < NOFILE, `serve held ${most} descriptors of its ${NOFILE}`);
    } finally {
      descriptors.stop();
      held.release();
      agent.destroy();
    }
    await sleep(200);
    assert.is((await fetch(runs)).status, 200);
    assert.is(server.stderr().match(/at its cap of \d+ connections/g)?.length, 1, server.stderr());
  } finally {
    await server.stop();
  }
});

test.run();
