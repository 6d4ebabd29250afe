/**
 * Drives one phase: closed loop (N virtual users, each sending its next request when the last
 * one ends) or open loop (arrivals on a constant or Poisson schedule, whatever the server's
 * pace). Open-loop arrivals are computed on an absolute timeline, so a late timer makes the
 * next sends catch up rather than shifting every later arrival.
 */
import { performance } from 'node:perf_hooks';
import { sendChatRequest, type Endpoint, type InFlight } from './client.js';
import type { PhaseStats } from './metrics.js';
import { seededRandom } from '../../lib/random.js';
import type { Prompt } from './prompts.js';

export interface PhaseLimits {
  /** Stop sending after this long; in-flight requests still finish (bounded by the request timeout). */
  durationMs: number | undefined;
  /** Stop sending after this many requests. */
  numRequests: number | undefined;
}

export interface Driver {
  endpoint: Endpoint;
  prompts: readonly Prompt[];
  signal: AbortSignal;
  /** Cancelled all at once when `signal` aborts. */
  inFlight: InFlight;
  seed: number;
  /** Total requests sent by the run, for the client's CPU cost per request. */
  sentTotal: number;
  nextPrompt: number;
}

function takePrompt(driver: Driver): Prompt {
  const prompt = driver.prompts[driver.nextPrompt % driver.prompts.length] as Prompt;
  driver.nextPrompt++;
  return prompt;
}

async function one(driver: Driver, stats: PhaseStats, scheduledMs?: number): Promise<void> {
  const prompt = takePrompt(driver);
  driver.sentTotal++;
  stats.noteSend(performance.now(), scheduledMs);
  const result = await sendChatRequest(driver.endpoint, prompt.body, driver.inFlight);
  if (result.error === 'cancelled') return; // interrupted by the user: not a server error
  stats.add(result, prompt);
}

export async function runPhase(driver: Driver, stats: PhaseStats, limits: PhaseLimits): Promise<void> {
  if (stats.load.mode === 'closed') await closedLoop(driver, stats, limits, stats.load.concurrency ?? 1);
  else await openLoop(driver, stats, limits, stats.load.rate ?? 1, stats.load.arrival === 'poisson');
}

/** Users join this many per millisecond, so that thousands of them do not all send in one tick. */
const JOIN_PER_MS = 4;

async function closedLoop(driver: Driver, stats: PhaseStats, limits: PhaseLimits, users: number): Promise<void> {
  const deadline = limits.durationMs === undefined ? Infinity : performance.now() + limits.durationMs;
  let budget = limits.numRequests ?? Infinity;
  // A user that would join after the deadline, or after N users have taken the N requests, would
  // send nothing: it is not started, so that its join delay does not hold the phase open.
  const joinedByDeadline = limits.durationMs === undefined ? users : Math.ceil(limits.durationMs * JOIN_PER_MS);
  const joining = Math.min(users, budget, joinedByDeadline);
  const joins = new JoinDelays(driver.signal);
  const user = async (_: unknown, index: number): Promise<void> => {
    if (index > 0) await joins.wait(index / JOIN_PER_MS);
    while (budget > 0 && !driver.signal.aborted && performance.now() < deadline) {
      budget--;
      await one(driver, stats);
    }
  };
  try {
    await Promise.all(Array.from({ length: joining }, user));
  } finally {
    joins.close();
  }
}

/**
 * Users' waits to join, all ended at once by an interrupt: with thousands of users still to join,
 * their timers would otherwise hold the interrupted run for seconds. One abort listener for all of
 * them (an AbortSignal warns past a few listeners).
 */
class JoinDelays {
  private readonly pending = new Set<() => void>();
  private readonly endAll = (): void => {
    for (const end of [...this.pending]) end();
  };

  constructor(private readonly signal: AbortSignal) {
    signal.addEventListener('abort', this.endAll, { once: true });
  }

  wait(ms: number): Promise<void> {
    if (this.signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const end = (): void => {
        clearTimeout(timer);
        this.pending.delete(end);
        resolve();
      };
      const timer = setTimeout(end, ms);
      this.pending.add(end);
    });
  }

  close(): void {
    this.signal.removeEventListener('abort', this.endAll);
  }
}

/** Successive gaps between arrivals in ms: exponential (a Poisson process) or constant. */
export function arrivalGaps(seed: number, rate: number, poisson: boolean): () => number {
  const random = seededRandom(seed ^ 0x9e3779b9);
  const meanGapMs = 1000 / rate;
  return poisson ? (): number => -Math.log(1 - random()) * meanGapMs : (): number => meanGapMs;
}

function openLoop(driver: Driver, stats: PhaseStats, limits: PhaseLimits, rate: number, poisson: boolean): Promise<void> {
  const gap = arrivalGaps(driver.seed, rate, poisson);
  const start = performance.now();
  // Offsets from the start, not absolute times, so that R req/s for T s is exactly R*T arrivals
  // whenever 1000/R is a whole number of ms; the epsilon absorbs rounding for the other rates.
  const window = limits.durationMs === undefined ? Infinity : limits.durationMs - 1e-6;
  let budget = limits.numRequests ?? Infinity;
  let offset = 0;
  const inFlight = new Set<Promise<void>>();
  return new Promise((resolve) => {
    const finish = (): void => void Promise.all(inFlight).then(() => resolve());
    const tick = (): void => {
      const now = performance.now();
      while (start + offset <= now && offset < window && budget > 0 && !driver.signal.aborted) {
        budget--;
        const request = one(driver, stats, start + offset);
        inFlight.add(request);
        void request.then(() => inFlight.delete(request));
        offset += gap();
      }
      if (offset >= window || budget <= 0 || driver.signal.aborted) finish();
      else setTimeout(tick, Math.max(0, start + offset - performance.now()));
    };
    tick();
  });
}
