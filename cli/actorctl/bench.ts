/**
 * `actorctl bench <model> --url <base URL>`: parses and checks the options, then hands the run
 * to the optional load-generator module (bench/loadgen/), which it loads only now so that
 * actorctl works, and says what is missing, when the module is not installed.
 */
import { constants } from 'node:fs';
import { access, rename, writeFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type * as Loadgen from '../../bench/loadgen/index.js';
import type { Arrival, BenchConfig, BenchKind, BenchReport, Slo, TokenizerName } from '../../bench/loadgen/index.js';
import { InvalidInputError, UnavailableError } from '../kit/errors.js';
import { oneOf } from '../kit/flags.js';
import type { Logger } from '../kit/log.js';
import type { CommandSpec } from '../kit/program.js';
import { productVersion } from '../kit/version.js';

const KINDS: readonly BenchKind[] = ['throughput', 'sweep', 'csweep', 'rate'];
const ARRIVALS: readonly Arrival[] = ['poisson', 'constant'];
const TOKENIZERS: readonly TokenizerName[] = ['o200k_base', 'cl100k_base', 'p50k_base', 'r50k_base', 'usage'];
const FORMATS = ['table', 'json'] as const;

/** Where the module is by default, next to this file in the build; the variable points elsewhere (tests, packagers). */
const MODULE_ENV = 'ACTORCTL_BENCH_MODULE';
const API_KEY_ENV = 'OPENAI_API_KEY';

function number(flag: string, value: unknown, { integer = false, min = 0, exclusive = false } = {}): number {
  const n = typeof value === 'number' ? value : typeof value === 'string' && value.trim() !== '' ? Number(value) : NaN;
  const ok = Number.isFinite(n) && (exclusive ? n > min : n >= min) && (!integer || Number.isInteger(n));
  if (!ok) {
    const what = `${integer ? 'an integer' : 'a number'} ${exclusive ? '>' : '≥'} ${min}`;
    throw new InvalidInputError(`invalid ${flag} ${JSON.stringify(String(value))}: expected ${what}`);
  }
  return n;
}

function list(flag: string, value: unknown, options: Parameters<typeof number>[2]): number[] {
  return String(value)
    .split(',')
    .map((part) => number(flag, part.trim(), options));
}

const UNITS: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600 };

/** `30s`, `500ms`, `2m`, `1h`, or a bare number of seconds. */
function seconds(flag: string, value: unknown): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(String(value).trim());
  if (!match) throw new InvalidInputError(`invalid ${flag} ${JSON.stringify(String(value))}: expected a duration such as 30s, 500ms, 2m`);
  return Number(match[1]) * (UNITS[match[2] ?? 's'] as number);
}

/** `ttft=200ms,tpot=50ms,e2e=5s`. */
function slo(value: unknown): Slo {
  if (value === undefined) return {};
  const keys: Record<string, keyof Slo> = { ttft: 'ttftMs', tpot: 'tpotMs', e2e: 'e2eMs' };
  const result: Slo = {};
  for (const part of String(value).split(',')) {
    const [name, limit] = part.split('=').map((s) => s.trim());
    const key = keys[name ?? ''];
    if (!key || limit === undefined) {
      throw new InvalidInputError(`invalid --slo ${JSON.stringify(part)}: expected NAME=DURATION with NAME one of ttft, tpot, e2e`);
    }
    result[key] = seconds(`--slo ${name}`, limit) * 1000;
  }
  return result;
}

function single<T>(value: T | T[]): T {
  return Array.isArray(value) ? (value[value.length - 1] as T) : value;
}

function benchConfig(model: string, raw: Record<string, unknown>, env: NodeJS.ProcessEnv): BenchConfig {
  const o: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(raw)) o[key] = single(value);
  if (o.url === undefined || o.url === true) throw new InvalidInputError('--url is required', { hint: 'e.g. --url http://localhost:8000' });
  let url: URL;
  try {
    url = new URL(String(o.url));
  } catch {
    throw new InvalidInputError(`invalid --url ${JSON.stringify(String(o.url))}: not a URL`, { hint: 'e.g. --url http://localhost:8000' });
  }
  // Credentials in a URL would sit in argv and in the report; the key has its own way in.
  if (url.username || url.password) throw new InvalidInputError('--url must not contain credentials', { hint: `pass the key in $${API_KEY_ENV}` });
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new InvalidInputError(`invalid --url ${JSON.stringify(String(o.url))}: use http:// or https://`);
  const kind = oneOf(o.kind, KINDS, '--kind');
  const rates = o.rate === undefined ? [] : list('--rate', o.rate, { min: 0, exclusive: true });
  if (kind === 'rate' && rates.length === 0) throw new InvalidInputError('--kind rate needs --rate R[,R...]');
  if ((kind === 'csweep' || kind === 'sweep') && rates.length > 0) throw new InvalidInputError(`--rate is not used by --kind ${kind}`, { hint: 'use --kind rate or throughput' });
  if (kind !== 'csweep' && o.concurrencyLevels !== undefined) throw new InvalidInputError('--concurrency-levels is only used by --kind csweep');
  if (kind === 'throughput' && rates.length > 1) throw new InvalidInputError('--rate takes one value with --kind throughput', { hint: 'use --kind rate to run one phase per rate' });
  const numRequests = o.numRequests === undefined ? undefined : number('--num-requests', o.numRequests, { integer: true, min: 1 });
  // Without any bound a phase would run forever; --num-requests alone bounds by count.
  const durationS = o.duration === undefined ? (numRequests === undefined ? 60 : undefined) : seconds('--duration', o.duration);
  if (durationS === 0) throw new InvalidInputError(`invalid --duration ${JSON.stringify(String(o.duration))}: a phase needs time to run`);
  const apiKey = o.apiKey !== undefined ? String(o.apiKey) : env[API_KEY_ENV] || undefined;
  return {
    model,
    url: url.href,
    apiKey,
    kind,
    concurrency: number('--concurrency', o.concurrency, { integer: true, min: 1 }),
    concurrencyLevels: o.concurrencyLevels === undefined ? [] : list('--concurrency-levels', o.concurrencyLevels, { integer: true, min: 1 }),
    rates,
    numRates: number('--num-rates', o.numRates, { integer: true, min: 1 }),
    arrival: oneOf(o.arrival, ARRIVALS, '--arrival'),
    durationS,
    warmupS: seconds('--warmup', o.warmup),
    numRequests,
    timeoutS: seconds('--timeout', o.timeout),
    stream: o.stream !== false,
    input: { mean: number('--input-tokens', o.inputTokens, { integer: true, min: 1 }), spread: number('--input-spread', o.inputSpread) },
    output: { mean: number('--output-tokens', o.outputTokens, { integer: true, min: 1 }), spread: number('--output-spread', o.outputSpread) },
    promptsFile: o.prompts === undefined ? undefined : String(o.prompts),
    tokenizer: oneOf(o.tokenizer, TOKENIZERS, '--tokenizer'),
    slo: slo(o.slo),
    seed: number('--seed', o.seed, { integer: true }),
  };
}

async function loadModule(env: NodeJS.ProcessEnv, log: Logger): Promise<typeof Loadgen> {
  const override = env[MODULE_ENV];
  const location = override ? pathToFileURL(resolve(override)) : new URL('../../bench/loadgen/index.js', import.meta.url);
  try {
    return (await import(location.href)) as typeof Loadgen;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ERR_MODULE_NOT_FOUND') throw error;
    const message = (error as Error).message;
    log.debug(message);
    const path = fileURLToPath(location);
    if (!message.startsWith(`Cannot find module '${path}'`)) {
      // The module is there but something it imports is not (a package left out of node_modules).
      throw new UnavailableError(`module 'bench/loadgen' cannot load: ${message.split('\n')[0]}`, {
        hint: 'install the dependencies: `npm install` in the agent-infra checkout',
      });
    }
    throw new UnavailableError(`module 'bench/loadgen' not found: the load generator is optional and not installed here (looked for ${path})`, {
      hint: 'install it with the default build: `npm run build` (tsc -p .) in the agent-infra checkout writes dist/bench/loadgen/',
    });
  }
}

/** Checked before the run, so that a typo in --output does not cost a whole benchmark. */
async function checkWritable(path: string): Promise<void> {
  try {
    await access(dirname(resolve(path)), constants.W_OK);
  } catch (error) {
    throw new InvalidInputError(`cannot write --output ${path}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message} on its directory`);
  }
}

async function writeReport(path: string, report: BenchReport): Promise<void> {
  const temp = `${path}.tmp-${process.pid}`;
  try {
    await writeFile(temp, `${JSON.stringify(report, null, 2)}\n`);
    await rename(temp, path);
  } catch (error) {
    throw new InvalidInputError(`cannot write --output ${path}: ${(error as Error).message}`);
  }
}

export const benchCommand: CommandSpec = {
  name: 'bench <model>',
  description: 'load-test a chat-completions endpoint (optional module bench/loadgen)',
  options: [
    { flags: '--url <base URL>', description: 'server base URL; requests go to <url>/v1/chat/completions' },
    { flags: '--api-key <key>', description: `bearer token (prefer $${API_KEY_ENV}, which keeps it out of the process list)` },
    { flags: '--kind <kind>', description: 'throughput | sweep | csweep | rate', default: 'throughput' },
    { flags: '--concurrency <n>', description: 'closed-loop virtual users (csweep: the largest level)', default: 16 },
    { flags: '--concurrency-levels <list>', description: 'csweep levels, e.g. 1,8,64 (default 1,2,4,... up to --concurrency)' },
    { flags: '--rate <req/s>', description: 'open-loop arrival rate; --kind rate takes a list 1,2,4' },
    { flags: '--arrival <process>', description: 'open-loop arrivals: poisson | constant', default: 'poisson' },
    { flags: '--num-rates <n>', description: 'sweep: rate phases after the throughput discovery', default: 10 },
    { flags: '--duration <time>', description: 'per phase, e.g. 30s, 2m (default 60s unless --num-requests)' },
    { flags: '--warmup <time>', description: 'unmeasured load before the first phase', default: '0s' },
    { flags: '--num-requests <n>', description: 'per phase; with --duration, whichever comes first' },
    { flags: '--timeout <time>', description: 'per-request limit (0 = none)', default: '120s' },
    { flags: '--stream', description: 'stream responses over SSE (default)' },
    { flags: '--no-stream', description: 'ask for whole responses (no TTFT/TPOT/ITL)' },
    { flags: '--input-tokens <n>', description: 'synthetic prompt length, mean', default: 256 },
    { flags: '--input-spread <n>', description: 'synthetic prompt length, standard deviation', default: 0 },
    { flags: '--output-tokens <n>', description: 'max_tokens per request, mean', default: 128 },
    { flags: '--output-spread <n>', description: 'max_tokens per request, standard deviation', default: 0 },
    { flags: '--prompts <file>', description: 'JSONL ({prompt} or {messages}) or ShareGPT prompts instead of synthetic ones' },
    { flags: '--tokenizer <name>', description: 'o200k_base | cl100k_base | p50k_base | r50k_base | usage (server counts)', default: 'o200k_base' },
    { flags: '--slo <limits>', description: 'goodput limits, e.g. ttft=500ms,tpot=50ms,e2e=10s' },
    { flags: '--seed <n>', description: 'seed of prompts and Poisson arrivals', default: 1 },
    { flags: '--output <file>', description: 'write the JSON report here' },
    { flags: '--format <format>', description: 'stdout: table | json (the report)', default: 'table' },
  ],
  examples: [
    'actorctl bench my-model --url http://localhost:8000 --concurrency 32 --duration 60s',
    'actorctl bench my-model --url http://localhost:8000 --kind rate --rate 1,2,4,8 --duration 30s --output report.json',
  ],
  async run(ctx, args) {
    const model = String(args.positional[0]);
    const format = oneOf(single(args.options.format), FORMATS, '--format');
    const config = benchConfig(model, args.options, process.env);
    const output = single(args.options.output);
    if (output !== undefined) await checkWritable(String(output));
    const loadgen = await loadModule(process.env, ctx.log);
    const report = await loadgen.runBenchmark(config, { stderr: ctx.stderr, log: ctx.log, signal: ctx.signal, toolVersion: productVersion() });
    if (output !== undefined) await writeReport(String(output), report);
    ctx.stdout.write(format === 'json' ? `${JSON.stringify(report, null, 2)}\n` : loadgen.renderReportTable(report));
    if (ctx.signal.aborted) throw ctx.signal.reason;
    const phases = report.phases;
    if (phases.length > 0 && phases.every((p) => p.requests.succeeded === 0)) {
      const errors: Record<string, number> = {};
      for (const p of phases) for (const [kind, n] of Object.entries(p.errors)) errors[kind] = (errors[kind] ?? 0) + n;
      const summary = Object.entries(errors).map(([kind, n]) => `${kind} ${n}`).join(', ') || 'none sent';
      throw new UnavailableError(`no request succeeded (${summary})`, { hint: 'see the errors above; --timeout bounds each request' });
    }
  },
};
