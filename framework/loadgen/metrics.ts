/**
 * Per-phase aggregation. Percentiles come from HDR histograms (microsecond resolution, three
 * significant digits: 0.1% error at any magnitude, fixed memory whatever the request count);
 * mean and standard deviation are exact running sums.
 */
import * as hdr from 'hdr-histogram-js';
import type { RequestResult } from './client.js';
import type { Prompt, Tokenizer } from './prompts.js';
import type { Arrival, LatencySummary, PhaseReport, Slo } from './types.js';

const HOUR_US = 3_600_000_000;

export class LatencyMetric {
  private readonly histogram = hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: HOUR_US, numberOfSignificantValueDigits: 3 });
  private count = 0;
  private mean = 0;
  private m2 = 0;
  private min = Infinity;
  private max = 0;

  record(ms: number): void {
    this.histogram.recordValue(Math.min(Math.max(1, Math.round(ms * 1000)), HOUR_US));
    // Welford: numerically stable running variance.
    this.count++;
    const delta = ms - this.mean;
    this.mean += delta / this.count;
    this.m2 += delta * (ms - this.mean);
    if (ms < this.min) this.min = ms;
    if (ms > this.max) this.max = ms;
  }

  get size(): number {
    return this.count;
  }

  percentile(p: number): number {
    return this.histogram.getValueAtPercentile(p) / 1000;
  }

  summary(): LatencySummary | null {
    if (this.count === 0) return null;
    const round = (v: number): number => Math.round(v * 1000) / 1000;
    return {
      count: this.count,
      mean: round(this.mean),
      std: round(this.count > 1 ? Math.sqrt(this.m2 / (this.count - 1)) : 0),
      min: round(this.min),
      max: round(this.max),
      p50: round(this.percentile(50)),
      p90: round(this.percentile(90)),
      p95: round(this.percentile(95)),
      p99: round(this.percentile(99)),
    };
  }
}

export interface PhaseLoad {
  name: string;
  mode: 'closed' | 'open';
  concurrency?: number;
  rate?: number;
  arrival?: Arrival;
}

export class PhaseStats {
  readonly startedAt = new Date();
  firstSendMs = Infinity;
  lastEndMs = 0;
  sent = 0;
  succeeded = 0;
  failed = 0;
  inputTokens = 0;
  outputTokens = 0;
  /** The max_tokens asked for by the successful requests: more than `outputTokens` means replies stopped early. */
  requestedOutput = 0;
  good = 0;
  readonly outputSource = { tokenizer: 0, usage: 0, chunks: 0 };
  readonly errors: Record<string, number> = {};
  readonly ttft = new LatencyMetric();
  readonly tpot = new LatencyMetric();
  readonly itl = new LatencyMetric();
  readonly e2e = new LatencyMetric();
  /** Open loop: how late each request left relative to its scheduled arrival. */
  readonly lag = new LatencyMetric();
  private firstScheduled = Infinity;
  private lastScheduled = 0;
  private lastSent = 0;

  constructor(
    readonly load: PhaseLoad,
    private readonly tokenizer: Tokenizer | undefined,
    private readonly slo: Slo,
    /** Told the first error of each kind, with its detail. */
    private readonly onFirstError: (kind: string, detail: string) => void,
  ) {}

  /** Called as each request leaves; `scheduledMs` only in open loop. */
  noteSend(nowMs: number, scheduledMs?: number): void {
    this.sent++;
    if (nowMs < this.firstSendMs) this.firstSendMs = nowMs;
    this.lastSent = nowMs;
    if (scheduledMs !== undefined) {
      if (scheduledMs < this.firstScheduled) this.firstScheduled = scheduledMs;
      this.lastScheduled = scheduledMs;
      this.lag.record(Math.max(nowMs - scheduledMs, 0.001));
    }
  }

  add(result: RequestResult, prompt: Prompt): void {
    this.lastEndMs = Math.max(this.lastEndMs, result.startMs + result.e2eMs);
    if (result.error !== undefined) {
      this.failed++;
      const seen = this.errors[result.error] ?? 0;
      if (seen === 0) this.onFirstError(result.error, result.errorDetail ?? '');
      this.errors[result.error] = seen + 1;
      return;
    }
    this.succeeded++;
    const output = this.outputTokensOf(result);
    this.outputTokens += output;
    this.requestedOutput += prompt.maxTokens;
    this.inputTokens += prompt.inputTokens ?? result.usage?.promptTokens ?? 0;
    this.e2e.record(result.e2eMs);
    let tpot: number | undefined;
    if (result.ttftMs !== undefined) {
      this.ttft.record(result.ttftMs);
      for (const gap of result.itlMs) this.itl.record(gap);
      // Time per output token after the first, as vLLM and sglang define it.
      if (output > 1) {
        tpot = (result.e2eMs - result.ttftMs) / (output - 1);
        this.tpot.record(tpot);
      }
    }
    if (this.meetsSlo(result, tpot)) this.good++;
  }

  private outputTokensOf(result: RequestResult): number {
    if (this.tokenizer && result.text.length > 0) {
      this.outputSource.tokenizer++;
      return this.tokenizer.count(result.text);
    }
    if (result.usage?.completionTokens !== undefined) {
      this.outputSource.usage++;
      return result.usage.completionTokens;
    }
    this.outputSource.chunks++;
    return result.chunks;
  }

  private meetsSlo(result: RequestResult, tpot: number | undefined): boolean {
    const { ttftMs, tpotMs, e2eMs } = this.slo;
    if (ttftMs !== undefined && (result.ttftMs === undefined || result.ttftMs > ttftMs)) return false;
    if (tpotMs !== undefined && tpot !== undefined && tpot > tpotMs) return false;
    if (e2eMs !== undefined && result.e2eMs > e2eMs) return false;
    return true;
  }

  get durationS(): number {
    return this.sent === 0 ? 0 : Math.max(this.lastEndMs - this.firstSendMs, 0) / 1000;
  }

  report(): PhaseReport {
    const duration = this.durationS;
    const per = (n: number): number => (duration > 0 ? Math.round((n / duration) * 1000) / 1000 : 0);
    const open = this.load.mode === 'open';
    const span = (from: number, to: number): number => (this.sent > 1 && to > from ? Math.round(((this.sent - 1) / ((to - from) / 1000)) * 1000) / 1000 : 0);
    const hasSlo = Object.values(this.slo).some((v) => v !== undefined);
    return {
      name: this.load.name,
      mode: this.load.mode,
      concurrency: this.load.concurrency ?? null,
      target_rate: this.load.rate ?? null,
      arrival: this.load.arrival ?? null,
      started_at: this.startedAt.toISOString(),
      duration_s: Math.round(duration * 1000) / 1000,
      requests: { sent: this.sent, succeeded: this.succeeded, failed: this.failed },
      errors: { ...this.errors },
      tokens: { input: this.inputTokens, output: this.outputTokens, requested_output: this.requestedOutput, output_source: { ...this.outputSource } },
      throughput: {
        requests_per_s: per(this.succeeded),
        input_tokens_per_s: per(this.inputTokens),
        output_tokens_per_s: per(this.outputTokens),
        total_tokens_per_s: per(this.inputTokens + this.outputTokens),
      },
      arrivals: open
        ? {
            scheduled_rate: span(this.firstScheduled, this.lastScheduled),
            achieved_rate: span(this.firstSendMs, this.lastSent),
            lag_ms_p99: this.lag.size ? this.lag.percentile(99) : 0,
            lag_ms_max: this.lag.summary()?.max ?? 0,
          }
        : null,
      latency_ms: { ttft: this.ttft.summary(), tpot: this.tpot.summary(), itl: this.itl.summary(), e2e: this.e2e.summary() },
      goodput: hasSlo
        ? { slo: { ...this.slo }, requests: this.good, requests_per_s: per(this.good), fraction: this.succeeded + this.failed > 0 ? this.good / (this.succeeded + this.failed) : 0 }
        : null,
    };
  }
}
