import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ActorSystem } from '../core/system.js';
import { runTool } from '../../lib/testing/run-tool.js';
import http2 from 'node:http2';
import { FAST_CLIENT_TIMERS, INSPECT_CLUSTER, clusterMembers, killAll, memberStatuses, parseInspectStatuses, startNode, waitFor, type NodeProcess } from './helpers/cluster.js';

/** Status of each member address as `actorctl inspect cluster` prints it. */
async function inspectStatuses(seed: string): Promise<Map<string, string>> {
  const r = await runTool('actorctl', [...INSPECT_CLUSTER, '--seeds', seed, '--timeout', '2']);
  if (r.code !== 0) throw new Error(`inspect cluster exited ${r.code}: ${r.stderr}`);
  return parseInspectStatuses(r.stdout);
}

async function setFaults(addr: string, block: string[]): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const session = http2.connect(`http://${addr}`);
    session.on('error', reject);
    const req = session.request({ ':method': 'POST', ':path': '/_test/faults' });
    req.on('error', reject);
    req.on('response', (h) => (h[':status'] === 200 ? undefined : reject(new Error(`faults: ${h[':status']}`))));
    req.on('end', () => (session.close(), resolve()));
    req.resume();
    req.end(JSON.stringify({ block }));
  });
}

let nodes: NodeProcess[] = [];

test.after(async () => {
  await killAll();
});

test('three nodes join through one seed and call each other', async () => {
  const a = await startNode({ name: 'echo' });
  const [b, c] = await Promise.all([startNode({ name: 'echo', seeds: [a.addr] }), startNode({ name: 'echo', seeds: [a.addr] })]);
  nodes = [a, b, c];
  for (const n of nodes) {
    await waitFor(`${n.addr} to see 3 Alive`, async () => [...(await memberStatuses(n.addr)).values()].filter((s) => s === 'Alive').length === 3);
  }
  const seen = await inspectStatuses(a.addr);
  assert.equal([...seen.values()], ['Alive', 'Alive', 'Alive']);
  // A client node in this process resolves the named actor on every node in turn.
  const client = await ActorSystem.start({ seeds: [b.addr], timers: FAST_CLIENT_TIMERS, log: () => {} });
  try {
    await waitFor('3 echo instances', () => client.instances('echo').length === 3);
    const rr = client.resolve('echo', { policy: 'round-robin' });
    const reached = new Set<string>();
    for (let i = 0; i < 6; i++) reached.add(await rr.ask<string>('node'));
    assert.equal([...reached].sort(), nodes.map((n) => n.nodeId).sort());
    const least = client.resolve('echo', { policy: 'least-load' });
    const answers = await Promise.all(Array.from({ length: 30 }, (_, i) => least.ask('echo', [i])));
    assert.equal(answers, Array.from({ length: 30 }, (_, i) => i));
    const random = client.resolve('echo', { policy: 'random' });
    await random.tell('count');
    const items: unknown[] = [];
    for await (const item of random.stream('stream', [3])) items.push(item);
    assert.is(items.length, 3);
  } finally {
    await client.shutdown();
  }
});

test('kill -9 is seen as Suspect then Failed through actorctl inspect; a restart comes back Alive', async () => {
  const [a, , c] = nodes;
  c!.proc.kill('SIGKILL');
  await c!.exited;
  await waitFor('Suspect', async () => (await inspectStatuses(a!.addr)).get(c!.addr) === 'Suspect', 10_000, 10);
  await waitFor('Failed', async () => (await inspectStatuses(a!.addr)).get(c!.addr) === 'Failed', 10_000, 10);
  // Its named actor is gone from resolution once it is no longer Alive.
  const health = await runTool('actorctl', ['inspect', 'actors', '--seeds', a!.addr]);
  assert.match(health.stdout, /^echo\s+2\s+[0-9a-f]{8}, [0-9a-f]{8}\s+[0-9a-f]{8}:[0-9a-f]{8}, [0-9a-f]{8}:[0-9a-f]{8}$/m);
  const again = await startNode({ name: 'echo', addr: c!.addr, seeds: [a!.addr] });
  nodes[2] = again;
  await waitFor('the restarted node Alive', async () => (await inspectStatuses(a!.addr)).get(c!.addr) === 'Alive');
  const list = await clusterMembers(a!.addr);
  assert.is(list.filter((m) => m.addr === c!.addr).length, 1, 'the restarted process replaced the failed one');
  assert.is(list.find((m) => m.addr === c!.addr)?.node_id, again.nodeId);
});

test('a partition isolates a node, which comes back Alive when it heals', async () => {
  const [a, b, c] = nodes as [NodeProcess, NodeProcess, NodeProcess];
  await setFaults(c.addr, [a.addr, b.addr]);
  await setFaults(a.addr, [c.addr]);
  await setFaults(b.addr, [c.addr]);
  await waitFor('a to see c Failed', async () => (await memberStatuses(a.addr)).get(c.addr) === 'Failed', 10_000);
  await waitFor('c to see a and b Failed', async () => {
    const s = await memberStatuses(c.addr);
    return s.get(a.addr) === 'Failed' && s.get(b.addr) === 'Failed';
  }, 10_000);
  for (const n of nodes) await setFaults(n.addr, []);
  for (const n of nodes) {
    await waitFor(`${n.addr} to see all Alive after healing`, async () => {
      const s = await memberStatuses(n.addr);
      return nodes.every((m) => s.get(m.addr) === 'Alive');
    }, 15_000);
  }
});

test('SIGTERM makes a node leave: Left everywhere, exit 0', async () => {
  const [a, b] = nodes as [NodeProcess, NodeProcess];
  b.proc.kill('SIGTERM');
  assert.is(await b.exited, 0);
  assert.match(b.output(), 'leaving the cluster');
  assert.is((await memberStatuses(a.addr)).get(b.addr), 'Left', 'Left is known at once, not after a timeout');
  assert.is((await inspectStatuses(a.addr)).get(b.addr), 'Left');
});

test('inspect: exit 6 when no seed answers; best effort lists failing nodes', async () => {
  const [a] = nodes as [NodeProcess];
  const none = await runTool('actorctl', ['inspect', 'cluster', '--seeds', '127.0.0.1:1', '--timeout', '1']);
  assert.is(none.code, 6);
  assert.match(none.stderr, 'cannot connect to any seed node');
  const second = await runTool('actorctl', ['inspect', 'cluster', '--seeds', `127.0.0.1:1,${a.addr}`]);
  assert.is(second.code, 0, 'the next seed is tried');
  // A node that membership still holds Alive (probing is slowed right down) but that does not answer.
  const slowTimers = { probe_interval_ms: 600_000, sync_interval_ms: 600_000, join_retry_ms: 200 };
  const x = await startNode({ name: 'x', timers: slowTimers });
  const y = await startNode({ name: 'y', seeds: [x.addr], timers: slowTimers });
  await waitFor('x to know y', async () => (await memberStatuses(x.addr)).get(y.addr) === 'Alive');
  y.proc.kill('SIGSTOP');
  try {
    const strict = await runTool('actorctl', ['inspect', 'actors', '--seeds', x.addr, '--timeout', '0.5']);
    assert.is(strict.code, 6);
    assert.match(strict.stderr, y.addr);
    assert.match(strict.stderr, '--best_effort True');
    const loose = await runTool('actorctl', ['inspect', 'actors', '--seeds', x.addr, '--timeout', '0.5', '--best_effort', 'True']);
    assert.is(loose.code, 0);
    // The failing node is a diagnostic (stderr); the actors of the others are the result (stdout).
    assert.match(loose.stderr, 'warn: failed to query 1 node(s): ');
    assert.match(loose.stderr, y.addr);
    assert.match(loose.stdout, /^x\s/m);
    assert.match(loose.stdout, '(1 actor, 1 instance on 1 node)');
  } finally {
    y.proc.kill('SIGKILL');
    x.proc.kill('SIGKILL');
  }
  const bad = await runTool('actorctl', ['inspect', 'metrics', '--seeds', a.addr, '--raw', 'maybe']);
  assert.is(bad.code, 2);
  assert.match(bad.stderr, '--raw');
  const both = await runTool('actorctl', ['inspect', 'actors', '--seeds', a.addr, '--endpoint', a.addr]);
  assert.is(both.code, 2);
  const unknown = await runTool('actorctl', ['inspect', 'nodes', '--seeds', a.addr]);
  assert.is(unknown.code, 2);
  assert.match(unknown.stderr, 'inspect');
});

test('inspect cluster, metrics, actors and watch show the cluster, as tables or rows for programs', async () => {
  const [a] = nodes as [NodeProcess];
  const cluster = await runTool('actorctl', ['--log-level', 'info', 'inspect', 'cluster', '--seeds', a.addr]);
  assert.is(cluster.code, 0, cluster.stderr);
  assert.match(cluster.stdout, /^NODE_ID\s+ADDR\s+STATUS\s+ACTORS\n[0-9a-f]{32}\s+\S+\s+Alive\s+\S/);
  assert.match(cluster.stdout, new RegExp(`^\\(\\d+ members, \\d+ alive; Alive \\d+.*; as ${a.addr} sees them\\)$`, 'm'));
  assert.match(cluster.stderr, `info: connecting to the cluster via seeds ${a.addr}`);
  const summary = await runTool('actorctl', ['inspect', 'metrics', '--seeds', a.addr, '--raw', 'False']);
  assert.is(summary.code, 0);
  assert.match(summary.stdout, /^[0-9a-f]{32}\s+\S+\s+actor_cluster_members\{node_id="[0-9a-f]{32}",status="Alive"\}\s+\d+$/m);
  assert.match(summary.stdout, '(key series only; --raw True shows every series)');
  const raw = await runTool('actorctl', ['inspect', 'metrics', '--seeds', a.addr]);
  assert.match(raw.stdout, new RegExp(`^# node [0-9a-f]{32} \\(${a.addr}\\)$`, 'm'));
  assert.match(raw.stdout, '# TYPE actor_message_duration_seconds histogram');
  const rows = await runTool('actorctl', ['inspect', 'metrics', '--seeds', a.addr, '--format', 'jsonl']);
  const samples = rows.stdout.trim().split('\n').map((line) => JSON.parse(line) as { node_id: string; addr: string; series: string; value: number });
  assert.ok(samples.some((r) => r.addr === a.addr && r.series.startsWith('actor_message_duration_seconds_bucket{') && typeof r.value === 'number'), '--format jsonl has every sample');
  const endpoint = await runTool('actorctl', ['inspect', 'actors', '--endpoint', a.addr, '--all_actors', 'True']);
  assert.is(endpoint.code, 0);
  assert.match(endpoint.stdout, /^echo\s+user\s+[0-9a-f]{32}\s+Echo\s/m);
  const placed = await runTool('actorctl', ['inspect', 'actors', '--seeds', a.addr, '--format', 'json']);
  const echo = (JSON.parse(placed.stdout) as Array<{ name: string; instances: number; nodes: string[]; actor_ids: string[] }>).find((r) => r.name === 'echo');
  assert.is(echo?.instances, echo?.nodes.length);
  assert.is(echo?.actor_ids.length, echo?.instances);
  const filtered = await runTool('actorctl', ['inspect', 'actors', '--seeds', a.addr, '--filter', 'nothing-like-this']);
  assert.match(filtered.stdout, '(no actors found)');
  const once = await runTool('actorctl', ['inspect', 'watch', '--seeds', a.addr, '--kind', 'cluster', '--max_rounds', '1', '--format', 'jsonl']);
  const changes = once.stdout.trim().split('\n').map((line) => JSON.parse(line) as { round: number; kind: string; subject: string; before: unknown; after: unknown });
  assert.ok(changes.length > 1 && changes.every((c) => c.round === 1 && c.kind === 'cluster' && c.before === null), 'the first round lists everything as new');
  assert.ok(changes.some((c) => c.subject === `${a.nodeId} (${a.addr})` && c.after === 'Alive'));
  const watch = runTool('actorctl', ['inspect', 'watch', '--seeds', a.addr, '--interval', '0.3', '--max_rounds', '8', '--kind', 'all']);
  await new Promise((r) => setTimeout(r, 700));
  const extra = await startNode({ name: 'extra', seeds: [a.addr] });
  const w = await watch;
  assert.is(w.code, 0);
  assert.match(w.stdout, /Initial state: \d+\/\d+ nodes alive/);
  assert.match(w.stdout, `New actors: extra`);
  assert.match(w.stdout, /Alive nodes: \d+ -> \d+/);
  assert.match(w.stdout, /actor_cluster_members\{status="Alive"\}: \d+ -> \d+/, 'metric changes are shown');
  extra.proc.kill('SIGKILL');
});

test.run();
