/**
 * The call channel (channel.ts): its record format, CANCEL reaching the callee, a broken channel
 * failing its pending calls at once, and malformed records resetting only the channel.
 */
import http2 from 'node:http2';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { CALL, CANCEL, CHANNEL_PATH, ChannelPool, REPLY, channelDecoder, encodeCall, encodeCancel, encodeReply } from '../core/channel.js';
import { FrameError } from '../core/codec.js';
import { ActorError } from '../core/errors.js';
import { ActorSystem } from '../core/system.js';
import { DEFAULT_CLUSTER } from '../core/members.js';
import { CLUSTER_HEADER, Transport } from '../core/transport.js';
import { FAST_CLIENT_TIMERS, h2Request, killAll, startNode, waitFor, type NodeProcess } from './helpers/cluster.js';
import { Sleeper } from './helpers/sleeper.js';

const SLEEPER = 'framework.test.helpers.sleeper.Sleeper';
let client: ActorSystem | undefined;

test.after(async () => {
  await client?.shutdown();
  await killAll();
});

const callJson = (method: string, args: unknown[] = []): string => JSON.stringify({ method, args });

test('records round-trip through the shared length-prefixed framing', () => {
  const decoder = channelDecoder();
  const bytes = Buffer.concat([encodeCall(7, 'tell', '/named/é', callJson('m', [1])), encodeReply(0xffffffff, 503, '{"x":1}'), encodeCancel(9)]);
  // Fed one byte at a time: records come out whole, and only once complete.
  const records = [...bytes].flatMap((b) => decoder.push(Buffer.from([b])));
  assert.is(records.length, 3);
  assert.equal({ ...records[0], body: (records[0] as { body: Buffer }).body.toString() }, { kind: CALL, id: 7, mode: 'tell', target: '/named/é', body: callJson('m', [1]) });
  assert.equal({ ...records[1], body: (records[1] as { body: Buffer }).body.toString() }, { kind: REPLY, id: 0xffffffff, status: 503, body: '{"x":1}' });
  assert.equal(records[2], { kind: CANCEL, id: 9 });
  assert.not.ok(decoder.pending);
  const bad: Array<[Buffer, RegExp]> = [
    [Buffer.from([0, 0, 0, 5, 9, 0, 0, 0, 1]), /unknown channel record kind 9/],
    [Buffer.from([0, 0, 0, 2, 1, 0]), /shorter than its header/],
    [Buffer.from([0, 0, 0, 8, 1, 0, 0, 0, 1, 0, 0, 9]), /truncated in its target/],
    [Buffer.from([0, 0, 0, 6, 1, 0, 0, 0, 1, 7]), /truncated in its header/],
    [Buffer.from([0, 0, 0, 8, 1, 0, 0, 0, 1, 5, 0, 0]), /unknown mode 5/],
    [Buffer.from([0, 0, 0, 6, 3, 0, 0, 0, 1, 0]), /trailing bytes/],
    [Buffer.from([0xff, 0xff, 0xff, 0xff]), /exceeds/],
  ];
  for (const [input, reason] of bad) {
    assert.throws(() => channelDecoder().push(input), (e: unknown) => e instanceof FrameError && reason.test((e as Error).message), String(reason));
  }
});

test('a local call that times out aborts the signal the actor sees', async () => {
  const system = await ActorSystem.start({ log: () => {} });
  try {
    const ref = await system.spawn(Sleeper);
    const err = await ref.ask('sleep', [10_000], { timeoutMs: 50 }).catch((e: unknown) => e);
    assert.is((err as ActorError).code, 'timeout');
    assert.equal(await ref.ask('counts'), { aborted: 1, finished: 0 }, 'the running call was aborted, not left to sleep');
    assert.is(await ref.ask('sleep', [1]), 'slept', 'calls after it get a fresh signal');
  } finally {
    await system.shutdown();
  }
});

let node: NodeProcess;

test('CANCEL reaches the callee: timeouts and aborts of remote asks abort the actor’s signal', async () => {
  node = await startNode({ name: 'sleeper', classPath: SLEEPER });
  client = await ActorSystem.start({ seeds: [node.addr], timers: FAST_CLIENT_TIMERS, log: () => {} });
  await waitFor('the sleeper to be known', () => client!.instances('sleeper').length === 1);
  const ref = client.resolve('sleeper');
  const started = Date.now();
  const timedOut = await ref.ask('sleep', [20_000], { timeoutMs: 150 }).catch((e: unknown) => e);
  assert.is((timedOut as ActorError).code, 'timeout');
  assert.ok(Date.now() - started < 5000);
  await waitFor('the callee to see its signal aborted', async () => ((await ref.ask('counts')) as { aborted: number }).aborted === 1, 5000);
  const controller = new AbortController();
  const pending = ref.ask('sleep', [20_000], { signal: controller.signal }).catch((e: unknown) => e);
  setTimeout(() => controller.abort(), 100);
  assert.is(((await pending) as ActorError).code, 'cancelled');
  await waitFor('the second abort to arrive', async () => ((await ref.ask('counts')) as { aborted: number }).aborted === 2, 5000);
  assert.equal(await ref.ask('counts'), { aborted: 2, finished: 0 });
  assert.is(await ref.ask('sleep', [1]), 'slept', 'the channel still carries calls');
});

test('a full mailbox answers overloaded over the channel, and cancelled queued calls never run', async () => {
  const ref = client!.resolve('sleeper');
  const controller = new AbortController();
  const codes: string[] = [];
  const calls = Array.from({ length: 1400 }, () =>
    ref.ask('sleep', [60_000], { signal: controller.signal, timeoutMs: 60_000 }).catch((e: unknown) => void codes.push((e as ActorError).code)),
  );
  await waitFor('the overflow to be refused', () => codes.length > 0 && codes.every((c) => c === 'overloaded'), 5000);
  controller.abort();
  await Promise.all(calls);
  const overloaded = codes.filter((c) => c === 'overloaded').length;
  assert.ok(overloaded > 0 && overloaded < 1400, `${overloaded} overloaded`);
  assert.is(codes.filter((c) => c === 'cancelled').length, 1400 - overloaded);
  // Only the running call was aborted; the queued ones are dropped (they hold mailbox room until the
  // actor skips past them, which takes no time), so the actor is free at once, not after 60 s sleeps.
  await waitFor('the actor to take calls again', () => ref.ask('sleep', [1], { timeoutMs: 5000 }).then((r) => r === 'slept'), 2000, 20);
  assert.equal(await ref.ask('counts'), { aborted: 3, finished: 2 }, 'one abort more, and no 60 s sleep finished');
});

test('a broken channel fails its pending calls at once, and the next call opens a new one', async () => {
  const transport = new Transport();
  const pool = new ChannelPool(transport);
  try {
    const addr = node.addr;
    const reply = await pool.call(addr, 'ask', '/named/sleeper', callJson('sleep', [1]), 5000);
    assert.equal([reply.status, JSON.parse(reply.body.toString())], [200, { result: 'slept' }]);
    const pending = [1, 2, 3].map(() => pool.call(addr, 'ask', '/named/sleeper', callJson('sleep', [30_000]), 60_000).catch((e: unknown) => e));
    await new Promise((r) => setTimeout(r, 100));
    const killed = Date.now();
    node.proc.kill('SIGKILL');
    for (const err of await Promise.all(pending)) {
      assert.instance(err, ActorError);
      assert.is((err as ActorError).code, 'unreachable');
    }
    assert.ok(Date.now() - killed < 2000, `pending calls failed ${Date.now() - killed} ms after the kill`);
    await node.exited;
    node = await startNode({ name: 'sleeper', classPath: SLEEPER, addr });
    const again = await waitFor('a call on a new channel', () => pool.call(addr, 'ask', '/named/sleeper', callJson('counts'), 2000).catch(() => undefined), 10_000);
    assert.equal(JSON.parse(again.body.toString()), { result: { aborted: 0, finished: 0 } });
  } finally {
    pool.close();
    transport.close();
  }
});

test('a callee that answers garbage or refuses the channel fails the calls with a reason, not a hang', async () => {
  const answers: Array<(stream: http2.ServerHttp2Stream) => void> = [
    (stream) => {
      stream.respond({ ':status': 200 });
      stream.write(Buffer.from([0, 0, 0, 5, 9, 0, 0, 0, 1]));
    },
    (stream) => {
      stream.respond({ ':status': 200 });
      stream.write(encodeCall(1, 'ask', '/named/x', '{}'));
    },
    (stream) => {
      stream.respond({ ':status': 404 });
      stream.end('{"error":{"code":"not-found","message":"no route"}}');
    },
  ];
  const expected = [/malformed channel record: unknown channel record kind 9/, /only REPLY and ITEM go this way/, /refused the call channel \(status 404\)/];
  for (const [i, answer] of answers.entries()) {
    const server = http2.createServer();
    server.on('stream', (stream) => {
      stream.on('error', () => {});
      stream.on('data', () => {});
      answer(stream);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const transport = new Transport();
    const pool = new ChannelPool(transport);
    try {
      const addr = `127.0.0.1:${(server.address() as { port: number }).port}`;
      const started = Date.now();
      const err = await pool.call(addr, 'ask', '/named/x', callJson('m'), 30_000).catch((e: unknown) => e);
      assert.instance(err, ActorError);
      assert.is((err as ActorError).code, 'unreachable');
      assert.match((err as ActorError).message, expected[i]!);
      assert.ok(Date.now() - started < 5000);
    } finally {
      pool.close();
      transport.close();
      await new Promise((resolve) => server.close(resolve));
    }
  }
});

/** Opens a raw channel to `addr`, writes `bytes`, and collects what comes back until the stream closes. */
function rawChannel(addr: string, bytes: Buffer, endAfterWrite = false, cluster = DEFAULT_CLUSTER): Promise<{ status: number; rstCode: number | undefined; records: unknown[] }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://${addr}`);
    session.on('error', reject);
    const stream = session.request({ ':method': 'POST', ':path': CHANNEL_PATH, [CLUSTER_HEADER]: cluster });
    const decoder = channelDecoder();
    const records: unknown[] = [];
    let status = 0;
    stream.on('response', (h) => (status = Number(h[':status'])));
    stream.on('data', (c: Buffer) => {
      if (status !== 200) return;
      for (const r of decoder.push(c)) {
        records.push(r.kind === REPLY ? { id: r.id, status: r.status, body: JSON.parse(r.body.toString()) } : r);
        // A well-formed exchange: close once the expected replies are in.
        if (records.length === 2) stream.close();
      }
    });
    stream.on('error', () => {});
    stream.on('close', () => {
      session.close();
      // Replies come in completion order, not call order.
      records.sort((a, b) => ((a as { id: number }).id ?? 0) - ((b as { id: number }).id ?? 0));
      resolve({ status, rstCode: stream.rstCode, records });
    });
    if (endAfterWrite) stream.end(bytes);
    else stream.write(bytes);
  });
}

test('malformed channel records reset that channel only; the node keeps serving', async () => {
  const { NGHTTP2_PROTOCOL_ERROR } = http2.constants;
  // Well-formed calls from an outside client get REPLY records, errors as the per-message routes give them.
  const ok = await rawChannel(node.addr, Buffer.concat([encodeCall(1, 'ask', '/named/sleeper', callJson('counts')), encodeCall(2, 'ask', '/named/ghost', callJson('counts'))]));
  assert.is(ok.status, 200);
  assert.equal(ok.records[0], { id: 1, status: 200, body: { result: { aborted: 0, finished: 0 } } });
  assert.equal((ok.records[1] as { status: number }).status, 404);
  assert.equal((ok.records[1] as { body: { error: { code: string } } }).body.error.code, 'not-found');
  const cases: Array<[string, Buffer]> = [
    ['unknown kind', Buffer.from([0, 0, 0, 5, 9, 0, 0, 0, 1])],
    ['oversized length', Buffer.from([0xff, 0xff, 0xff, 0xff, 1])],
    ['REPLY sent to the callee', encodeReply(1, 200, '{}')],
    ['call id reused while running', Buffer.concat([encodeCall(5, 'ask', '/named/sleeper', callJson('sleep', [5000])), encodeCall(5, 'ask', '/named/sleeper', callJson('counts'))])],
  ];
  for (const [what, bytes] of cases) {
    const r = await rawChannel(node.addr, bytes);
    assert.is(r.rstCode, NGHTTP2_PROTOCOL_ERROR, what);
  }
  // A channel naming another cluster is refused before any record is read.
  const stranger = await rawChannel(node.addr, encodeCall(1, 'ask', '/named/sleeper', callJson('counts')), false, 'elsewhere');
  assert.is(stranger.status, 403);
  assert.equal(stranger.records, []);
  // A bad body inside a well-formed record is the call's error, not the channel's.
  const badBody = await rawChannel(node.addr, Buffer.concat([encodeCall(1, 'ask', '/named/sleeper', '{"method":'), encodeCall(2, 'ask', '/named/sleeper', callJson('counts'))]));
  assert.is((badBody.records[0] as { status: number }).status, 400);
  assert.equal((badBody.records[1] as { body: unknown }).body, { result: { aborted: 1, finished: 0 } }, 'the node still serves, and the sleep of the reused-id case was cancelled with its channel');
});

test('a caller that ends its side gets the replies of its running calls, then the channel ends cleanly', async () => {
  const r = await rawChannel(node.addr, encodeCall(1, 'ask', '/named/sleeper', callJson('sleep', [200])), true);
  assert.equal(r.records, [{ id: 1, status: 200, body: { result: 'slept' } }]);
  assert.is(r.rstCode, http2.constants.NGHTTP2_NO_ERROR);
});

/** A series of the node's /metrics, read over HTTP/2. */
async function metric(addr: string, series: string): Promise<number> {
  const text = (await h2Request(addr, { ':path': '/metrics' })).body;
  return Number(new RegExp(`^${series}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
}

test('a record that never arrives whole is given a deadline: its channel is reset and its bytes given back; one finished in time is served', async () => {
  const timed = await startNode({ name: 'sleeper', classPath: SLEEPER, extraArgs: ['-D', 'limits.body_timeout_ms=1000'] });
  // A CALL of 1 MiB sent but for its last 16 bytes, on two channels, as a client pinning the node's call budget would.
  const record = encodeCall(1, 'ask', '/named/sleeper', callJson('counts', ['x'.repeat(1024 * 1024)]));
  const sessions = [1, 2].map(() => http2.connect(`http://${timed.addr}`));
  const streams = sessions.map((session) => {
    session.on('error', () => {});
    const stream = session.request({ ':method': 'POST', ':path': CHANNEL_PATH, [CLUSTER_HEADER]: DEFAULT_CLUSTER });
    stream.on('error', () => {});
    stream.write(record.subarray(0, record.length - 16));
    return stream;
  });
  try {
    await waitFor('the node to hold the partial records', async () => (await metric(timed.addr, 'actor_held_call_bytes')) >= 2 * 1024 * 1024, 5000);
    await waitFor('both channels reset', () => streams.every((stream) => stream.closed), 10_000);
    assert.equal(streams.map((stream) => stream.rstCode), [http2.constants.NGHTTP2_PROTOCOL_ERROR, http2.constants.NGHTTP2_PROTOCOL_ERROR]);
    await waitFor('the bytes given back', async () => (await metric(timed.addr, 'actor_held_call_bytes')) === 0, 5000);
    assert.match(timed.output(), 'did not arrive whole within 1000 ms');
    // A record that takes a while but arrives within the deadline is a call like any other.
    const slow = await new Promise<number>((resolve, reject) => {
      const session = http2.connect(`http://${timed.addr}`);
      session.on('error', reject);
      const stream = session.request({ ':method': 'POST', ':path': CHANNEL_PATH, [CLUSTER_HEADER]: DEFAULT_CLUSTER });
      const decoder = channelDecoder();
      stream.on('data', (c: Buffer) => {
        for (const r of decoder.push(c)) if (r.kind === REPLY) (session.destroy(), resolve(r.status));
      });
      stream.write(record.subarray(0, 1000));
      setTimeout(() => stream.write(record.subarray(1000)), 400);
    });
    assert.is(slow, 200);
  } finally {
    for (const session of sessions) session.destroy();
    timed.proc.kill('SIGKILL');
  }
});

test.run();
