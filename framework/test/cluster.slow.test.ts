import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ActorSystem } from '../core/system.js';
import { FAST_CLIENT_TIMERS, killAll, memberStatuses, startNode, waitFor, type NodeProcess } from './helpers/cluster.js';

test.after(async () => {
  await killAll();
});

test('ten nodes join through two seeds, call each other, and agree on failures and leaves', async () => {
  const s1 = await startNode({ name: 'echo' });
  const s2 = await startNode({ name: 'echo', seeds: [s1.addr] });
  const rest = await Promise.all(Array.from({ length: 8 }, (_, i) => startNode({ name: 'echo', seeds: i % 2 ? [s1.addr, s2.addr] : [s2.addr] })));
  const nodes: NodeProcess[] = [s1, s2, ...rest];
  const addrs = nodes.map((n) => n.addr);
  for (const n of nodes) {
    await waitFor(`${n.addr} to see 10 Alive`, async () => {
      const s = await memberStatuses(n.addr);
      return addrs.every((a) => s.get(a) === 'Alive');
    }, 20_000);
  }
  const client = await ActorSystem.start({ seeds: [addrs[5]!], timers: FAST_CLIENT_TIMERS, log: () => {} });
  try {
    await waitFor('10 echo instances', () => client.instances('echo').length === 10);
    const rr = client.resolve('echo');
    const reached = new Set<string>();
    for (let i = 0; i < 20; i++) reached.add(await rr.ask<string>('node'));
    assert.is(reached.size, 10);
    const [x, y] = [nodes[8]!, nodes[9]!];
    x.proc.kill('SIGKILL');
    y.proc.kill('SIGTERM');
    assert.is(await y.exited, 0);
    const alive = nodes.slice(0, 8);
    for (const n of alive) {
      await waitFor(`${n.addr} to see the kill and the leave`, async () => {
        const s = await memberStatuses(n.addr);
        return s.get(x.addr) === 'Failed' && s.get(y.addr) === 'Left' && alive.every((m) => s.get(m.addr) === 'Alive');
      }, 20_000);
    }
    await waitFor('8 instances left', () => client.instances('echo').length === 8);
    const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => rr.ask('echo', [i])));
    assert.equal(answers, Array.from({ length: 40 }, (_, i) => i), 'no call went to a Failed or Left node');
  } finally {
    await client.shutdown();
  }
});

test.run();
