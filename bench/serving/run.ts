/**
 * Serving benchmark, one run, each figure a ratio against a baseline measured in the same run:
 *
 * 1. Router overhead, tiny model: closed-loop streamed completions through the Router's HTTP API
 *    (SSE) against the same requests called on the worker directly (an actor stream from a node
 *    that joins the cluster): p50 latency (direct ÷ Router) and tokens/s (Router ÷ direct), at
 *    concurrency 1 and 8, for replies of 64 and 256 tokens; and what the Router adds to a reply, in
 *    ms. Target: both ratios at least 0.95, for replies of 256 tokens, the length of a usual chat
 *    reply; 64 shows the part of the cost that is per request. What the Router adds, on the 2-vCPU
 *    machines this runs on: its hop at a request's start and end (the request taken over HTTP and
 *    sent on as an actor call, the end written once more: about 1-1.5 ms), whose share falls as
 *    replies grow (the tiny model writes 64 tokens in some 25 ms here; a real model on a CPU takes
 *    seconds); and a few percent of the decoding. At concurrency 1 the worker idles for that hop
 *    between requests, and these virtual CPUs decode the next reply more slowly after a pause
 *    (measured with the worker on a CPU of its own: a 2 ms pause between direct calls made the next
 *    64-token reply some 1.5 ms slower, as much as the Router did); at 8 the Router's work shares
 *    the two CPUs with the worker's.
 * 2. EngineWorker against LocalModelWorker, tokens/s at concurrency 1, 8 and 32, on a model of
 *    about 177 MB generated for the run (so that decoding reads weights from memory, as with real
 *    models); both workers called directly. Target: EngineWorker 2x at 32.
 *
 * Every request is greedy (temperature 0): the generated models never end such a reply by
 * themselves, so each one is exactly max_tokens long, and this is checked.
 *
 * Each comparison runs its two sides in turns (--rounds, the order swapped every round), so that
 * other load on the machine falls on both alike; each side's figures are medians over the rounds,
 * each ratio (and the Router's added ms) the median of the rounds' own, and the machine's load average is shown.
 *
 *   node dist/bench/serving/run.js [--seconds 6] [--rounds 3] [--threads 1]
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import http from 'node:http';
import { cpus, loadavg as loadavg1, tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSystem, writeGeneratedModel, type ActorHandle, type ActorSystem, type GenerateChunk, type ModelShape } from '../../framework/index.js';
import { startChild } from '../lib/child.js';
import { closedLoop, type LoopResult } from '../lib/closed-loop.js';
import { freePort } from '../lib/free-port.js';
import { positiveIntFlag } from '../lib/int-flag.js';
import { toolScript } from '../lib/tools.js';

const SECONDS = positiveIntFlag('seconds', 6);
const ROUNDS = positiveIntFlag('rounds', 3);
const THREADS = positiveIntFlag('threads', 1);
/** Tokens per reply: router overhead (tiny model; the target is judged at the longer), worker throughput (bench model). */
const OVERHEAD_TOKENS = [64, 256];
const THROUGHPUT_TOKENS = 32;
const PROMPT = 'The';
/**
 * About 177 MB of F32 weights (6 blocks 768 wide, feed-forward 2048): well past the CPU's caches,
 * so that one sequence's decoding waits on memory as a real model's does.
 */
const BENCH_SHAPE: ModelShape = { name: 'bench', embedding: 768, layers: 6, feedForward: 2048, heads: 8, contextLength: 2048 };

const scratch = mkdtempSync(join(tmpdir(), 'serving-bench-'));
process.on('exit', () => rmSync(scratch, { recursive: true, force: true }));
process.on('SIGINT', () => process.exit(130));

interface Node {
  proc: ChildProcess;
  addr: string;
  nodeId: string;
}

/** `actorctl actor <classPath>` as a user starts it, joining the benchmark's node; resolves once it prints where it started. */
async function startActor(classPath: string, name: string, params: string[]): Promise<Node> {
  const args = [toolScript('actorctl'), 'actor', classPath, '--addr', '127.0.0.1:0', '--name', name, '--seeds', client.addr, '--', ...params];
  const { proc, match } = await startChild(args, /Started at (\S+) \(node ([0-9a-f]+)\)/);
  return { proc, addr: match[1]!, nodeId: match[2]! };
}

async function stop(node: Node): Promise<void> {
  const exited = new Promise((resolve) => node.proc.once('exit', resolve));
  node.proc.kill('SIGTERM');
  await exited;
}

/** A handle to the named actor on `node`, once this client's membership knows it. */
async function handleOn(name: string, node: Node): Promise<ActorHandle> {
  const deadline = Date.now() + 15_000;
  while (!client.instances(name).some((m) => m.id === node.nodeId)) {
    if (Date.now() > deadline) throw new Error(`the benchmark's node never saw ${name} on ${node.addr}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return client.resolve(name, { nodeId: node.nodeId });
}

const request = (tokens: number) => ({ prompt: PROMPT, temperature: 0, max_tokens: tokens });

/** One streamed request called on a worker directly; fails unless the reply is exactly `tokens` long. */
async function direct(worker: ActorHandle, tokens: number): Promise<void> {
  let got = -1;
  for await (const chunk of worker.stream<GenerateChunk>('generateStream', [request(tokens)])) {
    if (chunk.type === 'end') got = chunk.usage.completion_tokens;
    else if (chunk.type === 'error') throw new Error(`worker: ${chunk.message}`);
  }
  if (got !== tokens) throw new Error(`expected ${tokens} tokens, got ${got}`);
}

/** Keep-alive connections to the Router, one per request in flight (node:http: cheaper per request than fetch). */
const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

/** The same request through the Router's API, streamed (SSE), read to `[DONE]`. */
function viaRouter(url: string, model: string, tokens: number): Promise<void> {
  const body = JSON.stringify({ model, ...request(tokens), stream: true, stream_options: { include_usage: true } });
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (text += chunk));
      response.on('error', reject);
      response.on('end', () => {
        const usage = /"usage":\{"prompt_tokens":\d+,"completion_tokens":(\d+)/.exec(text);
        if (response.statusCode === 200 && text.endsWith('data: [DONE]\n\n') && Number(usage?.[1]) === tokens) resolve();
        else reject(new Error(`router answered ${response.statusCode}: ${text.slice(-300)}`));
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

const fmt = (n: number, digits = 0): string => n.toFixed(digits);
const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

interface Side {
  p50Ms: number;
  tokensPerSecond: number;
}

/** Two sides measured in turns: each side's medians, and the medians of the per-round ratios (B over A). */
interface Turns {
  a: Side;
  b: Side;
  /** Median over rounds of A's p50 ÷ B's p50: above 1 when B answers sooner. */
  latencyRatio: number;
  /** Median over rounds of B's tokens/s ÷ A's. */
  throughputRatio: number;
  /** Median over rounds of B's p50 less A's, in ms: what B adds to a call. */
  addedMs: number;
}

/**
 * Two ways of serving the same requests, measured in turns at one concurrency: ROUNDS rounds of
 * SECONDS/ROUNDS each, A then B, then B then A, so that the load other work puts on the machine
 * falls on both alike. The ratios are taken within each round (the two sides ran seconds apart)
 * and their median reported: a round the machine was slow in moves both sides.
 */
async function inTurns(concurrency: number, tokens: number, a: () => Promise<void>, b: () => Promise<void>): Promise<Turns> {
  const rounds: Array<[LoopResult, LoopResult]> = [];
  for (const call of [a, b]) await closedLoop(concurrency, call, 0.5); // warm-up
  for (let round = 0; round < ROUNDS; round++) {
    const swap = round % 2 === 1;
    const first = await closedLoop(concurrency, swap ? b : a, SECONDS / ROUNDS);
    const second = await closedLoop(concurrency, swap ? a : b, SECONDS / ROUNDS);
    rounds.push(swap ? [second, first] : [first, second]);
  }
  const side = (i: 0 | 1): Side => ({ p50Ms: median(rounds.map((r) => r[i].p50Ms)), tokensPerSecond: median(rounds.map((r) => r[i].perSecond * tokens)) });
  return {
    a: side(0),
    b: side(1),
    latencyRatio: median(rounds.map(([ra, rb]) => ra.p50Ms / rb.p50Ms)),
    throughputRatio: median(rounds.map(([ra, rb]) => rb.perSecond / ra.perSecond)),
    addedMs: median(rounds.map(([ra, rb]) => rb.p50Ms - ra.p50Ms)),
  };
}

async function routerOverhead(): Promise<void> {
  const worker = await startActor('framework.serving.engine.EngineWorker', 'worker', ['--model', 'tiny', '--max_new_tokens', '256', '--sequences', '8', '--threads', String(THREADS)]);
  const port = await freePort();
  const router = await startActor('framework.serving.Router', 'router', ['--http_port', String(port), '--model_name', 'tiny', '--worker_name', 'worker']);
  const url = `http://127.0.0.1:${port}/v1/completions`;
  const handle = await handleOn('worker', worker);
  // The Router takes requests once it knows the worker.
  for (let ok = false; !ok; ) ok = await viaRouter(url, 'tiny', 4).then(() => true, () => new Promise((r) => setTimeout(() => r(false), 100)));
  console.log(`\n1. Router overhead: tiny model, streamed completions, closed loop, ${SECONDS} s per point each`);
  console.log('reply tokens | concurrency | direct p50 ms | Router p50 ms | added ms | latency ratio (direct/Router) | direct tok/s | Router tok/s | tokens/s ratio (Router/direct)');
  for (const tokens of OVERHEAD_TOKENS) {
    for (const concurrency of [1, 8]) {
      const { a: d, b: r, latencyRatio, throughputRatio, addedMs } = await inTurns(concurrency, tokens, () => direct(handle, tokens), () => viaRouter(url, 'tiny', tokens));
      console.log(`${tokens} | ${concurrency} | ${fmt(d.p50Ms, 1)} | ${fmt(r.p50Ms, 1)} | ${fmt(addedMs, 2)} | ${fmt(latencyRatio, 3)} | ${fmt(d.tokensPerSecond)} | ${fmt(r.tokensPerSecond)} | ${fmt(throughputRatio, 3)}`);
    }
  }
  await stop(router);
  await stop(worker);
}

async function workerThroughput(): Promise<void> {
  const path = join(scratch, 'bench.gguf');
  const started = performance.now();
  await writeGeneratedModel(path, BENCH_SHAPE);
  const mb = statSync(path).size / 1e6;
  const common = ['--threads', String(THREADS), '--context_size', '256'];
  const [local, engine] = await Promise.all([
    startActor('framework.serving.LocalModelWorker', 'local', ['--model_name', path, ...common]),
    startActor('framework.serving.engine.EngineWorker', 'engine', ['--model', path, '--sequences', '32', '--max_new_tokens', String(THROUGHPUT_TOKENS), ...common]),
  ]);
  const [l, e] = [await handleOn('local', local), await handleOn('engine', engine)];
  console.log(`\n2. EngineWorker vs LocalModelWorker: generated model ${fmt(mb, 1)} MB (${BENCH_SHAPE.layers} blocks, ${BENCH_SHAPE.embedding} wide, F32, made in ${fmt((performance.now() - started) / 1000, 1)} s), ${THROUGHPUT_TOKENS}-token replies, ${THREADS} thread(s), ${SECONDS} s per point each`);
  console.log('concurrency | LocalModelWorker tok/s | p50 ms | EngineWorker tok/s | p50 ms | throughput ratio (Engine/Local)');
  for (const concurrency of [1, 8, 32]) {
    const { a: local, b: engine, throughputRatio } = await inTurns(concurrency, THROUGHPUT_TOKENS, () => direct(l, THROUGHPUT_TOKENS), () => direct(e, THROUGHPUT_TOKENS));
    console.log(`${concurrency} | ${fmt(local.tokensPerSecond)} | ${fmt(local.p50Ms)} | ${fmt(engine.tokensPerSecond)} | ${fmt(engine.p50Ms)} | ${fmt(throughputRatio, 2)}`);
  }
  await Promise.all([stop(local), stop(engine)]);
}

// The benchmark's own node, the seed of every process it starts: it calls the workers directly, as the Router does.
const client: ActorSystem = await startSystem({ log: () => {} });
try {
  const loadavg = (): string => loadavg1().map((l) => l.toFixed(2)).join(' ');
  console.log(`serving benchmark: ${new Date().toISOString()}, Node ${process.versions.node}, ${cpus().length} CPUs, load average ${loadavg()}`);
  await routerOverhead();
  await workerThroughput();
  console.log(`\nload average at the end: ${loadavg()}`);
} finally {
  await client.shutdown();
}
