import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ActorError } from '../core/errors.js';
import { ActorSystem } from '../core/system.js';
import { END_FRAME, encodeFrame, jsonFrame } from '../core/codec.js';
import { remoteStream } from '../core/remote.js';
import { DEFAULT_CLUSTER } from '../core/members.js';
import { CLUSTER_HEADER, Transport } from '../core/transport.js';
import { DIST_ROOT } from '../../lib/testing/run-tool.js';
import { h2Request, killAll, startNode, waitFor, FAST_CLIENT_TIMERS, FAST_TIMERS, type NodeProcess } from './helpers/cluster.js';

let node: NodeProcess;
let client: ActorSystem;

test.before(async () => {
  node = await startNode({ name: 'echo', params: ['--prefix', 're: ', '--start', '-5'], timers: FAST_TIMERS });
  client = await ActorSystem.start({ addr: '127.0.0.1:0', seeds: [node.addr], timers: FAST_CLIENT_TIMERS, log: () => {} });
  await waitFor('the remote echo to be known', () => client.instances('echo').length === 1);
});

test.after(async () => {
  await client?.shutdown();
  await killAll();
});


test('ask, tell and stream reach an actor in another process', async () => {
  const echo = client.resolve('echo');
  assert.is(await echo.ask('echo', ['hi']), 're: hi');
  assert.equal(await echo.ask('echo', [{ deep: [1, 2] }]), { deep: [1, 2] });
  assert.is(await echo.ask('count'), -4, 'typed --start -5 reached the constructor');
  await echo.tell('count');
  assert.is(await echo.ask('count'), -2, 'the tell was handled before the next ask');
  const items: unknown[] = [];
  for await (const item of echo.stream('stream', [5])) items.push(item);
  assert.equal(items, [0, 1, 2, 3, 4].map((index) => ({ index, of: 5 })));
  assert.is(await echo.ask('node'), node.nodeId);
});

test('large asks in parallel share the call channel without loss (flow control and backpressure)', async () => {
  const echo = client.resolve('echo');
  const values = Array.from({ length: 12 }, (_, i) => `${i}:${'y'.repeat(1024 * 1024 + i)}`);
  const replies = await Promise.all(values.map((v) => echo.ask('echo', [v])));
  assert.ok(replies.every((r, i) => r === `re: ${values[i]}`));
});

test('an actor is reachable by node and actor id, unnamed system actors included', async () => {
  const rows = JSON.parse((await h2Request(node.addr, { ':method': 'GET', ':path': '/actors?all=true' })).body) as Array<Record<string, string>>;
  const echoId = rows.find((r) => r.name === 'echo')!.actor_id!;
  const systemId = rows.find((r) => r.name === 'system/node')!.actor_id!;
  assert.is(await client.actor(node.nodeId, echoId).ask('echo', ['by id']), 're: by id');
  assert.equal(await client.actor(node.nodeId, systemId).ask('ping'), 'pong');
  const nobody = await client.actor(node.nodeId, 'f'.repeat(32)).ask('ping').catch((e: unknown) => e);
  assert.is((nobody as ActorError).code, 'not-found');
});

test('remote errors keep their code', async () => {
  const echo = client.resolve('echo');
  const err = await echo.ask('nope').catch((e: unknown) => e);
  assert.instance(err, ActorError);
  assert.is((err as ActorError).code, 'no-method');
  assert.match((err as ActorError).message, 'echo, node, stream');
  const missing = await client.resolve('ghost').ask('echo', [1]).catch((e: unknown) => e);
  assert.is((missing as ActorError).code, 'not-found');
});

test('ask times out, and an abort cancels it', async () => {
  const slow = await startNode({ name: 'slow', seeds: [node.addr], params: ['--delay_ms', '400'] });
  await waitFor('slow to be known', () => client.instances('slow').length === 1);
  const ref = client.resolve('slow');
  const timedOut = await ref.ask('echo', [1], { timeoutMs: 100 }).catch((e: unknown) => e);
  assert.is((timedOut as ActorError).code, 'timeout');
  const controller = new AbortController();
  const pending = ref.ask('echo', [2], { signal: controller.signal }).catch((e: unknown) => e);
  setTimeout(() => controller.abort(), 50);
  assert.is(((await pending) as ActorError).code, 'cancelled');
  assert.is(await ref.ask('echo', ['after']), 'after', 'the node still answers');
  slow.proc.kill('SIGKILL');
});

test('breaking out of a remote stream stops its generator on the node, which keeps serving', async () => {
  const echo = client.resolve('echo');
  const seen: number[] = [];
  const started = Date.now();
  for await (const item of echo.stream<{ index: number }>('stream', [1000, 20])) {
    seen.push(item.index);
    if (seen.length === 3) break;
  }
  assert.equal(seen, [0, 1, 2]);
  assert.ok(Date.now() - started < 10_000, 'did not wait for the whole 20 s stream');
  // The cancel reached the node: its generator was stopped (it would run for 20 s otherwise).
  const activeStreams = async () => {
    const r = await h2Request(node.addr, { ':method': 'GET', ':path': '/actors' });
    return (JSON.parse(r.body) as Array<Record<string, unknown>>).find((a) => a.name === 'echo')?.active_streams;
  };
  await waitFor('the remote generator to stop', async () => (await activeStreams()) === 0, 3000);
  assert.is(await echo.ask('echo', ['still']), 're: still');
});

/**
 * A stand-in callee on raw HTTP/2 that answers every call with `frames` and, `endAfterMs` later,
 * ends the stream; `resetBeforeEnd` records, per call, whether the caller had reset it by then.
 */
async function rawCallee(frames: Buffer[], endAfterMs: number | undefined): Promise<{ addr: string; resetBeforeEnd: boolean[]; close: () => void }> {
  const resetBeforeEnd: boolean[] = [];
  const server = http2.createServer();
  server.on('stream', (stream) => {
    stream.on('error', () => {});
    stream.respond({ ':status': 200, 'x-response-type': 'stream' });
    for (const frame of frames) stream.write(frame);
    if (endAfterMs !== undefined) {
      setTimeout(() => {
        resetBeforeEnd.push(stream.closed);
        if (!stream.closed) stream.end();
      }, endAfterMs);
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  return { addr: `127.0.0.1:${port}`, resetBeforeEnd, close: () => server.close() };
}

async function readAll(stream: AsyncIterable<unknown>): Promise<unknown[]> {
  const items: unknown[] = [];
  for await (const item of stream) items.push(item);
  return items;
}

test('a stream read to its end is closed by its callee, never reset by its caller', async () => {
  // Every reset spends the callee's reset budget; a caller that reset each finished stream had its
  // connection closed after about a thousand calls (nghttp2's rapid-reset guard).
  const callee = await rawCallee([jsonFrame('one'), END_FRAME], 50);
  const transport = new Transport();
  try {
    assert.equal(await readAll(remoteStream(transport, callee.addr, '/named/x', '{}', 5_000, undefined)), ['one']);
    await waitFor('the callee to end its stream', () => callee.resetBeforeEnd.length === 1);
    assert.equal(callee.resetBeforeEnd, [false], 'the caller waited for the end of the stream');
  } finally {
    transport.close();
    callee.close();
  }
});

test('a stream its callee never closes after the END frame is reset after a grace, and one that goes on after it fails', async () => {
  const lingering = await rawCallee([jsonFrame('one'), END_FRAME], undefined);
  const chatty = await rawCallee([jsonFrame('one'), END_FRAME, jsonFrame('two')], 50);
  const transport = new Transport();
  try {
    const started = Date.now();
    assert.equal(await readAll(remoteStream(transport, lingering.addr, '/named/x', '{}', 5_000, undefined)), ['one']);
    const waited = Date.now() - started;
    assert.ok(waited >= 900 && waited < 4_000, `gave the stream about a second to close (${waited} ms)`);
    const error = await readAll(remoteStream(transport, chatty.addr, '/named/x', '{}', 5_000, undefined)).then(() => undefined, (e: unknown) => e);
    assert.instance(error, ActorError);
    assert.match((error as Error).message, /after the END frame/);
  } finally {
    transport.close();
    lingering.close();
    chatty.close();
  }
});

test('an external caller that gives up on 1,500 streams in a burst keeps its connection (a reset budget of 10,000 at once, not nghttp2 default 1,000)', async () => {
  // Calls between nodes cancel with a channel record; an external client (actorctl call) calls on
  // a stream of its own and resets each one it leaves.
  const transport = new Transport();
  const failures: string[] = [];
  try {
    for (let call = 0; call < 1500; call++) {
      try {
        for await (const _ of remoteStream(transport, node.addr, '/named/echo', JSON.stringify({ method: 'stream', args: [10] }), 5_000, undefined)) break;
      } catch (error) {
        failures.push((error as Error).message);
      }
    }
  } finally {
    transport.close();
  }
  assert.equal(failures.slice(0, 3), [], 'no call failed');
  assert.is(await client.resolve('echo').ask('echo', ['after']), 're: after');
});

test('streamed replies nobody reads hold little: 256 external stream calls at a window of 0 hold 16 KiB of items each, not a JS object per item (380 KiB)', async () => {
  // The node's live memory, garbage collected, from the benchmarks' heap probe.
  const heapFile = join(mkdtempSync(join(tmpdir(), 'actor-heap-')), 'heap.json');
  const probe = join(DIST_ROOT, 'bench', 'lib', 'heap-probe.js');
  const reader = await startNode({ name: 'echo', env: { NODE_OPTIONS: `--expose-gc --import=${pathToFileURL(probe).href}`, BENCH_HEAP_FILE: heapFile } });
  const liveBytes = async (): Promise<number> => {
    rmSync(heapFile, { force: true });
    reader.proc.kill('SIGUSR2');
    const usage = await waitFor('the heap probe', () => existsSync(heapFile) && (JSON.parse(readFileSync(heapFile, 'utf8')) as { heapUsed: number; external: number }), 5000);
    return usage.heapUsed + usage.external;
  };
  const before = await liveBytes();
  const streams = 256;
  const sessions = [0, 1].map(() => http2.connect(`http://${reader.addr}`, { settings: { initialWindowSize: 0 } }));
  let answered = 0;
  try {
    for (const session of sessions) {
      session.on('error', () => {});
      for (let i = 0; i < streams / sessions.length; i++) {
        const call = session.request({ ':method': 'POST', ':path': '/named/echo', 'x-message-mode': 'stream', [CLUSTER_HEADER]: DEFAULT_CLUSTER });
        call.on('response', () => answered++).on('error', () => {});
        call.end(JSON.stringify({ method: 'stream', args: [1e7] }));
      }
    }
    await waitFor('every stream call to be answered', () => answered === streams, 10_000);
    // The producers run until the node holds what it may of each unread reply.
    await new Promise((r) => setTimeout(r, 1000));
    const perStream = ((await liveBytes()) - before) / streams;
    assert.ok(perStream < 96 * 1024, `each unread stream holds ${Math.round(perStream / 1024)} KiB`);
    assert.is((await h2Request(reader.addr, { ':path': '/health' })).status, 200);
  } finally {
    for (const session of sessions) session.destroy();
    reader.proc.kill('SIGKILL');
    rmSync(dirname(heapFile), { recursive: true, force: true });
  }
});

test('malformed bodies get a stream error and the node keeps serving', async () => {
  const post = (path: string, body: string | Buffer, extra: http2.OutgoingHttpHeaders = {}) => h2Request(node.addr, { ':method': 'POST', ':path': path, [CLUSTER_HEADER]: DEFAULT_CLUSTER, ...extra }, body);
  // Calls and membership name the cluster; a request that names none or another is refused.
  const anonymous = await h2Request(node.addr, { ':method': 'POST', ':path': '/named/echo' }, '{"method":"echo","args":[1]}');
  assert.equal([anonymous.status, JSON.parse(anonymous.body).error.code], [403, 'forbidden']);
  assert.match(anonymous.body, 'x-actor-cluster is missing');
  const stranger = await post('/cluster/swim', '{}', { [CLUSTER_HEADER]: 'elsewhere' });
  assert.is(stranger.status, 403);
  assert.match(stranger.body, "this node is of cluster 'default', not 'elsewhere'");
  const notJson = await post('/named/echo', '{"method":');
  assert.is(notJson.status, 400);
  assert.match(notJson.body, 'not JSON');
  const noMethod = await post('/named/echo', '{"args":[1]}');
  assert.is(noMethod.status, 400);
  assert.match(noMethod.body, '`method`');
  const badArgs = await post('/named/echo', '{"method":"echo","args":"x"}');
  assert.is(badArgs.status, 400);
  const badMode = await post('/named/echo', '{"method":"echo","args":[1]}', { 'x-message-mode': 'shout' });
  assert.is(badMode.status, 400);
  assert.match(badMode.body, 'x-message-mode');
  const frames = await post('/named/echo', encodeFrame({ flags: 0x80, type: 'json', data: Buffer.from('x') }));
  assert.is(frames.status, 400);
  const swim = await post('/cluster/swim', '{"type":"ping","from":{"id":1}}');
  assert.is(swim.status, 400);
  assert.match(swim.body, '`from`');
  const getCall = await h2Request(node.addr, { ':method': 'GET', ':path': '/named/echo' });
  assert.is(getCall.status, 405);
  const unknown = await h2Request(node.addr, { ':method': 'GET', ':path': '/nowhere' });
  assert.is(unknown.status, 404);
  // Bytes that are neither HTTP/2 nor HTTP/1.1: the HTTP/1.1 side answers what it can and drops the connection.
  const [host, port] = node.addr.split(':');
  const garbage = await new Promise<string>((resolve) => {
    let text = '';
    const socket = net.connect(Number(port), host!, () => socket.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n\x00\xff garbage'));
    socket.on('data', (c: Buffer) => (text += c.toString('latin1')));
    socket.on('error', () => resolve(text));
    socket.on('close', () => resolve(text));
  });
  assert.match(garbage, /^HTTP\/1\.1 404 /, 'the well-formed request before the garbage was answered');
  // A valid preface followed by a broken frame.
  await new Promise<void>((resolve) => {
    const socket = net.connect(Number(port), host!, () => socket.write(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), Buffer.from([0, 0, 3, 0xff, 0, 0, 0, 0, 9, 1, 2, 3])])));
    socket.on('error', () => resolve());
    socket.on('close', () => resolve());
    socket.resume();
  });
  assert.is(await client.resolve('echo').ask('echo', ['ok']), 're: ok');
  const health = await h2Request(node.addr, { ':method': 'GET', ':path': '/health' });
  assert.is(health.status, 200);
  assert.is(JSON.parse(health.body).node_id, node.nodeId);
});

test('every error inside a call is an error reply: deep nesting, cycles, BigInt, throwing getters, odd throws, long stream errors', async () => {
  const awkward = await startNode({ name: 'awkward', classPath: 'framework.test.helpers.awkward.Awkward', seeds: [node.addr] });
  await waitFor('awkward to be known', () => client.instances('awkward').length === 1);
  const ref = client.resolve('awkward');
  const failure = async (method: string, args: unknown[] = []): Promise<ActorError> => {
    const e = await ref.ask(method, args).then(() => undefined, (error: unknown) => error);
    assert.instance(e, ActorError, method);
    return e as ActorError;
  };
  for (const [method, reason] of [['cyclic', /circular/], ['big', /BigInt/], ['getter', /getter refused/], ['symbol', /Symbol\(odd\)/]] as const) {
    const e = await failure(method);
    assert.is(e.code, 'failed', method);
    assert.match(e.message, reason, method);
  }
  assert.match((await failure('deep', [20_000])).message, /cannot be sent as JSON: Maximum call stack size exceeded/);
  // Arguments nested 5,000 deep, as an unauthenticated client could send them, on both call paths.
  const nested = `${'['.repeat(5000)}${']'.repeat(5000)}`;
  const body = `{"method":"echo","args":[${nested}]}`;
  const viaRoute = await h2Request(node.addr, { ':method': 'POST', ':path': '/named/echo', [CLUSTER_HEADER]: DEFAULT_CLUSTER }, body);
  assert.equal([viaRoute.status, JSON.parse(viaRoute.body).error.code], [400, 'bad-request']);
  assert.match(viaRoute.body, 'deeper than 512 levels');
  // A caller in a node cannot even encode it: refused on its side, before anything is sent (the
  // call channel's own handling of such records is in the abuse test).
  const fromNode = await client.resolve('echo').ask('echo', [JSON.parse(nested)]).then(() => undefined, (e: unknown) => e);
  assert.is((fromNode as ActorError).code, 'bad-request');
  // A stream that fails with a message longer than a frame can carry, and one whose item is cyclic.
  const items: unknown[] = [];
  const streamed = await (async () => {
    for await (const item of ref.stream('failLoud', [200_000])) items.push(item);
  })().then(() => undefined, (e: unknown) => e);
  assert.equal(items, [1]);
  assert.is((streamed as ActorError).code, 'failed');
  assert.ok((streamed as ActorError).message.length <= 0xffff, 'the message was cut to fit its frame');
  const cyclicStream = await (async () => {
    for await (const item of ref.stream('streamCyclic')) items.push(item);
  })().then(() => undefined, (e: unknown) => e);
  assert.match((cyclicStream as ActorError).message, /circular/);
  assert.equal(await ref.ask('deep', [2]), [[[]]], 'what JSON can carry still comes back');
  assert.is(awkward.proc.exitCode, null, 'the node is still running');
  assert.is(await client.resolve('echo').ask('echo', ['ok']), 're: ok');
});

test.run();
