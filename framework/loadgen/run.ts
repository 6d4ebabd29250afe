/**
 * A benchmark run: check the endpoint is reachable, warm up, then run the phases of the chosen
 * kind and build the report. The live display draws on stderr only when it is a terminal.
 */
import { randomUUID } from 'node:crypto';
import { connect } from 'node:net';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { InvalidInputError, UnavailableError } from '../../lib/errors.js';
import { chatEndpoint, createPool, type Endpoint } from './client.js';
import { PhaseStats, type PhaseLoad } from './metrics.js';
import { filePrompts, loadTokenizer, syntheticPrompts, type Tokenizer } from './prompts.js';
import { runPhase, type Driver, type PhaseLimits } from './scheduler.js';
import type { BenchConfig, BenchIO, BenchReport, PhaseReport } from './types.js';

/** Fails fast (exit 6) when nothing listens at the URL, instead of reporting N connection errors. */
function probe(url: URL, timeoutMs: number): Promise<void> {
  const port = Number(url.port || (url.protocol === 'https:' ? 443 : 80));
  const host = url.hostname.replace(/^\[|\]$/g, '');
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port });
    const fail = (reason: string): void => {
      socket.destroy();
      reject(new UnavailableError(`cannot reach --url ${url.origin}: ${reason}`, { hint: 'check the address and that the server is running' }));
    };
    socket.setTimeout(timeoutMs, () => fail(`no connection within ${timeoutMs} ms`));
    socket.once('error', (error: NodeJS.ErrnoException) => fail(error.code ?? error.message));
    socket.once('connect', () => {
      socket.destroy();
      resolve();
    });
  });
}

/** An event-loop delay sample (ns, including the 10 ms sampling resolution) as milliseconds late. */
const lateMs = (ns: number): number => Math.max(0, Math.round((ns / 1e6 - 10) * 100) / 100);

/** 1, 2, 4, ... up to and including the maximum. */
export function defaultLevels(max: number): number[] {
  const levels: number[] = [];
  for (let c = 1; c < max; c *= 2) levels.push(c);
  levels.push(max);
  return levels;
}

const fmt = (n: number, digits = 1): string => (Number.isFinite(n) ? n.toFixed(digits) : '-');

class LiveDisplay {
  private timer: NodeJS.Timeout | undefined;
  private current: PhaseStats | undefined;
  constructor(private readonly stream: BenchIO['stderr']) {
    if (stream.isTTY) {
      this.timer = setInterval(() => this.draw(), 250);
      this.timer.unref();
    }
  }
  show(stats: PhaseStats): void {
    this.current = stats;
  }
  private draw(): void {
    const s = this.current;
    if (!s) return;
    const elapsed = s.sent === 0 ? 0 : (performance.now() - s.firstSendMs) / 1000;
    const rps = elapsed > 0 ? s.succeeded / elapsed : 0;
    const ttft = s.ttft.size ? `${fmt(s.ttft.percentile(50))} ms` : '-';
    const line = `${s.load.name} · ${fmt(elapsed)}s · sent ${s.sent} ok ${s.succeeded} err ${s.failed} · ${fmt(rps)} req/s · TTFT p50 ${ttft} · ${fmt(elapsed > 0 ? s.outputTokens / elapsed : 0)} out tok/s`;
    this.stream.write(`\r\x1b[2K${line.slice(0, Math.max((this.stream.columns || 80) - 1, 10))}`);
  }
  done(): void {
    if (!this.timer) return;
    clearInterval(this.timer);
    this.stream.write('\r\x1b[2K');
  }
}

async function loadPrompts(config: BenchConfig, tokenizer: Tokenizer | undefined) {
  return config.promptsFile ? filePrompts(config.promptsFile, config, tokenizer) : syntheticPrompts(config, tokenizer);
}

export async function runBenchmark(config: BenchConfig, io: BenchIO): Promise<BenchReport> {
  const url = chatEndpoint(config.url);
  // The key becomes a header line, where a line break would forge headers; the message must not show it.
  if (config.apiKey && /[\r\n\0]/.test(config.apiKey)) throw new InvalidInputError('the API key (--api-key or $OPENAI_API_KEY) contains a line break or NUL');
  const tokenizer = await loadTokenizer(config.tokenizer);
  const prompts = await loadPrompts(config, tokenizer);
  await probe(url, Math.min(config.timeoutS * 1000 || 10_000, 10_000));

  const maxUsers = Math.max(config.concurrency, ...config.concurrencyLevels);
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    accept: config.stream ? 'text/event-stream' : 'application/json',
  };
  if (config.apiKey) headers.authorization = `Bearer ${config.apiKey}`;
  // Open loop must never queue behind a socket limit: that would turn it into a closed loop.
  const openLoop = config.kind === 'rate' || config.kind === 'sweep' || config.rates.length > 0;
  const endpoint: Endpoint = { pool: createPool(url, openLoop ? Infinity : maxUsers, headers, config.timeoutS * 1000), stream: config.stream };

  const driver: Driver = { endpoint, prompts, signal: io.signal, inFlight: new Set(), seed: config.seed, sentTotal: 0, nextPrompt: 0 };
  const cancelAll = (): void => {
    for (const cancel of [...driver.inFlight]) cancel();
  };
  io.signal.addEventListener('abort', cancelAll, { once: true });
  const limits: PhaseLimits = {
    durationMs: config.durationS === undefined ? undefined : config.durationS * 1000,
    numRequests: config.numRequests,
  };
  const live = new LiveDisplay(io.stderr);
  const started = new Date();
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  // A late event loop would delay timestamps and sends: the sign that the client, not the server, is the bottleneck.
  const loopDelay = monitorEventLoopDelay({ resolution: 10 });
  loopDelay.enable();
  const phases: PhaseReport[] = [];
  const run = async (load: PhaseLoad, phaseLimits = limits): Promise<PhaseStats> => {
    const stats = new PhaseStats(load, tokenizer, config.slo, (kind, detail) => {
      // A server may echo the credential in an error body; it must not reach the log.
      const safe = config.apiKey ? detail.replaceAll(config.apiKey, '<api key>') : detail;
      io.log.info(`${load.name}: first ${kind} error: ${safe.slice(0, 300)}`);
    });
    live.show(stats);
    await runPhase(driver, stats, phaseLimits);
    return stats;
  };
  const measured = async (load: PhaseLoad): Promise<PhaseReport> => {
    const report = (await run(load)).report();
    phases.push(report);
    return report;
  };

  let warmup: BenchReport['warmup'] = null;
  try {
    const plan = firstLoad(config);
    if (config.warmupS > 0) {
      const stats = await run({ ...plan, name: 'warmup' }, { durationMs: config.warmupS * 1000, numRequests: undefined });
      warmup = { duration_s: Math.round(stats.durationS * 1000) / 1000, requests: stats.sent, failed: stats.failed };
    }
    switch (config.kind) {
      case 'throughput':
        await measured(plan);
        break;
      case 'csweep':
        for (const c of config.concurrencyLevels.length ? config.concurrencyLevels : defaultLevels(config.concurrency)) {
          if (io.signal.aborted) break;
          await measured({ name: `concurrency ${c}`, mode: 'closed', concurrency: c });
        }
        break;
      case 'rate':
        for (const rate of config.rates) {
          if (io.signal.aborted) break;
          await measured({ name: `rate ${rate} req/s`, mode: 'open', rate, arrival: config.arrival });
        }
        break;
      case 'sweep': {
        // Find the saturation throughput closed-loop, then sweep open-loop rates up to it.
        const max = await measured(plan);
        const ceiling = max.throughput.requests_per_s;
        for (let i = 1; i <= config.numRates && ceiling > 0 && !io.signal.aborted; i++) {
          const rate = Math.round(((ceiling * i) / config.numRates) * 1000) / 1000;
          await measured({ name: `rate ${i}/${config.numRates} (${rate} req/s)`, mode: 'open', rate, arrival: config.arrival });
        }
        break;
      }
    }
  } finally {
    live.done();
    loopDelay.disable();
    io.signal.removeEventListener('abort', cancelAll);
    endpoint.pool.destroy();
  }
  const cpu = process.cpuUsage(cpu0);
  const { apiKey, ...rest } = config;
  return {
    schema: 'actorctl.bench/v1',
    tool_version: io.toolVersion,
    run_id: randomUUID(),
    started_at: started.toISOString(),
    ended_at: new Date().toISOString(),
    duration_s: Math.round(performance.now() - t0) / 1000,
    config: {
      ...rest,
      durationS: rest.durationS ?? null,
      numRequests: rest.numRequests ?? null,
      promptsFile: rest.promptsFile ?? null,
      api_key_set: apiKey !== undefined && apiKey !== '',
      endpoint: url.href,
    },
    warmup,
    phases,
    client: {
      cpu_user_ms: Math.round(cpu.user / 1000),
      cpu_system_ms: Math.round(cpu.system / 1000),
      requests: driver.sentTotal,
      cpu_ms_per_request: driver.sentTotal ? Math.round(((cpu.user + cpu.system) / 1000 / driver.sentTotal) * 1000) / 1000 : 0,
      event_loop_delay_ms: { p50: lateMs(loopDelay.percentile(50)), p99: lateMs(loopDelay.percentile(99)), max: lateMs(loopDelay.max) },
    },
  };
}

/** The load of `throughput`, of `sweep`'s discovery and of every warm-up: the first rate if given, else the concurrency. */
function firstLoad(config: BenchConfig): PhaseLoad {
  const rate = config.rates[0];
  if (rate !== undefined && (config.kind === 'throughput' || config.kind === 'rate')) return { name: `rate ${rate} req/s`, mode: 'open', rate, arrival: config.arrival };
  const c = config.kind === 'csweep' && config.concurrencyLevels.length ? (config.concurrencyLevels[0] as number) : config.concurrency;
  return { name: config.kind === 'sweep' ? `max throughput (${c} users)` : `concurrency ${c}`, mode: 'closed', concurrency: c };
}
