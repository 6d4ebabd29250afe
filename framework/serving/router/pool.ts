/**
 * The Router's view of its workers: the Alive instances of the named worker actor across the
 * cluster (the Suspect ones when none is Alive), their load reports (polled), and which one takes
 * the next request.
 *
 * - A worker's load is `active + queued` from its last report, plus the requests this Router sent
 *   it since that report. Reports older than LOAD_FRESH_MS count as unknown; when no worker has a
 *   fresh one, workers take turns (round-robin), and so do workers tied at the lowest load.
 * - A worker whose call failed as unreachable (killed, partitioned) is set aside until a load
 *   report comes from it again, so later requests go elsewhere before membership has noticed; it
 *   is still tried when no other worker is left.
 * - `open` sends a request and waits for its first chunk, trying the next worker when a worker
 *   cannot be reached or is overloaded: nothing has reached the client yet, so it is safe. A worker
 *   that was reached but did not start the reply in time is not replaced: the request itself may be
 *   what holds it, and would then hold the next worker too. Requests past the stream calls one
 *   channel carries (`limits.max_streams`) wait in the Router for a slot, as long as their client
 *   waits; the time limit starts when a request is sent. Requests not yet started are capped
 *   (MAX_UNSTARTED_PER_WORKER): past the cap, a request is refused as overloaded.
 * - Messages name workers by node id (as /health and `actorctl inspect` do), never by address:
 *   they reach API clients.
 * - `release` lets a request's stream go: one left before its end (the client went) is cancelled,
 *   and its worker stops generating.
 */
import type { ActorHandle, ActorSystemView } from '../../core/context.js';
import { isActorError } from '../../core/errors.js';
import type { GenerateChunk, GenerateRequest, LoadReport } from '../contract.js';

const LOAD_POLL_MS = 500;
const LOAD_FRESH_MS = 2_000;
const LOAD_TIMEOUT_MS = 1_000;
/** A call's reply (the stream's start, for a stream) must begin within this. */
export const OPEN_TIMEOUT_MS = 10_000;
/** Workers one request may try before it fails. */
const MAX_ATTEMPTS = 3;
/**
 * Requests per alive worker the Router holds before their replies start (at a worker, or waiting
 * here for a slot on its channel). Each holds its body, up to 1 MiB, in the Router's memory, and
 * clients can open connections by the thousand: past this, a request is refused as overloaded.
 * Four times the stream calls a channel carries by default, so a worker's own queue fills first.
 */
export const MAX_UNSTARTED_PER_WORKER = 512;

interface WorkerState {
  nodeId: string;
  addr: string;
  handle: ActorHandle;
  report: LoadReport | undefined;
  reportedAt: number;
  /** Requests sent to this worker; `sentAtReport` is the count when the last report was asked for. */
  sent: number;
  sentAtReport: number;
  /** Set aside after an unreachable call, until it reports again. */
  down: boolean;
}

/** A request a worker took: its first chunk, the rest, and how to tell the pool if the worker then fails. */
export interface OpenedRequest {
  /** The worker's node id. */
  worker: string;
  first: GenerateChunk;
  rest: AsyncIterator<GenerateChunk>;
  /** The worker failed mid-stream: set it aside. */
  failed(error: unknown): void;
  /** The Router is done with the stream; before its end, this cancels it. */
  release(): void;
}

/** Why no worker took a request: none is alive (or could be reached), all tried were overloaded, or one did not start in time. */
export type NoWorkerReason = 'no_worker' | 'overloaded' | 'worker_timeout';

/** No worker took the request. */
export class NoWorkerError extends Error {
  constructor(
    message: string,
    readonly reason: NoWorkerReason,
  ) {
    super(message);
  }
}

/** What a failed call to a worker says to an API client: what happened, without the addresses the actor system's messages hold. */
export function callFailure(error: unknown): string {
  const code = isActorError(error) ? error.code : '';
  if (code === 'unreachable') return 'could not be reached';
  if (code === 'timeout') return `did not start the reply within ${OPEN_TIMEOUT_MS / 1000} s`;
  if (code === 'not-found' || code === 'stopped') return 'is no longer running';
  return 'failed';
}

export class WorkerPool {
  private readonly workers = new Map<string, WorkerState>();
  private turn = 0;
  /** Requests in `open`: sent to a worker, or about to be, whose first chunk has not come. */
  private unstarted = 0;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly system: ActorSystemView,
    readonly workerName: string,
  ) {
    this.timer = setInterval(() => void this.poll(), LOAD_POLL_MS);
    this.timer.unref();
    void this.poll();
  }

  close(): void {
    clearInterval(this.timer);
  }

  /**
   * The Alive workers (membership's view), with what the Router knows of each; when none is Alive,
   * the Suspect ones. A worker busy decoding may miss a membership probe: were it left out until it
   * refutes the suspicion, a Router with one worker would refuse every request (503) meanwhile.
   */
  alive(): WorkerState[] {
    const alive = this.system.instances(this.workerName);
    const members = alive.length ? alive : this.system.instances(this.workerName, 'Suspect');
    const seen = new Set<string>();
    const out = members.map((m) => {
      seen.add(m.id);
      let state = this.workers.get(m.id);
      if (!state) {
        state = { nodeId: m.id, addr: m.addr, handle: this.system.resolve(this.workerName, { nodeId: m.id }), report: undefined, reportedAt: 0, sent: 0, sentAtReport: 0, down: false };
        this.workers.set(m.id, state);
      }
      return state;
    });
    for (const id of this.workers.keys()) if (!seen.has(id)) this.workers.delete(id);
    return out;
  }

  /** The worker's fresh report, or undefined. */
  fresh(w: WorkerState): LoadReport | undefined {
    return w.report && Date.now() - w.reportedAt <= LOAD_FRESH_MS ? w.report : undefined;
  }

  private async poll(): Promise<void> {
    await Promise.all(
      this.alive().map(async (w) => {
        const sentAtAsk = w.sent;
        try {
          w.report = await w.handle.ask<LoadReport>('load', [], { timeoutMs: LOAD_TIMEOUT_MS });
          w.reportedAt = Date.now();
          w.sentAtReport = sentAtAsk;
          w.down = false;
        } catch {
          // Unknown until it answers again; membership decides whether it is still a worker.
        }
      }),
    );
  }

  /** The worker to send the next request to, among those not yet tried; undefined when none is left. */
  private pick(tried: ReadonlySet<string>): WorkerState | undefined {
    const untried = this.alive().filter((w) => !tried.has(w.nodeId));
    const up = untried.filter((w) => !w.down);
    const candidates = up.length ? up : untried;
    if (!candidates.length) return undefined;
    const loads = candidates.map((w) => {
      const report = this.fresh(w);
      return report ? report.active + report.queued + (w.sent - w.sentAtReport) : undefined;
    });
    let pool = candidates;
    if (loads.some((l) => l !== undefined)) {
      const least = Math.min(...loads.map((l) => l ?? Infinity));
      pool = candidates.filter((_, i) => (loads[i] ?? Infinity) === least);
    }
    return pool[this.turn++ % pool.length];
  }

  /** Sends a request to a worker and waits for its first chunk; the signal cancels it (the worker stops generating). */
  async open(request: GenerateRequest, signal: AbortSignal): Promise<OpenedRequest> {
    const cap = MAX_UNSTARTED_PER_WORKER * Math.max(1, this.alive().length);
    if (this.unstarted >= cap) throw new NoWorkerError(`the Router holds ${this.unstarted} requests that no worker has started (at most ${MAX_UNSTARTED_PER_WORKER} a worker)`, 'overloaded');
    this.unstarted++;
    try {
      return await this.start(request, signal);
    } finally {
      this.unstarted--;
    }
  }

  /** `open` within the cap: the workers in turn until one starts the reply. */
  private async start(request: GenerateRequest, signal: AbortSignal): Promise<OpenedRequest> {
    const tried = new Set<string>();
    let overloaded = false;
    let lastError = '';
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const worker = this.pick(tried);
      if (!worker) break;
      tried.add(worker.nodeId);
      worker.sent++;
      const rest = worker.handle.stream<GenerateChunk>('generateStream', [request], { signal, timeoutMs: OPEN_TIMEOUT_MS, queue: true })[Symbol.asyncIterator]();
      const release = (): void => void rest.return?.();
      let first: IteratorResult<GenerateChunk>;
      try {
        first = await rest.next();
      } catch (error) {
        if (signal.aborted) throw error;
        this.setAside(worker, error);
        lastError = `worker ${worker.nodeId} ${callFailure(error)}`;
        if (isActorError(error) && error.code === 'timeout') throw new NoWorkerError(lastError, 'worker_timeout');
        continue;
      }
      if (first.done) {
        lastError = `worker ${worker.nodeId} ended the stream without a chunk`;
        continue;
      }
      if (first.value.type === 'error' && first.value.code === 'overloaded') {
        release();
        overloaded = true;
        lastError = `worker ${worker.nodeId}: ${first.value.message}`;
        continue;
      }
      return { worker: worker.nodeId, first: first.value, rest, failed: (error) => this.setAside(worker, error), release };
    }
    if (!tried.size) throw new NoWorkerError(`no worker '${this.workerName}' is alive`, 'no_worker');
    throw new NoWorkerError(`no worker could take the request (${tried.size} tried; last: ${lastError})`, overloaded ? 'overloaded' : 'no_worker');
  }

  private setAside(worker: WorkerState, error: unknown): void {
    if (isActorError(error) && (error.code === 'unreachable' || error.code === 'not-found' || error.code === 'stopped')) worker.down = true;
  }
}
