/**
 * What a hostile peer answers, as its callers see it: a node calling it over the call channel, and
 * the command line, against a fake endpoint (a real HTTP/2 server on loopback). Error codes that are
 * inherited keys of a plain object, and errors of the wrong shape: a failed call never becomes a
 * success, and `actorctl call` exits with its documented code and a clear message, never a stack
 * trace. Terminal escapes in what a node reports: shown escaped on a terminal.
 */
import http from 'node:http';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { DIST_ROOT, runTool } from '../../lib/testing/run-tool.js';
import { Actor, remote } from '../core/actor.js';
import { CHANNEL_PATH, channelDecoder, encodeReply } from '../core/channel.js';
import { ActorError } from '../core/errors.js';
import { DEFAULT_CLUSTER } from '../core/members.js';
import { ActorSystem } from '../core/system.js';
import { CLUSTER_HEADER } from '../core/transport.js';
import { postAsPeer } from './helpers/cluster.js';

/** Error codes that name members every object inherits. */
const INHERITED_CODES = ['constructor', '__proto__', 'toString', 'hasOwnProperty', 'valueOf'];

/**
 * A fake node at `addr`: it lists itself as hosting `echo` and answers every call with `answer()`;
 * `observers` answers GETs by path (a member list in place of its own, /actors, /metrics).
 */
async function fakeNode(answer: () => { status: number; body: string }, observers: Record<string, (addr: string) => string> = {}): Promise<{ addr: string; close: () => Promise<void> }> {
  const server = http2.createServer();
  server.on('stream', (stream, headers) => {
    stream.on('error', () => {});
    const json = (status: number, body: string): void => {
      stream.respond({ ':status': status, 'content-type': 'application/json', [CLUSTER_HEADER]: DEFAULT_CLUSTER });
      stream.end(body);
    };
    const observer = observers[String(headers[':path'])];
    if (observer) return json(200, observer(addr));
    if (headers[':path'] === '/cluster/members') return json(200, JSON.stringify([{ node_id: 'f'.repeat(32), addr, status: 'Alive', actors: ['echo'] }]));
    if (headers[':path'] === CHANNEL_PATH) {
      stream.respond({ ':status': 200 });
      const decoder = channelDecoder();
      return void stream.on('data', (chunk: Buffer) => {
        for (const record of decoder.push(chunk)) {
          const { status, body } = answer();
          stream.write(encodeReply(record.id, status, body));
        }
      });
    }
    stream.resume();
    stream.once('end', () => {
      const { status, body } = answer();
      json(status, body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const addr = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { addr, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

/** Forwards every call to `victim`, wherever it runs, and lets its error propagate. */
class Forward extends Actor {
  relay(): Promise<unknown> {
    return this.context.system.resolve('victim').ask('anything');
  }
}

/** One call of `relay` on the per-message route `path` of `addr`. */
const routeCall = (addr: string, path: string) => postAsPeer(addr, path, { method: 'relay', args: [] });

test('a member answering an inherited error code fails the call: the node forwarding it answers its own caller 500 `failed`, not 200', async () => {
  let code = '';
  const fake = await fakeNode(() => ({ status: 500, body: JSON.stringify({ error: { code, message: `boom ${code}` } }) }));
  const system = await ActorSystem.start({ log: () => {} });
  try {
    // The fake claims, as a member, to host `victim`; calls to it ride the call channel.
    system.membership.apply({ id: 'f'.repeat(32), addr: fake.addr, status: 'Alive', inc: 0, started: Date.now(), actors: ['victim'] });
    await system.spawn(remote(Forward), { name: 'fwd' });
    for (code of INHERITED_CODES) {
      const error = await system.resolve('victim').ask('anything', [], { timeoutMs: 5000 }).catch((e: unknown) => e);
      assert.instance(error, ActorError, code);
      assert.is((error as ActorError).code, 'failed', code);
      assert.is((error as ActorError).message, `boom ${code}`);
      const answered = await routeCall(system.addr, '/named/fwd');
      assert.is(answered.status, 500, `${code}: ${answered.body}`);
      assert.equal(JSON.parse(answered.body), { error: { code: 'failed', message: `boom ${code}` } }, code);
    }
  } finally {
    await system.shutdown();
    await fake.close();
  }
});

test('actorctl call: an endpoint answering an inherited error code exits 1 (a failure) with its message, no stack trace', async () => {
  let code = '';
  const fake = await fakeNode(() => ({ status: 500, body: JSON.stringify({ error: { code, message: `boom ${code}` } }) }));
  try {
    for (code of INHERITED_CODES) {
      const r = await runTool('actorctl', ['call', 'echo', 'echo', '["x"]', '--seeds', fake.addr, '--timeout', '5']);
      assert.is(r.code, 1, `${code}: ${r.stderr}`);
      assert.match(r.stderr, `echo.echo: failed: boom ${code}`);
      assert.not.match(r.stderr, /TypeError|\n\s+at /, `${code}: no stack trace`);
      assert.is(r.stdout, '', `${code}: nothing on stdout`);
    }
  } finally {
    await fake.close();
  }
});

test('actorctl call: an answer of the wrong shape (not an object, an error without string code and message) exits 1 naming what is wrong, no stack trace', async () => {
  let body = '';
  const fake = await fakeNode(() => ({ status: body.startsWith('{"error"') ? 500 : 200, body }));
  const bodies: Array<[string, RegExp]> = [
    ['null', /answered 200 with null where a JSON object belongs/],
    ['[1]', /answered 200 with a list where a JSON object belongs/],
    ['"text"', /answered 200 with a string where a JSON object belongs/],
    ['{"error":"boom"}', /answered 500 with a malformed error/],
    ['{"error":null}', /answered 500 with a malformed error/],
    ['{"error":{"code":"failed","message":{"toString":1}}}', /answered 500 with a malformed error/],
    ['{"error":{"code":"failed","message":7}}', /answered 500 with a malformed error/],
    ['{"error":{"code":["not-found"],"message":"x"}}', /answered 500 with a malformed error/],
    ['{"error":{"code":{"toString":1},"message":"x"}}', /answered 500 with a malformed error/],
  ];
  try {
    for (const [answer, expected] of bodies) {
      body = answer;
      const r = await runTool('actorctl', ['call', 'echo', 'echo', '["x"]', '--seeds', fake.addr, '--timeout', '5']);
      assert.is(r.code, 1, `${answer}: ${r.stderr}`);
      assert.match(r.stderr, expected, answer);
      assert.not.match(r.stderr, /TypeError|\n\s+at /, `${answer}: no stack trace`);
      assert.is(r.stdout, '', `${answer}: nothing on stdout`);
    }
  } finally {
    await fake.close();
  }
});

/** What `actorctl ARGS` wrote to a terminal (script(1) gives it a pseudo-terminal). */
function onTerminal(args: string[]): Promise<string> {
  const command = [process.execPath, join(DIST_ROOT, 'cli', 'actorctl.js'), ...args].join(' ');
  return new Promise((resolve, reject) => {
    const child = spawn('script', ['-qec', command, '/dev/null'], { stdio: ['ignore', 'pipe', 'inherit'] });
    let text = '';
    const timer = setTimeout(() => (child.kill('SIGKILL'), reject(new Error(`actorctl ${args.join(' ')} did not finish: ${JSON.stringify(text)}`))), 30_000);
    child.stdout.on('data', (chunk: Buffer) => (text += chunk.toString()));
    child.on('error', reject);
    child.on('close', () => (clearTimeout(timer), resolve(text)));
  });
}

test('a seed that is no actor node is named as such: an HTTP/1.1 server, an HTTP/2 one answering gossip without the cluster header', async () => {
  const plain = http.createServer((_req, res) => res.end('hello'));
  await new Promise<void>((resolve) => plain.listen(0, '127.0.0.1', resolve));
  const other = http2.createServer((_req, res) => res.end('{}'));
  await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
  const addrOf = (server: { address(): unknown }) => `127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    const inspect = await runTool('actorctl', ['inspect', 'cluster', '--seeds', addrOf(plain), '--timeout', '3']);
    assert.is(inspect.code, 6, inspect.stderr);
    assert.match(inspect.stderr, `${addrOf(plain)}: protocol error: it does not speak HTTP/2 as actor nodes do`);
    // A node seeded with it warns of the join it retries, in the same words.
    const warnings: string[] = [];
    const system = await ActorSystem.start({ seeds: [addrOf(other)], log: (line) => warnings.push(line) });
    try {
      const deadline = Date.now() + 5000;
      while (!warnings.some((w) => w.includes('not an actor node')) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      assert.ok(warnings.some((w) => w.includes(`${addrOf(other)} is not a member of cluster '${DEFAULT_CLUSTER}' (it answered without ${CLUSTER_HEADER}: not an actor node)`)), warnings.join('\n'));
    } finally {
      await system.shutdown();
    }
  } finally {
    plain.close();
    other.close();
  }
});

test('on a terminal, raw metrics and CSV show a peer’s control characters escaped; CSV stays valid', async () => {
  // A window title, a clear screen and a colour, in every field a node answers with.
  const ESC = '\u001b]0;PWNED\u0007\u001b[2J\u001b[31mRED\u001b[0m';
  const fake = await fakeNode(() => ({ status: 500, body: '{}' }), {
    '/cluster/members': (addr) => JSON.stringify([{ node_id: `evil${ESC}`, addr, status: 'Alive', actors: ['echo', `x${ESC}`] }]),
    '/actors': () => JSON.stringify([{ name: `echo${ESC}`, type: 'user', actor_id: `id${ESC}`, class: `C${ESC}`, status: `running${ESC}`, [`k${ESC}`]: `v,${ESC}` }]),
    '/metrics': () => `actor_actors_total{node_id="x${ESC}"} 1\n`,
  });
  try {
    const seeds = ['--seeds', fake.addr];
    for (const args of [['inspect', 'metrics', ...seeds], ['inspect', 'cluster', ...seeds, '--format', 'csv'], ['inspect', 'actors', '--endpoint', fake.addr, '--format', 'csv']]) {
      const out = await onTerminal(args);
      assert.not.match(out, '\u001b', `${args.join(' ')}: no ESC reaches the terminal: ${JSON.stringify(out)}`);
      assert.not.match(out, '\u0007', args.join(' '));
      assert.match(out, '\\x1b]0;PWNED\\x07\\x1b[2J', `${args.join(' ')}: shown escaped: ${JSON.stringify(out)}`);
    }
    // Escaping adds no comma, quote or newline: each CSV record is still one line of as many fields as its header.
    const csv = (await onTerminal(['inspect', 'actors', '--endpoint', fake.addr, '--format', 'csv'])).trim().split(/\r?\n/);
    assert.is(csv.length, 2, JSON.stringify(csv));
    assert.match(csv[1]!, /"v,\\x1b/, 'a field with a comma is still quoted');
    // Not on a terminal, CSV keeps the bytes a program reading it expects.
    const piped = await runTool('actorctl', ['inspect', 'cluster', ...seeds, '--format', 'csv']);
    assert.match(piped.stdout, ESC);
  } finally {
    await fake.close();
  }
});

test.run();
