/**
 * What an abusive client (or a stranger's node) does to a three-node cluster of real processes:
 * calls nested 5,000 deep on both call paths, 200 call bodies that never end, forged membership
 * messages, a node of another cluster, and, under mutual TLS, peers without a certificate of the
 * cluster's CA. No node crashes, no stranger ever becomes a member, and each node's memory comes
 * back to within 20% of where it started once the abuser has gone.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import http2 from 'node:http2';
import https from 'node:https';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import { runTool } from '../../lib/testing/run-tool.js';
import { CHANNEL_PATH, REPLY, channelDecoder, encodeCall } from '../core/channel.js';
import { DEFAULT_CLUSTER } from '../core/members.js';
import { SWIM_PATH } from '../core/membership.js';
import { CLUSTER_HEADER } from '../core/transport.js';
import { clusterMembers, killAll, rss, startNode, waitFor, type NodeProcess } from './helpers/cluster.js';

const dir = mkdtempSync(join(tmpdir(), 'actor-abuse-'));

test.after(async () => {
  await killAll();
  rmSync(dir, { recursive: true, force: true });
});

interface Credentials {
  ca: Buffer;
  cert: Buffer;
  key: Buffer;
}

/** How to reach a node: cleartext, or TLS with these credentials (none: no client certificate). */
type Reach = { tls: false } | { tls: true; credentials: Partial<Credentials> & { ca: Buffer } };
const PLAIN: Reach = { tls: false };

function connect(addr: string, reach: Reach): http2.ClientHttp2Session {
  const session = reach.tls ? http2.connect(`https://${addr}`, { ...reach.credentials, checkServerIdentity: () => undefined }) : http2.connect(`http://${addr}`);
  session.on('error', () => {});
  return session;
}

/** One request; its status and body, or the error that ended it (a refused connection). */
function request(addr: string, reach: Reach, headers: http2.OutgoingHttpHeaders, body?: string): Promise<{ status: number; body: string } | { error: string }> {
  return new Promise((resolve) => {
    const session = connect(addr, reach);
    session.once('error', (error) => resolve({ error: error.message }));
    const req = session.request(headers);
    let text = '';
    let status = 0;
    req.on('response', (h) => (status = Number(h[':status'])));
    req.on('data', (c: Buffer) => (text += c.toString()));
    // Under TLS 1.3 a refused client certificate ends the connection after the handshake: no reply.
    req.on('end', () => (session.close(), resolve(status ? { status, body: text } : { error: 'ended without a reply' })));
    req.on('error', (error) => (session.destroy(), resolve({ error: error.message })));
    req.on('close', () => (session.destroy(), resolve({ error: `closed (${req.rstCode})` })));
    req.end(body);
  });
}

/** One call record on a raw call channel; the reply record. */
function channelCall(addr: string, target: string, json: string): Promise<{ status: number; body: { error?: { code: string; message: string }; result?: unknown } }> {
  return new Promise((resolve, reject) => {
    const session = connect(addr, PLAIN);
    const stream = session.request({ ':method': 'POST', ':path': CHANNEL_PATH, [CLUSTER_HEADER]: DEFAULT_CLUSTER });
    const decoder = channelDecoder();
    stream.on('data', (c: Buffer) => {
      for (const r of decoder.push(c)) {
        if (r.kind !== REPLY) continue;
        session.destroy();
        resolve({ status: r.status, body: JSON.parse(r.body.toString()) });
      }
    });
    stream.on('error', reject);
    stream.on('close', () => reject(new Error(`channel closed without a reply (${stream.rstCode})`)));
    stream.write(encodeCall(1, 'ask', target, json));
  });
}


const MiB = 1024 * 1024;
const fmt = (bytes: number): string => `${(bytes / MiB).toFixed(0)} MB`;

/**
 * Opens `streams` call streams over `connections` connections, each writing up to `bytes` and never
 * ending; writes go on as long as the node reads. Returns a function that drops every connection.
 */
function floodStreams(addr: string, connections: number, streams: number, bytes: number): () => void {
  const chunk = Buffer.alloc(MiB, 0x5b); // '[', as the start of a very long argument list
  const sessions = Array.from({ length: connections }, () => connect(addr, PLAIN));
  for (let i = 0; i < streams; i++) {
    const session = sessions[i % connections]!;
    const stream = session.request({ ':method': 'POST', ':path': '/named/echo', [CLUSTER_HEADER]: DEFAULT_CLUSTER });
    stream.on('error', () => {});
    let sent = 0;
    const pump = (): void => {
      while (sent < bytes && !stream.destroyed) {
        sent += chunk.length;
        if (!stream.write(chunk)) return void stream.once('drain', pump);
      }
    };
    pump();
  }
  return () => {
    for (const s of sessions) s.destroy();
  };
}

/** A TCP listener standing where a forged message says a member is: it counts who connects. */
async function decoy(): Promise<{ addr: string; connections: () => number; close: () => void }> {
  let count = 0;
  const server = net.createServer((socket) => {
    count++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  return { addr: `127.0.0.1:${port}`, connections: () => count, close: () => server.close() };
}

const FAKE_ID = 'f'.repeat(32);

/** Membership messages that would make the decoy a member, if a node believed them. */
function forgeries(fakeAddr: string): string[] {
  const fake = { id: FAKE_ID, addr: fakeAddr, status: 'Alive', inc: 9, started: Date.now(), actors: ['echo'] };
  return [
    JSON.stringify({ type: 'join', from: fake, members: [fake] }),
    JSON.stringify({ type: 'ping', from: fake, updates: [fake] }),
    JSON.stringify({ type: 'sync', from: fake, members: [fake] }),
  ];
}

async function assertNoStranger(nodes: NodeProcess[], strangers: string[], reach: Reach = PLAIN): Promise<void> {
  for (const n of nodes) {
    const members = reach.tls ? await tlsMembers(n.addr, reach) : await clusterMembers(n.addr);
    assert.equal(members.map((m) => m.addr).sort(), nodes.map((m) => m.addr).sort(), `${n.addr} lists only the cluster's nodes`);
    assert.not.ok(members.some((m) => m.node_id === FAKE_ID || strangers.includes(m.addr)), `${n.addr} lists no stranger`);
    assert.is(n.proc.exitCode, null, `${n.addr} still runs`);
  }
}

async function tlsMembers(addr: string, reach: Reach): Promise<Array<{ node_id: string; addr: string; status: string }>> {
  const r = await request(addr, reach, { ':path': '/cluster/members' });
  if ('error' in r) throw new Error(r.error);
  return JSON.parse(r.body);
}

async function allAlive(nodes: NodeProcess[], reach: Reach = PLAIN): Promise<void> {
  for (const n of nodes) {
    await waitFor(`${n.addr} to see ${nodes.length} Alive`, async () => {
      const members = reach.tls ? await tlsMembers(n.addr, reach) : await clusterMembers(n.addr);
      return members.filter((m) => m.status === 'Alive').length === nodes.length;
    });
  }
}

test('a cleartext cluster: deep nesting, unfinished bodies, forged membership and another cluster leave it serving, alone, and its memory comes back', async () => {
  const a = await startNode({ name: 'echo' });
  const [b, c] = await Promise.all([startNode({ name: 'echo', seeds: [a.addr] }), startNode({ name: 'echo', seeds: [a.addr] })]);
  const nodes = [a, b, c];
  await allAlive(nodes);
  const call = (addr: string, body: string) => request(addr, PLAIN, { ':method': 'POST', ':path': '/named/echo', [CLUSTER_HEADER]: DEFAULT_CLUSTER }, body);
  // Warm each node up before its memory is measured: the code paths the abuse takes, once.
  for (const n of nodes) {
    assert.equal(await call(n.addr, '{"method":"echo","args":["warm"]}'), { status: 200, body: '{"result":"warm"}' });
  }
  await new Promise((r) => setTimeout(r, 500));
  const before = new Map(nodes.map((n) => [n.addr, rss(n.proc.pid!)]));

  const t0 = Date.now();
  const phase = (what: string): void => void (process.env.ABUSE_TIMING && console.log(`  ${Date.now() - t0} ms: ${what}`));
  phase('cluster up');
  // 1. A 10 KB argument nested 5,000 deep, on both call paths: an error reply (refused before parsing), no crash.
  const nested = `${'['.repeat(5000)}${']'.repeat(5000)}`;
  const deep = `{"method":"echo","args":[${nested}]}`;
  for (const n of nodes) {
    const viaRoute = await call(n.addr, deep);
    assert.ok('status' in viaRoute && viaRoute.status === 400, `/named/echo on ${n.addr}: ${JSON.stringify(viaRoute).slice(0, 200)}`);
    assert.match((viaRoute as { body: string }).body, 'deeper than 512 levels');
    const viaChannel = await channelCall(n.addr, '/named/echo', deep);
    assert.is(viaChannel.status, 400);
    assert.is(viaChannel.body.error?.code, 'bad-request');
    assert.match(viaChannel.body.error!.message, 'deeper than 512 levels');
  }
  phase('deep nesting');
  // Request targets no URL parser takes (`//[::1` reads as a host), with no cluster header, over both protocols: 404, not a crash.
  for (const n of nodes) {
    for (const path of ['//[::1', '//[::1/health', '/%']) {
      const h2 = await request(n.addr, PLAIN, { ':path': path });
      assert.ok('status' in h2 && h2.status === 404, `h2 ${path} on ${n.addr}: ${JSON.stringify(h2)}`);
    }
    const [host, port] = [n.addr.slice(0, n.addr.lastIndexOf(':')), Number(n.addr.slice(n.addr.lastIndexOf(':') + 1))];
    for (const [target, status] of [['//[::1/health', 404], ['http://x/health', 200]] as const) {
      const answer = await new Promise<string>((resolve) => {
        const socket = net.connect(port, host, () => socket.end(`GET ${target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`));
        let text = '';
        socket.on('data', (c: Buffer) => (text += c.toString()));
        socket.on('close', () => resolve(text));
        socket.on('error', () => {});
      });
      assert.match(answer, new RegExp(`^HTTP/1.1 ${status} `), `HTTP/1.1 ${target} on ${n.addr}: ${answer.slice(0, 200)}`);
    }
  }
  phase('targets');
  // 2. 100 streams on one connection and 100 more over ten, each trying to send 15 MiB and never ending.
  const peaks = new Map(nodes.map((n) => [n.addr, 0]));
  const drops = nodes.map((n) => [floodStreams(n.addr, 1, 100, 15 * MiB), floodStreams(n.addr, 10, 100, 15 * MiB)]).flat();
  const watchPeak = setInterval(() => {
    for (const n of nodes) peaks.set(n.addr, Math.max(peaks.get(n.addr)!, rss(n.proc.pid!)));
  }, 100);
  try {
    await new Promise((r) => setTimeout(r, 3000));
    // Meanwhile the node still answers (observers; calls may be refused as overloaded, never crash it).
    for (const n of nodes) {
      const health = await request(n.addr, PLAIN, { ':path': '/health' });
      assert.ok('status' in health && health.status === 200, `${n.addr} answers /health during the flood`);
    }
  } finally {
    for (const drop of drops) drop();
    clearInterval(watchPeak);
  }

  phase('flood');
  // 2b. A channel caller that never reads its replies (its window shut: INITIAL_WINDOW_SIZE 0) and keeps
  // calling echo with 4 MB arguments: the node stops reading its calls, so replies do not pile up.
  const argument = JSON.stringify({ method: 'echo', args: ['a'.repeat(4 * MiB)] });
  for (const n of nodes) {
    const session = http2.connect(`http://${n.addr}`, { settings: { initialWindowSize: 0 } });
    session.on('error', () => {});
    const channel = session.request({ ':method': 'POST', ':path': CHANNEL_PATH, [CLUSTER_HEADER]: DEFAULT_CLUSTER });
    channel.on('error', () => {});
    let id = 0;
    const calls = setInterval(() => {
      if (!channel.destroyed && channel.writableLength < 64 * MiB) channel.write(encodeCall(++id, 'ask', '/named/echo', argument));
    }, 20);
    let peak = 0;
    const start = rss(n.proc.pid!);
    const watch = setInterval(() => (peak = Math.max(peak, rss(n.proc.pid!))), 50);
    await new Promise((r) => setTimeout(r, 3000));
    const health = await request(n.addr, PLAIN, { ':path': '/health' });
    clearInterval(calls);
    clearInterval(watch);
    session.destroy();
    assert.ok('status' in health && health.status === 200, `${n.addr} answers /health while a caller does not read`);
    assert.ok(peak - start < 200 * MiB, `${n.addr} grew ${fmt(peak - start)} for a caller that reads nothing (${id} calls sent)`);
  }
  phase('unread replies');
  // 3. Forged membership messages: naming no cluster, or another; none is believed, none reaches the decoy.
  const fake = await decoy();
  try {
    for (const n of nodes) {
      for (const body of forgeries(fake.addr)) {
        for (const cluster of [undefined, 'elsewhere']) {
          const headers: http2.OutgoingHttpHeaders = { ':method': 'POST', ':path': SWIM_PATH, ...(cluster ? { [CLUSTER_HEADER]: cluster } : {}) };
          const r = await request(n.addr, PLAIN, headers, body);
          assert.ok('status' in r && r.status === 403, `forged membership on ${n.addr} (cluster ${cluster}): ${JSON.stringify(r)}\n${n.output().slice(-2000)}`);
        }
      }
    }

    phase('forged');
    // 4. A node of another cluster seeded with ours: refused, never added, and it adds none of ours.
    const stranger = await startNode({ name: 'echo', seeds: [a.addr], extraArgs: ['--cluster', 'elsewhere'] });
    await waitFor('the stranger to be refused', () => /refused|forbidden|another cluster|not 'elsewhere'/.test(stranger.output()), 5000);
    await new Promise((r) => setTimeout(r, 1500)); // probes every 100 ms: time for gossip to spread anything it would
    await assertNoStranger(nodes, [stranger.addr, fake.addr]);
    assert.equal((await clusterMembers(stranger.addr)).map((m) => m.addr), [stranger.addr], 'the stranger added none of ours');
    assert.is(fake.connections(), 0, 'no node connected to the address a forged message named');
    stranger.proc.kill('SIGKILL');
  } finally {
    fake.close();
  }

  phase('stranger');
  // The cluster still works, and memory came back once the abuser left.
  await allAlive(nodes);
  phase('all alive');
  for (const n of nodes) assert.equal(await call(n.addr, '{"method":"echo","args":["still"]}'), { status: 200, body: '{"result":"still"}' });
  for (const n of nodes) {
    const start = before.get(n.addr)!;
    const settled = await waitFor(
      `${n.addr} to come back within 20% of its starting RSS ${fmt(start)}`,
      () => {
        const now = rss(n.proc.pid!);
        return now <= start * 1.2 ? now : undefined;
      },
      20_000,
      250,
    ).catch((error: Error) => {
      throw new Error(`${error.message} (now ${fmt(rss(n.proc.pid!))}, peak ${fmt(peaks.get(n.addr)!)})`);
    });
    console.log(`  ${n.addr}: RSS ${fmt(start)} at start, ${fmt(peaks.get(n.addr)!)} at the peak of the flood, ${fmt(settled)} after`);
  }
});

test('a mutual-TLS cluster: gossip and calls between three processes; no certificate, another CA, another cluster or a client certificate cannot join', async () => {
  const certs = join(dir, 'certs');
  const other = join(dir, 'other-ca');
  const cert = async (args: string[]): Promise<void> => {
    const r = await runTool('actorctl', ['cert', ...args]);
    assert.is(r.code, 0, r.stderr);
  };
  await cert(['ca', '--dir', certs]);
  await cert(['ca', '--dir', other]);
  assert.is(statSync(join(certs, 'ca.key')).mode & 0o777, 0o600, 'the CA key is 0600');
  for (const n of ['n1', 'n2', 'n3']) await cert(['node', n, '--dir', certs, '--cluster', 'prod']);
  await cert(['node', 'spy', '--dir', other, '--cluster', 'prod']);
  await cert(['node', 'neighbour', '--dir', certs, '--cluster', 'elsewhere']);
  await cert(['node', 'intruder', '--dir', certs, '--cluster', 'prod']);
  await cert(['client', 'ops', '--dir', certs, '--cluster', 'prod']);
  assert.is(statSync(join(certs, 'n1.key')).mode & 0o777, 0o600, 'node keys are 0600');
  const tlsArgs = (d: string, name: string): string[] => ['--tls-ca', join(certs, 'ca.crt'), '--tls-cert', join(d, `${name}.crt`), '--tls-key', join(d, `${name}.key`)];
  const read = (d: string, name: string): Credentials => ({ ca: readFileSync(join(certs, 'ca.crt')), cert: readFileSync(join(d, `${name}.crt`)), key: readFileSync(join(d, `${name}.key`)) });
  const ops: Reach = { tls: true, credentials: read(certs, 'ops') };

  const a = await startNode({ name: 'echo', extraArgs: tlsArgs(certs, 'n1') });
  const [b, c] = await Promise.all(['n2', 'n3'].map((n) => startNode({ name: 'echo', seeds: [a.addr], extraArgs: tlsArgs(certs, n) })));
  const nodes = [a, b!, c!];
  await allAlive(nodes, ops);
  // Calls go between the nodes over TLS: each node reaches the others' echo (the client only asks one).
  const called = await runTool('actorctl', ['call', 'echo', 'node', '[]', '--seeds', a.addr, ...tlsArgs(certs, 'ops')]);
  assert.is(called.code, 0, called.stderr);
  assert.match(called.stdout, /^"[0-9a-f]{32}"\n$/);
  const inspected = await runTool('actorctl', ['inspect', 'actors', '--seeds', b!.addr, '--format', 'json', ...tlsArgs(certs, 'ops')]);
  assert.is(inspected.code, 0, inspected.stderr);
  assert.is((JSON.parse(inspected.stdout) as Array<{ name: string; instances: number }>).find((r) => r.name === 'echo')?.instances, 3);

  // No client certificate, or one of another CA: the handshake fails; nothing is answered.
  const fake = await decoy();
  try {
    for (const n of nodes) {
      const anonymous = await request(n.addr, { tls: true, credentials: { ca: readFileSync(join(certs, 'ca.crt')) } }, { ':method': 'POST', ':path': SWIM_PATH, [CLUSTER_HEADER]: 'prod' }, forgeries(fake.addr)[0]);
      assert.ok('error' in anonymous, `a peer without a certificate is refused by ${n.addr}: ${JSON.stringify(anonymous)}`);
      const foreign = await request(n.addr, { tls: true, credentials: { ...read(other, 'spy'), ca: readFileSync(join(certs, 'ca.crt')) } }, { ':path': '/health' });
      assert.ok('error' in foreign, `a certificate of another CA is refused by ${n.addr}: ${JSON.stringify(foreign)}`);
      // A client certificate may read and call, but its membership messages are refused.
      for (const body of forgeries(fake.addr)) {
        const forged = await request(n.addr, ops, { ':method': 'POST', ':path': SWIM_PATH, [CLUSTER_HEADER]: 'prod' }, body);
        assert.ok('status' in forged && forged.status === 403, `membership from a client certificate on ${n.addr}: ${JSON.stringify(forged)}`);
      }
    }
    // A plain TCP client speaking cleartext HTTP/2 gets nothing either.
    const cleartext = await new Promise<string>((resolve) => {
      const socket = net.connect(Number(a.addr.split(':')[1]), '127.0.0.1', () => socket.write('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'));
      let text = '';
      socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
      socket.on('error', () => resolve(text));
      socket.on('close', () => resolve(text));
    });
    assert.not.match(cleartext, 'HTTP/', 'no HTTP answer without TLS');
    // A TLS handshake without a certificate, at the socket level: refused.
    const bare = await new Promise<string>((resolve) => {
      const socket = tls.connect({ host: '127.0.0.1', port: Number(b!.addr.split(':')[1]), ca: readFileSync(join(certs, 'ca.crt')), checkServerIdentity: () => undefined, ALPNProtocols: ['http/1.1'] }, () =>
        socket.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n'),
      );
      let text = '';
      socket.on('data', (d: Buffer) => (text += d.toString()));
      socket.on('error', (e) => resolve(`error: ${e.message}`));
      socket.on('close', () => resolve(text));
    });
    assert.not.match(bare, '200 OK', `no answer without a client certificate: ${bare.slice(0, 120)}`);

    // Nodes that try to join: a certificate of another CA, and one of this CA for another cluster.
    const spy = await startNode({ name: 'echo', seeds: [a.addr], extraArgs: ['--tls-ca', join(other, 'ca.crt'), '--tls-cert', join(other, 'spy.crt'), '--tls-key', join(other, 'spy.key')] });
    const neighbour = await startNode({ name: 'echo', seeds: [a.addr], extraArgs: tlsArgs(certs, 'neighbour') });
    await new Promise((r) => setTimeout(r, 1500));
    await assertNoStranger(nodes, [spy.addr, neighbour.addr, fake.addr], ops);
    assert.is(fake.connections(), 0, 'no node connected to the address a forged message named');
    spy.proc.kill('SIGKILL');
    neighbour.proc.kill('SIGKILL');
  } finally {
    fake.close();
  }
  // Prometheus with a client certificate scrapes /metrics over HTTPS/1.1 (ALPN http/1.1).
  const scraped = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const [host, port] = b!.addr.split(':');
    const req = https.get({ host, port: Number(port), path: '/metrics', agent: false, ...read(certs, 'ops'), checkServerIdentity: () => undefined }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.on('error', reject);
  });
  assert.is(scraped.status, 200);
  assert.match(scraped.body, /^actor_cluster_members\{node_id="[0-9a-f]{32}",status="Alive"\} 3$/m);
  // The metric counts what was refused, by reason.
  const metrics = await request(a.addr, ops, { ':path': '/metrics' });
  assert.ok('body' in metrics);
  assert.match(metrics.body, /actor_refused_total\{reason="tls"\} [1-9]/);
  assert.match(metrics.body, /actor_refused_total\{reason="not-node"\} [1-9]/);
  // The node of another cluster is refused by its certificate: here (reason cluster), or on its own side first (then here reason tls).
  assert.match(metrics.body, /actor_refused_total\{reason="(cluster|tls)"\} [1-9]/);

  // A node of the cluster holding a valid certificate still joins.
  const late = await startNode({ name: 'echo', seeds: [b!.addr], extraArgs: tlsArgs(certs, 'intruder') });
  await allAlive([...nodes, late], ops);
});

test.run();
