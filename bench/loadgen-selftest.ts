/**
 * Is `actorctl bench` ever the bottleneck? Two measurements against the synthetic server,
 * which runs in its own process so that its CPU is not counted as the client's:
 *
 * 1. Streaming at high concurrency (default 2,000 virtual users): the measured TTFT and
 *    inter-token latency stay at the programmed values and the throughput at its ideal
 *    (users / programmed request time) only if the client keeps up; also the client's own CPU
 *    time per request, and its event-loop delay next to that of an idle process measured meanwhile
 *    (the delay any process sees on this machine; the client's own share is the difference).
 * 2. Non-streaming, zero-latency endpoint: requests/s of the load generator against autocannon
 *    (an HTTP benchmarking tool built for raw request rate) on the same endpoint, same
 *    connection count, in the same run; reported as a ratio.
 *
 *   node dist/bench/loadgen-selftest.js [--users 2000] [--seconds 5] [--connections 64]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { runBenchmark, type BenchConfig, type BenchReport } from '../framework/index.js';
import type { SyntheticConfig } from '../framework/test/helpers/synthetic-server.js';

/** The synthetic server, built from the load generator's test helpers. */
const SYNTHETIC_SERVER = join(dirname(fileURLToPath(import.meta.url)), '..', 'framework', 'test', 'helpers', 'synthetic-server.js');
const { values } = parseArgs({
  options: {
    users: { type: 'string', default: '2000' },
    seconds: { type: 'string', default: '5' },
    connections: { type: 'string', default: '64' },
  },
});
const users = Number(values.users);
const seconds = Number(values.seconds);
const connections = Number(values.connections);

async function startServer(config: SyntheticConfig): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, [SYNTHETIC_SERVER, JSON.stringify(config)], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const match = /listening (\d+)/.exec(out);
      if (match?.[1]) resolve(match[1]);
    });
    child.once('exit', (code) => reject(new Error(`synthetic server exited with ${code}`)));
  });
  return { url: `http://127.0.0.1:${port}`, child };
}

/** CPU seconds a process has used (utime + stime from /proc), to show which side was busy. */
function cpuSeconds(pid: number | undefined): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
  return (Number(fields[11]) + Number(fields[12])) / 100; // clock ticks; 100 per second on Linux
}

async function serverStats(url: string): Promise<{ served: number; first_ms_sum: number; last_ms_sum: number }> {
  const response = await fetch(`${url}/stats`);
  return (await response.json()) as { served: number; first_ms_sum: number; last_ms_sum: number };
}

interface LoopDelay {
  p50: number;
  p99: number;
  max: number;
}

/** The event-loop delay of a process doing nothing, measured like the client's (resolution 10 ms), until stopped. */
function idleLoopDelay(): () => Promise<LoopDelay> {
  const code = `
    import { monitorEventLoopDelay } from 'node:perf_hooks';
    const h = monitorEventLoopDelay({ resolution: 10 });
    h.enable();
    const late = (ns) => Math.max(0, Math.round((ns / 1e6 - 10) * 100) / 100);
    process.on('SIGTERM', () => {
      process.stdout.write(JSON.stringify({ p50: late(h.percentile(50)), p99: late(h.percentile(99)), max: late(h.max) }));
      process.exit(0);
    });
    setInterval(() => undefined, 1 << 30);`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
  return async () => {
    child.kill('SIGTERM');
    await closed;
    return JSON.parse(out) as LoopDelay;
  };
}

function config(url: string, overrides: Partial<BenchConfig>): BenchConfig {
  return {
    model: 'synthetic',
    url,
    apiKey: undefined,
    kind: 'throughput',
    concurrency: 1,
    concurrencyLevels: [],
    rates: [],
    numRates: 1,
    arrival: 'constant',
    durationS: seconds,
    warmupS: 1,
    numRequests: undefined,
    timeoutS: 60,
    stream: true,
    input: { mean: 32, spread: 0 },
    output: { mean: 10, spread: 0 },
    promptsFile: undefined,
    tokenizer: 'o200k_base',
    slo: {},
    seed: 1,
    ...overrides,
  };
}

const silent = { stderr: { write: () => true }, log: { info: () => undefined }, signal: new AbortController().signal, toolVersion: 'selftest' };
const phase = (report: BenchReport) => {
  const p = report.phases[0];
  if (!p) throw new Error('no phase measured');
  return p;
};

async function streaming(): Promise<void> {
  const programmed: SyntheticConfig = { ttftMs: 200, itlMs: 100 };
  const tokens = 10;
  const server = await startServer(programmed);
  try {
    const serverCpu0 = cpuSeconds(server.child.pid);
    const stopIdle = idleLoopDelay();
    const report = await runBenchmark(config(server.url, { concurrency: users, output: { mean: tokens, spread: 0 } }), silent);
    const idle = await stopIdle();
    const serverBusy = (cpuSeconds(server.child.pid) - serverCpu0) / report.duration_s;
    const actual = await serverStats(server.url);
    const p = phase(report);
    const requestMs = programmed.ttftMs + (tokens - 1) * programmed.itlMs;
    const ideal = users / (requestMs / 1000);
    const ttft = p.latency_ms.ttft;
    const itl = p.latency_ms.itl;
    console.log(`streaming, ${users} concurrent users, ${seconds}s (programmed TTFT ${programmed.ttftMs} ms, ITL ${programmed.itlMs} ms, ${tokens} tokens)`);
    console.log(`  requests ok ${p.requests.succeeded}, failed ${p.requests.failed} ${JSON.stringify(p.errors)}`);
    console.log(`  throughput ${p.throughput.requests_per_s} req/s = ${(p.throughput.requests_per_s / ideal).toFixed(3)} of ${ideal.toFixed(0)} req/s (users / request time; the window's ramp-up and drain cost a little)`);
    console.log(`  E2E mean ${p.latency_ms.e2e?.mean} p50 ${p.latency_ms.e2e?.p50} p99 ${p.latency_ms.e2e?.p99} ms (programmed ${requestMs})`);
    console.log(`  TTFT mean ${ttft?.mean} p50 ${ttft?.p50} p99 ${ttft?.p99} ms (programmed ${programmed.ttftMs})`);
    // The server's own view (warm-up included): how late its timers fired. The rest is transport and client.
    const serverFirst = actual.first_ms_sum / actual.served;
    const serverLast = actual.last_ms_sum / actual.served;
    console.log(`  server-side first token mean ${serverFirst.toFixed(1)} ms, last token ${serverLast.toFixed(1)} ms after arrival`);
    console.log(`  client-measured minus server-side: TTFT ${((ttft?.mean ?? 0) - serverFirst).toFixed(1)} ms, E2E ${((p.latency_ms.e2e?.mean ?? 0) - serverLast).toFixed(1)} ms`);
    console.log(`  ITL mean ${itl?.mean} p50 ${itl?.p50} p99 ${itl?.p99} ms (programmed ${programmed.itlMs})`);
    console.log(`  output ${p.throughput.output_tokens_per_s} tok/s`);
    const c = report.client;
    console.log(`  client CPU ${c.cpu_user_ms + c.cpu_system_ms} ms (user ${c.cpu_user_ms}, system ${c.cpu_system_ms}) for ${c.requests} requests (warm-up included) = ${c.cpu_ms_per_request} ms/request`);
    const busy = (c.cpu_user_ms + c.cpu_system_ms) / 1000 / report.duration_s;
    console.log(`  CPU utilisation: client ${(busy * 100).toFixed(1)}%, server ${(serverBusy * 100).toFixed(1)}% of one core`);
    const lag = c.event_loop_delay_ms;
    console.log(`  client event-loop delay p50 ${lag.p50} p99 ${lag.p99} max ${lag.max} ms; an idle process meanwhile: p50 ${idle.p50} p99 ${idle.p99} max ${idle.max} ms`);
  } finally {
    server.child.kill();
  }
}

interface Measured {
  rps: number;
  /** CPU ms per request of the load-generating process. */
  cpuMs: number;
}

function autocannon(url: string, body: string): Promise<Measured> {
  const bin = createRequire(import.meta.url).resolve('autocannon/autocannon.js');
  const args = [bin, '-c', String(connections), '-d', String(seconds), '-m', 'POST', '-H', 'content-type=application/json', '-b', body, '--json', `${url}/v1/chat/completions`];
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'ignore'] });
    // Its CPU time, sampled until it exits (the last 20 ms are missed; its start-up is included).
    let cpu = 0;
    const sampler = setInterval(() => {
      try {
        cpu = cpuSeconds(child.pid);
      } catch {
        // exited between samples
      }
    }, 20);
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.on('error', reject);
    child.on('close', () => {
      clearInterval(sampler);
      try {
        const result = JSON.parse(out) as { requests: { total: number }; duration: number; non2xx: number; errors: number };
        if (result.non2xx || result.errors) reject(new Error(`autocannon saw ${result.non2xx} non-2xx responses and ${result.errors} errors`));
        resolve({ rps: result.requests.total / result.duration, cpuMs: (cpu * 1000) / result.requests.total });
      } catch (error) {
        reject(new Error(`autocannon printed no JSON result: ${(error as Error).message}`));
      }
    });
  });
}

async function nonStreaming(): Promise<void> {
  const server = await startServer({ ttftMs: 0, itlMs: 0 });
  try {
    const body = JSON.stringify({ model: 'synthetic', messages: [{ role: 'user', content: Array(32).fill('the').join(' ') }], max_tokens: 10, stream: false });
    console.log(`non-streaming, zero-latency endpoint, ${connections} connections, ${seconds}s per run, runs interleaved`);
    const ours: Measured[] = [];
    const theirs: Measured[] = [];
    for (let round = 0; round < 2; round++) {
      const report = await runBenchmark(config(server.url, { concurrency: connections, stream: false, warmupS: 0 }), silent);
      ours.push({ rps: phase(report).throughput.requests_per_s, cpuMs: report.client.cpu_ms_per_request });
      theirs.push(await autocannon(server.url, body));
    }
    const show = (ms: Measured[]): string => ms.map((m) => `${m.rps.toFixed(0)} req/s (${m.cpuMs.toFixed(3)} CPU ms/request)`).join(', ');
    const best = (ms: Measured[]): number => Math.max(...ms.map((m) => m.rps));
    const leanest = (ms: Measured[]): number => Math.min(...ms.map((m) => m.cpuMs));
    console.log(`  actorctl bench: ${show(ours)}`);
    console.log(`  autocannon:     ${show(theirs)}`);
    console.log(`  ratio of requests/s (best of each): ${(best(ours) / best(theirs)).toFixed(3)}`);
    console.log(`  ratio of CPU per request (leanest of each; robust on a busy machine): ${(leanest(ours) / leanest(theirs)).toFixed(3)}`);
  } finally {
    server.child.kill();
  }
}

await streaming();
await nonStreaming();
