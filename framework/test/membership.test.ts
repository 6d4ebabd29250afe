/**
 * Membership rules checked on in-process nodes (real h2c on loopback), with short timers, and the
 * bounds of what a record may hold against a cluster of node processes.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { MAX_RECORD_ACTOR_CHARS, MAX_RECORD_ACTORS, MAX_SWIM_BYTES } from '../core/members.js';
import { isRecord, MAX_MEMBERS, parseSwimMessage, SWIM_PATH } from '../core/membership.js';
import { ActorSystem } from '../core/system.js';
import { killAll, memberStatuses, postAsPeer, startNode, waitFor } from './helpers/cluster.js';

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
  await killAll();
});

/** One membership message to `addr`, as a peer of the default cluster sends it. */
const swim = (addr: string, message: unknown) => postAsPeer(addr, SWIM_PATH, message, { 'content-type': 'application/json' });

/** A record of a member nobody runs, listing `actors`. */
const phantom = (i: number, actors: string[]) => ({ id: `${i}`.padStart(32, 'a'), addr: `127.0.0.1:${40000 + i}`, status: 'Alive' as const, inc: 0, started: Date.now(), actors });

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

/** A node that crashes: no Left announcement, its listener just goes away. */
async function crash(s: ActorSystem): Promise<void> {
  s.membership.stop();
  s.transport.close();
  await s.listener.close();
}

test('hearsay of a new process at a live member\'s address evicts nobody; a real restart there replaces the old member', async () => {
  const a = await start();
  const b = await start([a.addr]);
  await waitFor('a to see b', () => statusOf(a, b.nodeId) === 'Alive');
  // Claims to be a newer process at b's address: believed, it would drop b from the table (and tombstone it).
  const forged = { id: 'e'.repeat(32), addr: b.addr, status: 'Alive' as const, inc: 0, started: Date.now() + 1e12, actors: ['x'] };
  assert.not.ok(a.membership.apply(forged));
  await new Promise((r) => setTimeout(r, 500)); // a probes b's address: b answers as itself
  assert.is(statusOf(a, b.nodeId), 'Alive', 'b is still a member');
  assert.is(statusOf(a, forged.id), undefined, 'the forged process is not');
  assert.equal(a.instances('x'), []);
  // b crashes and a new process starts at its address: the address answers with the new id.
  await crash(b);
  const c = await ActorSystem.start({ addr: b.addr, seeds: [a.addr], timers, log: () => {} });
  systems.push(c);
  await waitFor('a to replace b by c', () => statusOf(a, c.nodeId) === 'Alive' && statusOf(a, b.nodeId) === undefined, 5000);
  assert.not.ok(a.membership.apply({ ...a.membership.get(c.nodeId)!, id: b.nodeId, started: 1 }), 'news of the older process is ignored');
});

test('forged news of a live member is refuted: Left, or a record of it with another address or actors; a member keeps its address', async () => {
  const a = await start();
  const b = await start([a.addr]);
  await waitFor('a to see b', () => statusOf(a, b.nodeId) === 'Alive');
  const record = a.membership.get(b.nodeId)!;
  assert.ok(a.membership.apply({ ...record, status: 'Left' }));
  await waitFor('b to refute Left', () => statusOf(a, b.nodeId) === 'Alive' && a.membership.get(b.nodeId)!.inc > record.inc, 3000, 5);
  // Another address for a known id would send its calls elsewhere: a member's address is fixed.
  const now = a.membership.get(b.nodeId)!;
  assert.not.ok(a.membership.apply({ ...now, addr: '127.0.0.1:9', inc: now.inc + 5 }));
  assert.is(a.membership.get(b.nodeId)!.addr, b.addr);
  // Where the forgery was believed (a node that did not know b yet), b hears of it and takes its record back.
  const other = await start();
  const stolen = { ...now, actors: ['hijacked'], inc: now.inc + 5 };
  assert.ok(other.membership.apply(stolen));
  b.membership.apply(stolen);
  assert.ok(b.membership.self.inc > stolen.inc, 'b answers a record of itself it did not send with a higher incarnation');
  assert.equal(b.membership.self.actors.includes('hijacked'), false);
  // A real leave is final: b refutes nothing once it leaves, and stale news cannot bring it back.
  await b.shutdown();
  await waitFor('a to see b Left', () => statusOf(a, b.nodeId) === 'Left' || statusOf(a, b.nodeId) === undefined, 3000, 5);
  const left = a.membership.get(b.nodeId);
  if (left) assert.not.ok(a.membership.apply({ ...left, status: 'Alive' }), 'an Alive of the same incarnation does not undo Left');
  assert.equal(a.instances('echo'), []);
});

test('hearsay far ahead of a member\'s incarnation is refused, so a forger cannot push it to the largest one peers accept', async () => {
  const a = await start();
  const b = await start([a.addr]);
  await waitFor('a to see b', () => statusOf(a, b.nodeId) === 'Alive');
  const record = a.membership.get(b.nodeId)!;
  const far = { ...record, status: 'Suspect' as const, inc: Number.MAX_SAFE_INTEGER - 2 };
  assert.not.ok(a.membership.apply(far), 'a peer refuses the jump');
  const before = b.membership.self.inc;
  b.membership.apply(far);
  assert.is(b.membership.self.inc, before, 'b does not refute past it');
  // An echo of b's own record at a higher incarnation is not b's: b takes its place above it.
  const echo = { ...a.membership.get(b.nodeId)!, status: 'Alive' as const, inc: b.membership.self.inc + 5 };
  b.membership.apply(echo);
  assert.ok(b.membership.self.inc > echo.inc);
  // News a little ahead (refutations a peer missed) is still taken, and refuted as ever.
  const near = a.membership.get(b.nodeId)!;
  assert.ok(a.membership.apply({ ...near, status: 'Suspect', inc: near.inc + 3 }));
  await waitFor('b to refute the suspicion', () => statusOf(a, b.nodeId) === 'Alive' && a.membership.get(b.nodeId)!.inc > near.inc + 3, 3000, 5);
});

test('records holding more actors than one may are refused, and the cluster they were meant to flood stays Alive', async () => {
  const a = await startNode({ name: 'echo' });
  const [b, c] = await Promise.all([startNode({ name: 'echo', seeds: [a.addr] }), startNode({ name: 'echo', seeds: [a.addr] })]);
  const nodes = [a, b!, c!];
  const allAlive = async (): Promise<boolean> => {
    for (const n of nodes) {
      const statuses = await memberStatuses(n.addr);
      if (statuses.size !== nodes.length || [...statuses.values()].some((s) => s !== 'Alive')) return false;
    }
    return true;
  };
  await waitFor('three Alive members on every node', allAlive);
  // Two pings, each with a member whose record lists about 3 MB of actor names: together more than a
  // message may carry, so a node that believed them could send no probe its peers would take.
  const many = Array.from({ length: 330_000 }, (_, i) => `a${i}`);
  const floods = [];
  for (const i of [1, 2]) floods.push(await swim(a.addr, { type: 'ping', from: phantom(100 + i, []), updates: [phantom(i, many)] }));
  // Probes run every 100 ms and a missed one makes a member Suspect: every look for 3 s finds all Alive.
  const until = Date.now() + 3000;
  while (Date.now() < until) {
    assert.ok(await allAlive(), `every member Alive on every node: ${JSON.stringify(await Promise.all(nodes.map(async (n) => [...(await memberStatuses(n.addr))])))}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  for (const refused of floods) {
    assert.is(refused.status, 400, refused.body);
    assert.match(refused.body, `lists 330000 actors; at most ${MAX_RECORD_ACTORS}`);
  }
  const long = await swim(a.addr, { type: 'ping', from: phantom(103, []), updates: [phantom(3, ['x'.repeat(100_000)])] });
  assert.is(long.status, 400);
  assert.match(long.body, 'an actor name that does not match');
  const sum = await swim(a.addr, { type: 'sync', from: phantom(104, Array.from({ length: 1000 }, (_, i) => `${i}`.padStart(255, 'n'))), members: [] });
  assert.is(sum.status, 400);
  assert.match(sum.body, `at most ${MAX_RECORD_ACTOR_CHARS}`);
  // Believed, the records would fail every probe (one every 100 ms); a busy machine may delay one or two.
  const suspicions = nodes.reduce((sum, n) => sum + (n.output().match(/Suspect/g) ?? []).length, 0);
  assert.ok(suspicions <= 2, `at most a passing suspicion, not one per probe: ${nodes.map((n) => n.output()).join('\n')}`);
});

test('a node never sends a membership message over the limit: a table of many full records goes a part at a time', async () => {
  const a = await start();
  // Records at the bounds: 1,024 names of 64 characters each, 64 KiB in all; 100 of them hold 6.5 MB.
  const full = (i: number) => phantom(i, Array.from({ length: MAX_RECORD_ACTORS }, (_, k) => `${i}-${k}`.padStart(MAX_RECORD_ACTOR_CHARS / MAX_RECORD_ACTORS, 'n')));
  for (let i = 1; i <= 100; i++) assert.ok(a.membership.apply(full(i)), `record ${i} is within the bounds`);
  assert.not.ok(isRecord({ ...full(0), actors: [...full(0).actors, 'one-more'] }), 'one name more is past them');
  const sync = await a.membership.handle({ type: 'sync', from: phantom(200, []), members: [] });
  const bytes = Buffer.byteLength(JSON.stringify(sync));
  assert.ok(bytes <= MAX_SWIM_BYTES, `a sync reply of ${bytes} bytes`);
  assert.is(sync.type === 'sync' && sync.members[0]!.id, a.nodeId, 'this node first');
  // Its peers take what it sends: a node joining through it becomes a member on both sides.
  const b = await start([a.addr]);
  await waitFor('a and b to see each other', () => statusOf(a, b.nodeId) === 'Alive' && statusOf(b, a.nodeId) === 'Alive');
  const ack = await a.membership.handle({ type: 'ping', from: phantom(201, []), updates: [] });
  assert.ok(Buffer.byteLength(JSON.stringify(ack)) <= MAX_SWIM_BYTES, 'an ack with its piggybacked records fits');
});

test.run();
