/** Membership rules checked on in-process nodes (real h2c on loopback), with short timers. */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isRecord, MAX_MEMBERS, parseSwimMessage } from '../core/membership.js';
import { ActorSystem } from '../core/system.js';
import { waitFor } from './helpers/cluster.js';

const timers = { probeIntervalMs: 50, probeTimeoutMs: 100, indirectTimeoutMs: 200, suspectTimeoutMs: 400, syncIntervalMs: 300, joinRetryMs: 100, removeAfterMs: 600 };
const systems: ActorSystem[] = [];
const start = async (seeds: string[] = []): Promise<ActorSystem> => {
  const s = await ActorSystem.start({ seeds, timers, log: () => {} });
  systems.push(s);
  return s;
};
const statusOf = (at: ActorSystem, id: string): string | undefined => at.membership.list().find((m) => m.id === id)?.status;

test.after(async () => {
  await Promise.allSettled(systems.map((s) => s.shutdown()));
});

test('a crashed member goes Suspect, then Failed, then is forgotten', async () => {
  const a = await start();
  const b = await start([a.addr]);
  await waitFor('a to see b', () => statusOf(a, b.nodeId) === 'Alive');
  // A crash: no Left announcement, the listener just goes away.
  b.membership.stop();
  b.transport.close();
  await b.listener.close();
  const seen = new Set<string>();
  await waitFor('b forgotten', () => {
    const s = statusOf(a, b.nodeId);
    if (s) seen.add(s);
    return s === undefined && seen.has('Failed');
  }, 5000, 5);
  assert.ok(seen.has('Suspect'), `statuses seen: ${[...seen]}`);
  // Stale gossip about the forgotten member cannot bring it back.
  assert.not.ok(a.membership.apply({ id: b.nodeId, addr: b.addr, status: 'Alive', inc: 0, started: 1, actors: [] }));
});

test('a member refutes a suspicion with a higher incarnation', async () => {
  const a = await start();
  const b = await start([a.addr]);
  await waitFor('a to see b', () => statusOf(a, b.nodeId) === 'Alive');
  const record = a.membership.get(b.nodeId)!;
  // Someone suspects b: the rumour spreads, b hears it and answers Alive at incarnation + 1.
  a.membership.apply({ ...record, status: 'Suspect' });
  assert.is(statusOf(a, b.nodeId), 'Suspect');
  await waitFor('b refuted', () => statusOf(a, b.nodeId) === 'Alive' && a.membership.get(b.nodeId)!.inc > record.inc, 3000, 5);
  assert.ok(b.membership.self.inc > record.inc);
  // An incarnation past the safe integers is not a record: refuting it with inc + 1 could never win.
  for (const inc of [2 ** 53, Number.MAX_SAFE_INTEGER, -1, 1.5]) assert.not.ok(isRecord({ ...record, status: 'Suspect', inc }), String(inc));
  assert.ok(isRecord({ ...record, status: 'Suspect', inc: 2 ** 40 }));
  // An address is host:port as nodes give theirs; anything else is not a record.
  for (const addr of ['//[::1', '', '127.0.0.1:99999', '127.0.0.1:0', 'host', `${'x'.repeat(300)}:1`, 'a b:1']) assert.not.ok(isRecord({ ...record, addr }), addr);
  for (const addr of ['127.0.0.1:8000', '[::1]:8000', 'node-3.example:65535']) assert.ok(isRecord({ ...record, addr }), addr);
});

test('the member table and each message are bounded: a flood of new members does not grow the table past MAX_MEMBERS', async () => {
  const a = await start();
  const fake = (i: number) => ({ id: i.toString(16).padStart(32, '0'), addr: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}:8000`, status: 'Alive' as const, inc: 0, started: 1, actors: [] });
  const many = Array.from({ length: MAX_MEMBERS + 1 }, (_, i) => fake(i + 1));
  assert.throws(() => parseSwimMessage({ type: 'join', from: fake(0), members: many }), /holds 1025 records; at most 1024/);
  for (const r of many) a.membership.apply(r);
  assert.is(a.membership.list().length, MAX_MEMBERS, 'this node and MAX_MEMBERS - 1 others');
});

test('a new process at a known address replaces the old member; Left is final', async () => {
  const a = await start();
  const old = { id: 'f'.repeat(32), addr: '127.0.0.1:1', status: 'Alive' as const, inc: 3, started: 1000, actors: ['x'] };
  assert.ok(a.membership.apply(old));
  assert.ok(a.membership.apply({ ...old, id: 'e'.repeat(32), started: 2000, inc: 0 }));
  assert.equal(a.membership.list().filter((m) => m.addr === old.addr).map((m) => m.id), ['e'.repeat(32)]);
  assert.not.ok(a.membership.apply({ ...old, started: 1000 }), 'news of the older process is ignored');
  assert.ok(a.membership.apply({ ...old, id: 'e'.repeat(32), started: 2000, inc: 0, status: 'Left' }));
  assert.not.ok(a.membership.apply({ ...old, id: 'e'.repeat(32), started: 2000, inc: 9, status: 'Alive' }), 'Left cannot be undone');
  assert.equal(a.instances('x'), [], 'actors of a Left member are not resolvable');
});

test.run();
