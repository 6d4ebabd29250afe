/**
 * Actor system benchmark, one run:
 *   - local ask round trips/s (1 and 64 in flight), against a plain async method call (baseline);
 *   - remote ask round trips/s over loopback h2c with 1 and 64 in flight, p50/p99, against a bare
 *     HTTP/2 echo server in another process (baseline: one stream per request, no actor code; the
 *     asks themselves ride the node's call channel, one long-lived stream, see framework/core/channel.ts);
 *   - membership convergence time of 10 node processes;
 *   - failure detection with the default timers: kill -9 -> Suspect and -> Failed, over trials.
 *
 *   node dist/bench/actors/run.js [--seconds 3] [--trials 3] [--nodes 10]
 */
import type { ChildProcess } from 'node:child_process';
import http2 from 'node:http2';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { loadActorClass, startSystem } from '../../framework/index.js';
import { killChildren, startChild } from '../lib/child.js';
import { closedLoop, type LoopResult } from '../lib/closed-loop.js';

const DIST = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const { values } = parseArgs({ options: { seconds: { type: 'string', default: '3' }, trials: { type: 'string', default: '3' }, nodes: { type: 'string', default: '10' } } });
const SECONDS = Number(values.seconds);
const TRIALS = Number(values.trials);
const NODES = Number(values.nodes);

process.on('SIGINT', () => process.exit(130));
/** What a node (`Started at`) or the bare HTTP/2 server (`LISTENING`) prints once it listens. */
const STARTED = /(?:Started at|LISTENING) (\S+)/;

interface Load extends LoopResult {
  /** CPU time of this process and of `peer` (the server process) per call, in µs. */
  cpuUsPerCall: number;
}

/** CPU seconds used so far by another process (utime + stime from /proc). */
function processCpuSeconds(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100; // clock ticks; USER_HZ is 100 on Linux
  } catch {
    return 0;
  }
}

/** Runs `call` with `inFlight` concurrent loops for SECONDS, with the CPU time spent here and in `peer`. */
async function load(inFlight: number, call: () => Promise<unknown>, seconds = SECONDS, peer?: number): Promise<Load> {
  const cpu0 = process.cpuUsage();
  const peer0 = processCpuSeconds(peer);
  const result = await closedLoop(inFlight, call, seconds);
  const cpu = process.cpuUsage(cpu0);
  const cpuSeconds = (cpu.user + cpu.system) / 1e6 + processCpuSeconds(peer) - peer0;
  return { ...result, cpuUsPerCall: (cpuSeconds * 1e6) / result.calls };
}

function startNode(seeds: string[], name = 'echo'): Promise<{ proc: ChildProcess; addr: string }> {
  const args = [join(DIST, 'cli', 'actorctl.js'), 'actor', 'framework.examples.Echo', '--addr', '127.0.0.1:0', '--name', name];
  if (seeds.length) args.push('--seeds', seeds.join(','));
  return startChild(args, STARTED).then(({ proc, match }) => ({ proc, addr: match[1]! }));
}

/** A bare h2c server answering every POST with its body: what HTTP/2 alone costs. */
const BARE_SERVER = `
import http2 from 'node:http2';
const server = http2.createServer();
server.on('stream', (stream) => {
  const chunks = [];
  stream.on('data', (c) => chunks.push(c));
  stream.on('end', () => { stream.respond({ ':status': 200, 'content-type': 'application/json' }); stream.end(Buffer.concat(chunks)); });
});
server.listen(0, '127.0.0.1', () => console.log('LISTENING 127.0.0.1:' + server.address().port));
`;

function bareRequest(session: http2.ClientHttp2Session, body: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = session.request({ ':method': 'POST', ':path': '/echo' });
    req.on('data', () => {});
    req.on('end', resolve);
    req.on('error', reject);
    req.end(body);
  });
}

async function membersOf(addr: string): Promise<Array<{ addr: string; status: string }>> {
  const session = http2.connect(`http://${addr}`);
  try {
    return await new Promise((resolve, reject) => {
      session.on('error', reject);
      const req = session.request({ ':path': '/cluster/members' });
      let text = '';
      req.on('data', (c: Buffer) => (text += c));
      req.on('end', () => resolve(JSON.parse(text)));
      req.on('error', reject);
      req.end();
    });
  } finally {
    session.close();
  }
}

async function until(check: () => Promise<boolean>, timeoutMs: number, everyMs = 10): Promise<number> {
  const start = performance.now();
  while (performance.now() - start < timeoutMs) {
    if (await check().catch(() => false)) return performance.now() - start;
    await new Promise((r) => setTimeout(r, everyMs));
  }
  throw new Error(`condition not reached within ${timeoutMs} ms`);
}

const { cls: Echo } = await loadActorClass('framework.examples.Echo');
const fmt = (n: number, digits = 0): string => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
const report: Record<string, unknown> = {};

// ---- local ----
{
  const system = await startSystem({ log: () => {} });
  const ref = await system.spawn(Echo);
  const plain = new (Echo as unknown as new (p: object) => { echo(v: unknown): Promise<unknown> })({ prefix: '', start: 0, delay_ms: 0, upper: false, fail_on: '' });
  await load(64, () => ref.ask('echo', [1]), 0.5); // warm-up
  for (const inFlight of [1, 64]) {
    const base = await load(inFlight, () => plain.echo(1));
    const actor = await load(inFlight, () => ref.ask('echo', [1]));
    report[`local_ask_${inFlight}`] = { asks_per_s: Math.round(actor.perSecond), cpu_us_per_ask: actor.cpuUsPerCall, baseline_calls_per_s: Math.round(base.perSecond), ratio: actor.perSecond / base.perSecond };
    console.log(
      `local ask, ${inFlight} in flight: ${fmt(actor.perSecond)} asks/s, ${fmt(actor.cpuUsPerCall, 2)} µs CPU each (plain async call: ${fmt(base.perSecond)}/s, ratio ${fmt(actor.perSecond / base.perSecond, 3)})`,
    );
  }
  await system.shutdown();
}

// ---- remote ----
{
  const node = await startNode([]);
  const bare = await startChild(['--input-type=module', '-e', BARE_SERVER], STARTED);
  const client = await startSystem({ seeds: [node.addr], log: () => {} });
  await until(async () => client.instances('echo').length === 1, 10_000);
  const echo = client.resolve('echo');
  const session = http2.connect(`http://${bare.match[1]}`);
  const body = JSON.stringify({ method: 'echo', args: [1] });
  await load(64, () => echo.ask('echo', [1]), 1); // warm-up (JIT, connection)
  await load(64, () => bareRequest(session, body), 1);
  for (const inFlight of [1, 64]) {
    const base = await load(inFlight, () => bareRequest(session, body), SECONDS, bare.proc.pid);
    const actor = await load(inFlight, () => echo.ask('echo', [1]), SECONDS, node.proc.pid);
    report[`remote_ask_${inFlight}`] = {
      asks_per_s: Math.round(actor.perSecond),
      p50_ms: actor.p50Ms,
      p99_ms: actor.p99Ms,
      cpu_us_per_ask: actor.cpuUsPerCall,
      baseline_h2_per_s: Math.round(base.perSecond),
      baseline_p50_ms: base.p50Ms,
      baseline_p99_ms: base.p99Ms,
      baseline_cpu_us_per_call: base.cpuUsPerCall,
      ratio: actor.perSecond / base.perSecond,
    };
    console.log(
      `remote ask, ${inFlight} in flight: ${fmt(actor.perSecond)} asks/s, p50 ${fmt(actor.p50Ms, 3)} ms, p99 ${fmt(actor.p99Ms, 3)} ms ` +
        `(bare HTTP/2 echo: ${fmt(base.perSecond)}/s, p50 ${fmt(base.p50Ms, 3)} ms, p99 ${fmt(base.p99Ms, 3)} ms; ratio ${fmt(actor.perSecond / base.perSecond, 3)}); ` +
        `CPU per call, both processes: ${fmt(actor.cpuUsPerCall, 1)} µs vs bare ${fmt(base.cpuUsPerCall, 1)} µs`,
    );
  }
  session.close();
  await client.shutdown();
  node.proc.kill('SIGKILL');
  bare.proc.kill('SIGKILL');
}

// ---- membership: convergence and failure detection (default timers) ----
{
  const t0 = performance.now();
  const first = await startNode([]);
  const rest = await Promise.all(Array.from({ length: NODES - 1 }, () => startNode([first.addr])));
  const all = [first, ...rest];
  const startedMs = performance.now() - t0;
  const allAlive = async (): Promise<boolean> => {
    for (const n of all) {
      const list = await membersOf(n.addr);
      if (list.filter((m) => m.status === 'Alive').length !== all.length) return false;
    }
    return true;
  };
  const convergeMs = await until(allAlive, 30_000);
  report.convergence = { nodes: NODES, processes_started_ms: startedMs, converged_after_last_start_ms: convergeMs };
  console.log(`membership: ${NODES} node processes started in ${fmt(startedMs)} ms; every node saw ${NODES} Alive ${fmt(convergeMs)} ms after the last started`);

  const suspects: number[] = [];
  const faileds: number[] = [];
  const observer = all[0]!;
  for (let trial = 0; trial < TRIALS && trial < all.length - 1; trial++) {
    const victim = all[all.length - 1 - trial]!;
    victim.proc.kill('SIGKILL');
    const killed = performance.now();
    const statusOf = async (): Promise<string | undefined> => (await membersOf(observer.addr)).find((m) => m.addr === victim.addr)?.status;
    await until(async () => (await statusOf()) !== 'Alive', 30_000, 5);
    suspects.push(performance.now() - killed);
    await until(async () => (await statusOf()) === 'Failed', 60_000, 5);
    faileds.push(performance.now() - killed);
    console.log(`  trial ${trial + 1}: kill -9 -> Suspect ${fmt(suspects.at(-1)!)} ms, -> Failed ${fmt(faileds.at(-1)!)} ms`);
  }
  const mean = (a: number[]): number => a.reduce((x, y) => x + y, 0) / a.length;
  report.failure_detection = { trials: suspects.length, suspect_ms: suspects, failed_ms: faileds, suspect_mean_ms: mean(suspects), failed_mean_ms: mean(faileds) };
  console.log(`failure detection (default timers, ${suspects.length} trials): Suspect mean ${fmt(mean(suspects))} ms (max ${fmt(Math.max(...suspects))}), Failed mean ${fmt(mean(faileds))} ms (max ${fmt(Math.max(...faileds))})`);
  killChildren();
}

console.log(JSON.stringify(report, null, 2));
process.exit(0);
