/**
 * A three-node cluster of `actorctl actor` processes, in cleartext and with mutual TLS, same run:
 *   - join latency: from spawning a third node's process to it being Alive on all three nodes
 *     (and on its seed alone), median of --trials;
 *   - failure detection with the default timers: kill -9 of one node of three -> Suspect and
 *     -> Failed as another node sees it, over --trials;
 *   - remote ask p50/p99 and throughput, 64 in flight, from a node in this process.
 *
 * With --baseline DIST (the dist/ of another build, e.g. of the main branch), its nodes are
 * measured first, cleartext, for join latency and failure detection (asks need this build's nodes).
 *
 *   node dist/bench/actors/cluster.js [--trials 5] [--seconds 3] [--baseline /path/to/other/dist]
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http2 from 'node:http2';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { createCa, createCertificate, startSystem, type TlsFiles } from '../../framework/index.js';
import { startChild } from '../lib/child.js';
import { closedLoop, type LoopResult } from '../lib/closed-loop.js';

const DIST = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const { values } = parseArgs({ options: { trials: { type: 'string', default: '5' }, seconds: { type: 'string', default: '3' }, baseline: { type: 'string' } } });
const TRIALS = Number(values.trials);
const SECONDS = Number(values.seconds);
const CLUSTER = 'bench';

process.on('SIGINT', () => process.exit(130));

interface Node {
  proc: ChildProcess;
  addr: string;
}

/** Whose nodes are measured: this build's, or (`--baseline`) another's, which may not know `--cluster`. */
let nodeDist = DIST;

function startNode(seeds: string[], tls: TlsFiles | undefined): { started: number; ready: Promise<Node & { readyAt: number }> } {
  const args = [join(nodeDist, 'bin', 'actorctl.js'), 'actor', 'framework.examples.Echo', '--addr', '127.0.0.1:0', '--name', 'echo', ...(nodeDist === DIST ? ['--cluster', CLUSTER] : [])];
  if (seeds.length) args.push('--seeds', seeds.join(','));
  if (tls) args.push('--tls-ca', tls.ca, '--tls-cert', tls.cert, '--tls-key', tls.key);
  const started = performance.now();
  const ready = startChild(args, /Started at (\S+)/).then(({ proc, match }) => ({ proc, addr: match[1]!, readyAt: performance.now() }));
  return { started, ready };
}

/** One observer session per node address (TLS with the client's certificate when given). */
const sessions = new Map<string, http2.ClientHttp2Session>();
function session(addr: string, tls: TlsFiles | undefined): http2.ClientHttp2Session {
  const existing = sessions.get(addr);
  if (existing && !existing.closed && !existing.destroyed) return existing;
  const s = tls
    ? http2.connect(`https://${addr}`, { ca: readFileSync(tls.ca), cert: readFileSync(tls.cert), key: readFileSync(tls.key), checkServerIdentity: () => undefined })
    : http2.connect(`http://${addr}`);
  s.on('error', () => {});
  s.once('close', () => sessions.delete(addr));
  sessions.set(addr, s);
  return s;
}

function membersOf(addr: string, tls: TlsFiles | undefined): Promise<Array<{ addr: string; status: string }>> {
  return new Promise((resolve, reject) => {
    const req = session(addr, tls).request({ ':path': '/cluster/members' });
    let text = '';
    req.setTimeout(1000, () => req.close());
    req.on('data', (c: Buffer) => (text += c));
    req.on('end', () => {
      try {
        resolve(JSON.parse(text));
      } catch (error) {
        reject(error);
      }
    });
    req.on('error', reject);
    req.end();
  });
}

async function until(check: () => Promise<boolean>, timeoutMs: number, everyMs = 2): Promise<number> {
  const start = performance.now();
  while (performance.now() - start < timeoutMs) {
    if (await check().catch(() => false)) return performance.now();
    await new Promise((r) => setTimeout(r, everyMs));
  }
  throw new Error(`condition not reached within ${timeoutMs} ms`);
}

const median = (a: number[]): number => {
  const s = [...a].sort((x, y) => x - y);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const fmt = (n: number, digits = 0): string => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

async function bench(label: string, tls: { node: (name: string) => TlsFiles; client: TlsFiles } | undefined, asks = true): Promise<Record<string, unknown>> {
  const observe = tls?.client;
  const a = await startNode([], tls?.node('a')).ready;
  const b = await startNode([a.addr], tls?.node('b')).ready;
  const seen = (n: Node, who: string): Promise<boolean> => membersOf(n.addr, observe).then((l) => l.some((m) => m.addr === who && m.status === 'Alive'));
  await until(() => seen(a, b.addr), 10_000);

  // Join latency: process start of a third node -> Alive on its seed, and on all three.
  const toSeed: number[] = [];
  const toAll: number[] = [];
  const toStarted: number[] = [];
  let c: Node | undefined;
  for (let trial = 0; trial < TRIALS; trial++) {
    if (c) {
      c.proc.kill('SIGKILL');
      await new Promise((r) => c!.proc.once('exit', r));
      await until(async () => !(await seen(a, c!.addr)), 30_000, 20).catch(() => undefined);
    }
    const start = startNode([a.addr], tls?.node('c'));
    const node = await start.ready;
    c = node;
    let seedAt = 0;
    const allAt = await until(async () => {
      const views = await Promise.all([a, b, node].map((n) => seen(n, node.addr)));
      if (!seedAt && views[0]) seedAt = performance.now();
      return views.every(Boolean);
    }, 10_000);
    toSeed.push(seedAt - start.started);
    toAll.push(allAt - start.started);
    toStarted.push(node.readyAt - start.started);
  }
  console.log(
    `${label}: join (process start -> Alive): on its seed median ${fmt(median(toSeed))} ms, on all three median ${fmt(median(toAll))} ms (${toAll.map((x) => fmt(x)).join(', ')}); ` +
      `of which process start -> listening (its 'Started at' line) median ${fmt(median(toStarted))} ms`,
  );

  // Remote asks from a node in this process, 64 in flight.
  let ask: LoopResult | undefined;
  if (asks) {
    const client = await startSystem({ seeds: [a.addr], cluster: CLUSTER, tls: tls?.node('bench-client'), log: () => {} });
    await until(async () => client.instances('echo').length === 3, 10_000);
    const echo = client.resolve('echo', { policy: 'round-robin' });
    await closedLoop(64, () => echo.ask('echo', [1]), 1);
    ask = await closedLoop(64, () => echo.ask('echo', [1]), SECONDS);
    console.log(`${label}: remote ask, 64 in flight: ${fmt(ask.perSecond)} asks/s, p50 ${fmt(ask.p50Ms, 3)} ms, p99 ${fmt(ask.p99Ms, 3)} ms`);
    await client.shutdown();
  }

  // Failure detection: kill -9 the third node, as the first sees it; then bring one back.
  const suspects: number[] = [];
  const faileds: number[] = [];
  for (let trial = 0; trial < TRIALS; trial++) {
    const victim = c!;
    const statusOf = async (): Promise<string | undefined> => (await membersOf(a.addr, observe)).find((m) => m.addr === victim.addr)?.status;
    victim.proc.kill('SIGKILL');
    const killed = performance.now();
    suspects.push((await until(async () => (await statusOf()) === 'Suspect' || (await statusOf()) === 'Failed', 30_000)) - killed);
    faileds.push((await until(async () => (await statusOf()) === 'Failed', 60_000)) - killed);
    if (trial + 1 < TRIALS) {
      c = await startNode([a.addr], tls?.node('c')).ready;
      await until(() => seen(a, c!.addr), 10_000);
    }
  }
  console.log(`${label}: kill -9 of one of three -> Suspect median ${fmt(median(suspects))} ms, -> Failed median ${fmt(median(faileds))} ms (${TRIALS} trials)`);
  for (const n of [a, b]) n.proc.kill('SIGKILL');
  for (const s of sessions.values()) s.destroy();
  sessions.clear();
  return {
    join_to_seed_ms_median: median(toSeed),
    join_to_all_ms_median: median(toAll),
    join_to_all_ms: toAll,
    process_start_to_listening_ms_median: median(toStarted),
    remote_ask_64: ask && { asks_per_s: Math.round(ask.perSecond), p50_ms: ask.p50Ms, p99_ms: ask.p99Ms },
    suspect_ms_median: median(suspects),
    failed_ms_median: median(faileds),
    suspect_ms: suspects,
    failed_ms: faileds,
  };
}

const dir = mkdtempSync(join(tmpdir(), 'actor-bench-'));
try {
  await createCa({ dir, days: 2, force: false });
  const leaf = async (kind: 'node' | 'client', name: string): Promise<TlsFiles> => {
    const files = await createCertificate({ kind, name, cluster: CLUSTER, hosts: ['127.0.0.1', 'localhost'], dir, out: dir, days: 2, force: false });
    return { ca: join(dir, 'ca.crt'), cert: files.cert, key: files.key };
  };
  const nodes = new Map<string, TlsFiles>();
  for (const name of ['a', 'b', 'c', 'bench-client']) nodes.set(name, await leaf('node', name));
  const client = await leaf('client', 'observer');
  let baseline: Record<string, unknown> | undefined;
  if (values.baseline) {
    nodeDist = values.baseline;
    baseline = await bench('baseline h2c', undefined, false);
    nodeDist = DIST;
  }
  const report = {
    baseline,
    h2c: await bench('h2c', undefined),
    tls: await bench('mTLS', { node: (name) => nodes.get(name)!, client }),
  };
  console.log(JSON.stringify(report, null, 2));
} finally {
  rmSync(dir, { recursive: true, force: true });
}
process.exit(0);
