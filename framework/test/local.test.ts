import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Actor, remote, actorMeta } from '../core/actor.js';
import { ActorError } from '../core/errors.js';
import { ActorSystem } from '../core/system.js';
import { Type } from '@sinclair/typebox';
import { Echo } from '../examples/index.js';

let system: ActorSystem;
test.before(async () => {
  system = await ActorSystem.start({ log: () => {} });
});
test.after(async () => {
  await system.shutdown();
});

const code = async (p: Promise<unknown>): Promise<string> => {
  const e = await p.then(() => undefined, (error: unknown) => error);
  if (!(e instanceof ActorError)) throw new Error(`expected an ActorError, got ${String(e)}`);
  return e.code;
};

async function rejects(p: Promise<unknown>, reason: RegExp): Promise<void> {
  const e = await p.then(() => undefined, (error: unknown) => error);
  assert.instance(e, Error);
  assert.match((e as Error).message, reason);
}

test('local ask, tell and stream; calls are handled one at a time in order', async () => {
  const echo = await system.spawn(Echo, { params: { prefix: '> ' } });
  assert.is(await echo.ask('echo', ['a']), '> a');
  const counts = await Promise.all([echo.ask('count'), echo.tell('count'), echo.ask('count')]);
  assert.equal(counts, [1, undefined, 3]);
  const items: unknown[] = [];
  for await (const item of echo.stream<{ index: number }>('stream', [4])) items.push(item.index);
  assert.equal(items, [0, 1, 2, 3]);
  assert.is(await code(echo.ask('stream', [2])), 'is-stream');
  const it = echo.stream('echo', [1])[Symbol.asyncIterator]();
  assert.is(await code(it.next()), 'not-stream');
});

test('a bounded mailbox holds senders back and refuses beyond its waiting limit', async () => {
  class Slow {
    async work(ms: number): Promise<number> {
      await new Promise((r) => setTimeout(r, ms));
      return ms;
    }
  }
  const ref = await system.spawn(remote(Slow, { mailboxCapacity: 2 }));
  // 1 running + 2 queued + 8 waiting (4 x capacity) are accepted; the 12th is refused at once.
  const accepted = Array.from({ length: 11 }, () => ref.ask('work', [5]));
  assert.is(await code(ref.ask('work', [5])), 'overloaded');
  assert.equal(await Promise.all(accepted), Array(11).fill(5));
});

test('ask timeout and abort cancel a call still in the mailbox', async () => {
  let ran = 0;
  class Busy {
    async hold(ms: number): Promise<void> {
      await new Promise((r) => setTimeout(r, ms));
    }
    mark(): number {
      return ++ran;
    }
  }
  const ref = await system.spawn(remote(Busy));
  const blocker = ref.ask('hold', [200]);
  assert.is(await code(ref.ask('mark', [], { timeoutMs: 20 })), 'timeout');
  const controller = new AbortController();
  const aborted = ref.ask('mark', [], { signal: controller.signal });
  controller.abort();
  assert.is(await code(aborted), 'cancelled');
  await blocker;
  assert.is(await ref.ask('mark'), 1, 'the timed-out and the aborted call never ran');
});

test('supervision: on-failure restarts with a fresh instance; never keeps the instance', async () => {
  const restarting = await system.spawn(Echo, { params: { fail_on: 'boom', start: 10 } });
  assert.is(await restarting.ask('count'), 11);
  assert.is(await code(restarting.ask('echo', ['boom'])), 'failed');
  assert.is(await restarting.ask('count'), 11, 'the counter restarted from its parameter');
  let builds = 0;
  class Fragile extends Actor {
    constructor() {
      super();
      builds++;
    }
    fail(): never {
      throw new Error('nope');
    }
    ok(): string {
      return 'ok';
    }
  }
  const resume = await system.spawn(Fragile);
  assert.is(await code(resume.ask('fail')), 'failed');
  assert.is(await resume.ask('ok'), 'ok');
  assert.is(builds, 1);
  const limited = await system.spawn(remote(Fragile, { restart: 'on-failure', maxRestarts: 2, minBackoffMs: 1 }));
  for (let i = 0; i < 3; i++) await code(limited.ask('fail'));
  assert.is(await code(limited.ask('ok')), 'stopped', 'the actor stops after too many restarts');
  // A caller's mistake (no such method, ask of a stream, stream of an ask) is not the actor's failure: no restart.
  class Streamer extends Actor {
    constructor() {
      super();
      builds++;
    }
    async *lines(): AsyncGenerator<string> {
      yield 'a';
    }
    one(): string {
      return 'one';
    }
  }
  const streamer = await system.spawn(remote(Streamer, { restart: 'on-failure', maxRestarts: 2, minBackoffMs: 1 }));
  const built = builds;
  for (let i = 0; i < 4; i++) {
    assert.is(await code(streamer.ask('lines')), 'is-stream');
    assert.is(await code(streamer.ask('nothing')), 'no-method');
    assert.is(await code((async () => { for await (const _ of streamer.stream('one')) void _; })()), 'not-stream');
  }
  assert.is(await streamer.ask('one'), 'one', 'still running after twelve mistakes');
  assert.is(builds, built, 'never restarted');
});

test('named actors resolve locally; names and parameters are checked', async () => {
  await system.spawn(Echo, { name: 'named-echo' });
  assert.is(await system.resolve('named-echo').ask('echo', [7]), 7);
  await rejects(system.spawn(Echo, { name: 'named-echo' }), /already runs/);
  await rejects(system.spawn(Echo, { name: 'system/x' }), /reserved/);
  await rejects(system.spawn(Echo, { name: 'bad name!' }), /must match/);
  await rejects(system.spawn(Echo, { params: { start: 'x' } }), /start: Expected integer, got "x"/);
  await rejects(system.spawn(Echo, { params: { constructor: 1 } }), /constructor: unknown parameter/);
  class Plain {}
  await rejects(system.spawn(Plain), /not an actor class/);
  const Schema = class extends Actor {
    static params = Type.Object({ n: Type.Integer({ default: 3 }) });
    constructor(readonly p: { n: number }) {
      super();
    }
    get_n(): number {
      return this.p.n;
    }
  };
  assert.ok(actorMeta(Schema));
  assert.is(await (await system.spawn(Schema)).ask('get_n'), 3);
  assert.is(await code(system.resolve('nobody').ask('x')), 'not-found');
});

test('observer endpoints answer with the reference shapes', async () => {
  const { Transport } = await import('../core/transport.js');
  const t = new Transport();
  try {
    const get = async (path: string) => (await t.request(system.addr, path, { method: 'GET', timeoutMs: 2000 })).body.toString();
    assert.equal(JSON.parse(await get('/cluster/members')), [{ node_id: system.nodeId, addr: system.addr, status: 'Alive', actors: ['named-echo', 'system/node'] }]);
    const actors = JSON.parse(await get('/actors')) as Array<Record<string, string>>;
    assert.equal(actors.map((a) => [a.name, a.type]), [['named-echo', 'user']]);
    const all = JSON.parse(await get('/actors?all=true')) as Array<Record<string, string>>;
    assert.ok(all.some((a) => a.name === 'system/node' && a.type === 'system'));
    assert.ok(all.some((a) => a.type === 'internal'), 'unnamed actors are listed as internal');
    const health = JSON.parse(await get('/health'));
    assert.is(health.node_id, system.nodeId);
    assert.equal(health.actors, ['named-echo']);
    const metrics = await get('/metrics');
    assert.match(metrics, `actor_cluster_members{node_id="${system.nodeId}",status="Alive"} 1`);
    assert.match(metrics, /actor_messages_total\{outcome="ok"\} \d+/);
    assert.match(metrics, /actor_ask_duration_seconds_count\{locality="local"\} \d+/);
  } finally {
    t.close();
  }
});

test.run();
