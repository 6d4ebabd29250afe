/**
 * What the load generator behind `actorctl bench` takes and returns, and the choices of its
 * options: types and constants only, so that the command line's --help loads nothing of it.
 */

export const BENCH_KINDS = ['throughput', 'sweep', 'csweep', 'rate'] as const;
export type BenchKind = (typeof BENCH_KINDS)[number];

export const ARRIVALS = ['poisson', 'constant'] as const;
export type Arrival = (typeof ARRIVALS)[number];

/**
 * The most closed-loop users and open-loop arrivals per second a run takes. Each user holds a
 * connection, and an open loop one per request in flight: past this a process runs out of file
 * descriptors long before the server is measured, and an arrival rate far beyond what one client
 * can send only queues requests in memory until it runs out.
 */
export const MAX_USERS = 100_000;
export const MAX_RATE = 100_000;

/** gpt-tokenizer encodings, or `usage` to take counts from the server's `usage` object only. */
export const TOKENIZERS = ['o200k_base', 'cl100k_base', 'p50k_base', 'r50k_base', 'usage'] as const;
export type TokenizerName = (typeof TOKENIZERS)[number];

/** A normal distribution of token counts, clamped to at least 1. */
export interface TokenTarget {
  mean: number;
  spread: number;
}

export interface Slo {
  ttftMs?: number;
  tpotMs?: number;
  e2eMs?: number;
}

export interface BenchConfig {
  model: string;
  /** Base URL; requests go to `<url>/v1/chat/completions` unless it already ends in `/chat/completions`. */
  url: string;
  /** Sent as a bearer token; never printed, logged or written to the report. */
  apiKey: string | undefined;
  kind: BenchKind;
  /** Closed-loop virtual users (also the throughput-discovery load of `sweep`). */
  concurrency: number;
  /** `csweep` levels; empty means 1, 2, 4, ... up to `concurrency`. */
  concurrencyLevels: number[];
  /** Open-loop request rates per second (`throughput` with one rate, `rate` with several). */
  rates: number[];
  /** Number of rate phases a `sweep` runs after its throughput discovery. */
  numRates: number;
  arrival: Arrival;
  /** Seconds per phase; undefined when only `numRequests` bounds a phase. */
  durationS: number | undefined;
  warmupS: number;
  /** Requests per phase; undefined when only the duration bounds a phase. */
  numRequests: number | undefined;
  /** Per-request limit in seconds (0: none), so a stalled server ends a request rather than the run. */
  timeoutS: number;
  stream: boolean;
  input: TokenTarget;
  output: TokenTarget;
  /** JSONL prompts or ShareGPT conversations instead of synthetic prompts. */
  promptsFile: string | undefined;
  tokenizer: TokenizerName;
  slo: Slo;
  seed: number;
}

export interface LatencySummary {
  count: number;
  mean: number;
  std: number;
  min: number;
  max: number;
  p50: number;
  p90: number;
  p95: number;
  p99: number;
}

export interface PhaseReport {
  name: string;
  mode: 'closed' | 'open';
  concurrency: number | null;
  target_rate: number | null;
  arrival: Arrival | null;
  started_at: string;
  /** From the phase's first request to its last completion, in seconds. */
  duration_s: number;
  requests: { sent: number; succeeded: number; failed: number };
  errors: Record<string, number>;
  /** `requested_output`: the max_tokens of the successful requests; above `output` when replies stopped early. */
  tokens: { input: number; output: number; requested_output: number; output_source: { tokenizer: number; usage: number; chunks: number } };
  throughput: {
    requests_per_s: number;
    input_tokens_per_s: number;
    output_tokens_per_s: number;
    total_tokens_per_s: number;
  };
  /** Open loop only: how well the arrival schedule was held. */
  arrivals: { scheduled_rate: number; achieved_rate: number; lag_ms_p99: number; lag_ms_max: number } | null;
  latency_ms: { ttft: LatencySummary | null; tpot: LatencySummary | null; itl: LatencySummary | null; e2e: LatencySummary | null };
  goodput: { slo: Slo; requests: number; requests_per_s: number; fraction: number } | null;
}

export interface BenchReport {
  schema: 'actorctl.bench/v1';
  tool_version: string;
  run_id: string;
  started_at: string;
  ended_at: string;
  duration_s: number;
  /** The configuration without the key; unset options are null, so every field is always there. */
  config: { [K in Exclude<keyof BenchConfig, 'apiKey'>]: Exclude<BenchConfig[K], undefined> | null } & { api_key_set: boolean; endpoint: string };
  warmup: { duration_s: number; requests: number; failed: number } | null;
  phases: PhaseReport[];
  /** The load generator's own cost; a high event-loop delay means it, not the server, limited the run. */
  client: {
    cpu_user_ms: number;
    cpu_system_ms: number;
    requests: number;
    cpu_ms_per_request: number;
    event_loop_delay_ms: { p50: number; p99: number; max: number };
  };
}

export interface BenchIO {
  stderr: { write(chunk: string): unknown; isTTY?: boolean; columns?: number };
  /** Diagnostics such as the first error of each kind (shown with `--log-level info`). */
  log: { info(message: string): void };
  signal: AbortSignal;
  toolVersion: string;
}
