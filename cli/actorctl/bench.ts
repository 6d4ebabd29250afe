/**
 * `actorctl bench <model> --url <base URL>`: reads and checks the options, runs the engine's load
 * generator, and prints its report: the phase rows (`--format table|jsonl|csv`) or the whole
 * report (`--format json`, and `--output FILE`).
 */
import { constants, statSync } from 'node:fs';
import { access } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { assertReplaceable, writeFileDurably } from '../../lib/durable.js';
import { InvalidInputError, UnavailableError } from '../../lib/errors.js';
import { installation } from '../../lib/install.js';
import { credentialQueryParameters, redactQueryCredentials, redactUserInfo } from '../../lib/redact.js';
import type { Column, Row } from '../../lib/output.js';
import { ARRIVALS, BENCH_KINDS, MAX_RATE, MAX_USERS, TOKENIZERS, runBenchmark, type BenchConfig, type BenchReport, type LatencySummary, type Slo } from '../../framework/index.js';
import { parseDuration, type ParsedArgs } from '../kit/flags.js';
import { defineCommand, type CommandContext } from '../kit/program.js';
import { FORMAT_OPTIONS, printRows, rowView, type RowView } from '../kit/render.js';

const API_KEY_ENV = 'OPENAI_API_KEY';

/** `ttft=200ms,tpot=50ms,e2e=5s`. */
function slo(value: string | undefined): Slo {
  if (value === undefined) return {};
  const keys: Record<string, keyof Slo> = { ttft: 'ttftMs', tpot: 'tpotMs', e2e: 'e2eMs' };
  const result: Slo = {};
  for (const part of value.split(',')) {
    const [name, limit] = part.split('=').map((s) => s.trim());
    const key = keys[name ?? ''];
    if (!key || limit === undefined) {
      throw new InvalidInputError(`invalid --slo ${JSON.stringify(part)}: expected NAME=DURATION with NAME one of ttft, tpot, e2e`);
    }
    result[key] = parseDuration(`--slo ${name}`, limit, 0);
  }
  return result;
}

interface BenchFlags {
  config: BenchConfig;
  /** The key came from `--api-key`: other users see it in the process list. */
  keyInArgv: boolean;
  view: RowView;
  output: string | undefined;
}

function benchFlags(args: ParsedArgs): BenchFlags {
  const model = args.requiredPositional(0, 'MODEL');
  const text = args.required('--url', 'e.g. --url http://localhost:8000');
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new InvalidInputError(`invalid --url ${JSON.stringify(redactQueryCredentials(redactUserInfo(text)))}: not a URL`, { hint: 'e.g. --url http://localhost:8000' });
  }
  // Credentials in a URL would sit in argv, in every request line and in the report; the key has its own way in.
  const inQuery = credentialQueryParameters(url);
  const where = url.username || url.password ? 'user:password@ before the host' : inQuery.length ? `query parameter${inQuery.length > 1 ? 's' : ''} ${inQuery.join(', ')}` : undefined;
  if (where) throw new InvalidInputError(`--url must not contain credentials: ${where}`, { hint: `pass the key in $${API_KEY_ENV}` });
  // Only the scheme is quoted: `user:secret@host`, typed without one, is a URL of scheme `user:` whose path is the secret.
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new InvalidInputError(`invalid --url: scheme ${JSON.stringify(url.protocol)}; use http:// or https://`);
  const kind = args.choice('--kind', BENCH_KINDS);
  const rates = args.numbers('--rate', { min: 0, exclusive: true, max: MAX_RATE });
  if (kind === 'rate' && rates.length === 0) throw new InvalidInputError('--kind rate needs --rate R[,R...]');
  if ((kind === 'csweep' || kind === 'sweep') && rates.length > 0) throw new InvalidInputError(`--rate is not used by --kind ${kind}`, { hint: 'use --kind rate or throughput' });
  if (kind !== 'csweep' && args.given('--concurrency-levels')) throw new InvalidInputError('--concurrency-levels is only used by --kind csweep');
  if (kind === 'throughput' && rates.length > 1) throw new InvalidInputError('--rate takes one value with --kind throughput', { hint: 'use --kind rate to run one phase per rate' });
  const numRequests = args.number('--num-requests', undefined, { integer: true, min: 1 });
  // Without any bound a phase would run forever; --num-requests alone bounds by count.
  const durationMs = args.duration('--duration', numRequests === undefined ? 60_000 : undefined);
  const keyInArgv = args.text('--api-key') !== undefined;
  const apiKey = args.text('--api-key') ?? (process.env[API_KEY_ENV] || undefined);
  const config: BenchConfig = {
    model,
    url: url.href,
    apiKey,
    kind,
    concurrency: args.number('--concurrency', 16, { integer: true, min: 1, max: MAX_USERS }),
    concurrencyLevels: args.numbers('--concurrency-levels', { integer: true, min: 1, max: MAX_USERS }),
    rates,
    numRates: args.number('--num-rates', 10, { integer: true, min: 1 }),
    arrival: args.choice('--arrival', ARRIVALS),
    durationS: durationMs === undefined ? undefined : durationMs / 1000,
    warmupS: args.duration('--warmup', 0, { min: 0 }) / 1000,
    numRequests,
    timeoutS: args.duration('--timeout', 120_000, { min: 0 }) / 1000,
    stream: args.has('--stream'),
    input: { mean: args.number('--input-tokens', 256, { integer: true, min: 1 }), spread: args.number('--input-spread', 0, { min: 0 }) },
    output: { mean: args.number('--output-tokens', 128, { integer: true, min: 1 }), spread: args.number('--output-spread', 0, { min: 0 }) },
    promptsFile: args.text('--prompts'),
    tokenizer: args.choice('--tokenizer', TOKENIZERS),
    slo: slo(args.text('--slo')),
    seed: args.number('--seed', 1, { integer: true }),
  };
  return { config, keyInArgv, view: rowView(args), output: args.text('--output') };
}

/** Checked before the run, so that a typo in --output does not cost a whole benchmark. */
async function checkWritable(path: string): Promise<void> {
  assertReplaceable(path, `--output ${path}`);
  if (statSync(path, { throwIfNoEntry: false })?.isDirectory()) throw new InvalidInputError(`--output ${path}: a directory; name the report's file`);
  try {
    await access(dirname(resolve(path)), constants.W_OK);
  } catch (error) {
    throw new InvalidInputError(`cannot write --output ${path}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message} on its directory`);
  }
}

function writeReport(path: string, report: BenchReport): void {
  try {
    writeFileDurably(path, `${JSON.stringify(report, null, 2)}\n`);
  } catch (error) {
    throw new InvalidInputError(`cannot write --output ${path}: ${(error as Error).message}`);
  }
}

/** Phase rows: tables show rounded figures (`-` for what was not measured), the other formats the numbers. */
const PHASE_COLUMNS: Column[] = [
  { key: 'phase' },
  { key: 'ok' },
  { key: 'err' },
  { key: 'requests_per_s', title: 'req/s' },
  { key: 'ttft_p50_ms', title: 'ttft p50' },
  { key: 'ttft_p99_ms', title: 'ttft p99' },
  { key: 'tpot_mean_ms', title: 'tpot mean' },
  { key: 'itl_p50_ms', title: 'itl p50' },
  { key: 'e2e_p50_ms', title: 'e2e p50' },
  { key: 'e2e_p99_ms', title: 'e2e p99' },
  { key: 'output_tokens_per_s', title: 'out tok/s' },
  { key: 'total_tokens_per_s', title: 'total tok/s' },
];
const GOODPUT_COLUMN: Column = { key: 'goodput_per_s', title: 'goodput/s' };
/** Tables say the errors below the rows; the other formats carry them in each row. */
const ERRORS_COLUMN: Column = { key: 'errors' };

function phaseRows(report: BenchReport, table: boolean): Row[] {
  const figure = (value: number | undefined, digits = 1): Row[string] => {
    if (!table) return value ?? null;
    return value === undefined || !Number.isFinite(value) ? '-' : value.toFixed(digits);
  };
  const ms = (summary: LatencySummary | null, stat: 'p50' | 'p99' | 'mean'): Row[string] => figure(summary?.[stat]);
  return report.phases.map((p) => ({
    phase: p.name,
    ok: p.requests.succeeded,
    err: p.requests.failed,
    requests_per_s: figure(p.throughput.requests_per_s, 2),
    ttft_p50_ms: ms(p.latency_ms.ttft, 'p50'),
    ttft_p99_ms: ms(p.latency_ms.ttft, 'p99'),
    tpot_mean_ms: ms(p.latency_ms.tpot, 'mean'),
    itl_p50_ms: ms(p.latency_ms.itl, 'p50'),
    e2e_p50_ms: ms(p.latency_ms.e2e, 'p50'),
    e2e_p99_ms: ms(p.latency_ms.e2e, 'p99'),
    output_tokens_per_s: figure(p.throughput.output_tokens_per_s),
    total_tokens_per_s: figure(p.throughput.total_tokens_per_s),
    goodput_per_s: figure(p.goodput?.requests_per_s, 2),
    errors: p.errors,
  }));
}

function printReport(ctx: CommandContext, view: RowView, report: BenchReport): void {
  if (view.format === 'json') {
    ctx.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    return;
  }
  const table = view.format === 'table';
  const goodput = report.phases.some((p) => p.goodput !== null) ? [GOODPUT_COLUMN] : [];
  printRows(ctx, view, [...PHASE_COLUMNS, ...goodput, ...(table ? [] : [ERRORS_COLUMN])], phaseRows(report, table), 'no phase measured');
  if (!table) return;
  let notes = '(latencies in ms)\n';
  for (const p of report.phases) {
    const kinds = Object.entries(p.errors);
    if (kinds.length) notes += `errors in ${p.name}: ${kinds.map(([k, n]) => `${k} ${n}`).join(', ')}\n`;
  }
  const c = report.client;
  ctx.stdout.write(`${notes}total ${report.duration_s}s · ${c.requests} requests · client CPU ${c.cpu_ms_per_request} ms/request\n`);
}

export const benchCommand = defineCommand({
  name: 'bench <model>',
  description: 'load-test a chat-completions endpoint',
  options: [
    { flags: '--url <base URL>', description: `server base URL, without credentials (the key goes in $${API_KEY_ENV}); requests go to <url>/v1/chat/completions` },
    { flags: '--api-key <key>', description: `bearer token (prefer $${API_KEY_ENV}, which keeps it out of the process list)` },
    { flags: '--kind <kind>', description: BENCH_KINDS.join(' | '), default: 'throughput' },
    { flags: '--concurrency <n>', description: 'closed-loop virtual users (csweep: the largest level)', default: 16 },
    { flags: '--concurrency-levels <list>', description: 'csweep levels, e.g. 1,8,64 (default 1,2,4,... up to --concurrency)' },
    { flags: '--rate <req/s>', description: 'open-loop arrival rate; --kind rate takes a list 1,2,4' },
    { flags: '--arrival <process>', description: `open-loop arrivals: ${ARRIVALS.join(' | ')}`, default: 'poisson' },
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
    { flags: '--tokenizer <name>', description: `${TOKENIZERS.join(' | ')} (usage: the server's counts)`, default: 'o200k_base' },
    { flags: '--slo <limits>', description: 'goodput limits, e.g. ttft=500ms,tpot=50ms,e2e=10s' },
    { flags: '--seed <n>', description: 'seed of prompts and Poisson arrivals', default: 1 },
    { flags: '--output <file>', description: 'write the JSON report here' },
    { ...FORMAT_OPTIONS[0]!, description: 'table | jsonl | csv: one row per phase; json: the whole report' },
    ...FORMAT_OPTIONS.slice(1),
  ],
  examples: [
    'actorctl bench my-model --url http://localhost:8000 --concurrency 32 --duration 60s',
    'actorctl bench my-model --url http://localhost:8000 --kind rate --rate 1,2,4,8 --duration 30s --output report.json',
  ],
  flags: benchFlags,
  async run(ctx, { config, keyInArgv, view, output }) {
    if (keyInArgv) ctx.log.warn(`--api-key on the command line is visible to other users (ps, shell history); prefer $${API_KEY_ENV}`);
    if (output !== undefined) await checkWritable(output);
    const report = await runBenchmark(config, { stderr: ctx.stderr, log: ctx.log, signal: ctx.signal, toolVersion: installation().version });
    if (output !== undefined) writeReport(output, report);
    printReport(ctx, view, report);
    if (ctx.signal.aborted) throw ctx.signal.reason;
    const phases = report.phases;
    if (phases.length > 0 && phases.every((p) => p.requests.succeeded === 0)) {
      const errors: Record<string, number> = {};
      for (const p of phases) for (const [kind, n] of Object.entries(p.errors)) errors[kind] = (errors[kind] ?? 0) + n;
      const summary = Object.entries(errors).map(([kind, n]) => `${kind} ${n}`).join(', ') || 'none sent';
      // The first error of each kind is logged at info only: below it, nothing above says what went wrong.
      const where = ctx.log.enabled('info') ? 'the first error of each kind is above' : 'run with --log-level info to see the first error of each kind';
      throw new UnavailableError(`no request succeeded (${summary})`, { hint: `${where}; --timeout bounds each request` });
    }
  },
});
