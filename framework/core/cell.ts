/**
 * One running actor: its instance, its bounded mailbox (one message at a time, in order) and its
 * supervision (restart with exponential backoff, or stop after too many restarts).
 */
import { callableMethods, type ActorMeta } from './actor.js';
import type { ActorContext, ActorMetadata } from './context.js';
import { ActorError, errorMessage, type ActorErrorCode } from './errors.js';

export type CallMode = 'ask' | 'tell' | 'stream';

interface Envelope {
  method: string;
  args: unknown[];
  mode: CallMode;
  resolve(value: unknown): void;
  reject(error: unknown): void;
  cancelled: boolean;
  /** Made only when the actor reads `context.signal` during this call (most calls never do). */
  controller?: AbortController;
}

const NEVER_ABORTED = new AbortController().signal;

/** A call handed to a cell. `cancel()` fails the caller's promise at once, and drops the call if it has not started. */
export interface Delivery {
  result: Promise<unknown>;
  cancel(error?: ActorError): void;
}

export interface CellHooks {
  /** Called after each handled message with its duration in seconds and whether it failed. */
  observe(seconds: number, failed: boolean): void;
  /** Called once when the actor has stopped for good (restarts exhausted or system stop). */
  stopped(cell: ActorCell): void;
  log(message: string): void;
}

/** Senders held back beyond this many times the capacity are refused outright: the actor is overloaded. */
const WAITING_FACTOR = 4;

/** Failures of the call, not of the actor (no such method, ask of a stream or stream of an ask): no reason to restart it. */
const CALLER_ERRORS: ReadonlySet<ActorErrorCode> = new Set<ActorErrorCode>(['no-method', 'not-stream', 'is-stream']);

export class ActorCell {
  private queue: Envelope[] = [];
  private head = 0;
  /** Senders waiting for room in the mailbox. */
  private waiting: Array<() => void> = [];
  private running = false;
  /** The envelope being handled now, whose signal `context.signal` is. */
  private current: Envelope | undefined;
  private instance: object | undefined;
  private methods = new Set<string>();
  private restarts: number[] = [];
  private state: 'starting' | 'running' | 'restarting' | 'stopped' = 'starting';
  processed = 0;
  /** Key/values given at spawn, shown by /actors. */
  extra: ActorMetadata = {};
  readonly createdAt = Date.now();

  constructor(
    readonly id: string,
    readonly name: string | undefined,
    readonly cls: new (params: never) => object,
    readonly meta: ActorMeta,
    readonly params: Record<string, unknown>,
    private readonly context: Omit<ActorContext, 'actorId' | 'name' | 'signal'>,
    private readonly hooks: CellHooks,
  ) {}

  get status(): string {
    return this.state;
  }

  /** Depth of the mailbox plus senders waiting; the load that least-load resolution compares. */
  get load(): number {
    return this.queue.length - this.head + this.waiting.length + (this.running ? 1 : 0);
  }

  async start(): Promise<void> {
    await this.instantiate();
    this.state = 'running';
  }

  private async instantiate(): Promise<void> {
    const instance = new this.cls(this.params as never);
    const ctx = { ...this.context, actorId: this.id, name: this.name } as ActorContext;
    Object.defineProperty(ctx, 'signal', { enumerable: true, get: () => this.signalOf(this.current) });
    (instance as { context?: ActorContext }).context = ctx;
    const hooks = instance as { onStart?: () => unknown };
    if (typeof hooks.onStart === 'function') await hooks.onStart();
    this.instance = instance;
    this.methods = callableMethods(instance);
  }

  private signalOf(envelope: Envelope | undefined): AbortSignal {
    if (!envelope) return NEVER_ABORTED;
    if (!envelope.controller) {
      envelope.controller = new AbortController();
      if (envelope.cancelled) envelope.controller.abort();
    }
    return envelope.controller.signal;
  }

  metadata(): ActorMetadata {
    const fn = (this.instance as { metadata?: () => ActorMetadata } | undefined)?.metadata;
    try {
      return typeof fn === 'function' ? fn.call(this.instance) : {};
    } catch {
      return {};
    }
  }

  /** Queues a call. Resolves with the method's result (an async iterable for streams). */
  deliver(method: string, args: unknown[], mode: CallMode): Delivery {
    let envelope!: Envelope;
    const result = new Promise<unknown>((resolve, reject) => {
      envelope = { method, args, mode, resolve, reject, cancelled: false };
    });
    if (this.state === 'stopped') {
      envelope.reject(new ActorError('stopped', `actor ${this.label} has stopped`));
      return { result, cancel() {} };
    }
    if (this.queue.length - this.head < this.meta.mailboxCapacity) {
      this.enqueue(envelope);
    } else if (this.waiting.length >= this.meta.mailboxCapacity * WAITING_FACTOR) {
      envelope.reject(new ActorError('overloaded', `mailbox of ${this.label} is full (${this.meta.mailboxCapacity} queued, ${this.waiting.length} waiting)`));
    } else {
      this.waiting.push(() => this.enqueue(envelope));
    }
    return {
      result,
      cancel: (error = new ActorError('cancelled', 'call cancelled')) => {
        if (envelope.cancelled) return;
        envelope.cancelled = true;
        envelope.controller?.abort(error);
        envelope.reject(error);
      },
    };
  }

  get label(): string {
    return this.name ?? `${this.meta.className}_${this.id.slice(0, 8)}`;
  }

  private enqueue(envelope: Envelope): void {
    this.queue.push(envelope);
    if (!this.running && this.state === 'running') void this.drain();
  }

  private take(): Envelope | undefined {
    if (this.head >= this.queue.length) return undefined;
    const envelope = this.queue[this.head++];
    // Compact now and then instead of shifting on every message.
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
    const admit = this.waiting.shift();
    if (admit) admit();
    return envelope;
  }

  private async drain(): Promise<void> {
    this.running = true;
    try {
      while (this.state === 'running') {
        const envelope = this.take();
        if (!envelope) break;
        if (envelope.cancelled) continue;
        const started = performance.now();
        this.current = envelope;
        try {
          const value = await this.invoke(envelope);
          this.current = undefined;
          this.processed++;
          this.hooks.observe((performance.now() - started) / 1000, false);
          envelope.resolve(value);
        } catch (error) {
          // Cleared before a restart, whose onStart is no part of this call.
          this.current = undefined;
          this.processed++;
          this.hooks.observe((performance.now() - started) / 1000, true);
          envelope.reject(error instanceof ActorError ? error : new ActorError('failed', errorMessage(error)));
          if (this.meta.restart === 'on-failure' && !(error instanceof ActorError && CALLER_ERRORS.has(error.code))) {
            await this.restart(error);
          }
        }
      }
    } finally {
      this.running = false;
    }
  }

  private async invoke(envelope: Envelope): Promise<unknown> {
    const { method, args, mode } = envelope;
    if (!this.methods.has(method)) {
      throw new ActorError('no-method', `${this.meta.className} has no callable method '${method}' (methods: ${[...this.methods].sort().join(', ') || 'none'})`);
    }
    const fn = (this.instance as Record<string, (...a: unknown[]) => unknown>)[method];
    let value = fn!.apply(this.instance, args);
    if (value instanceof Promise) value = await value;
    const streams = typeof value === 'object' && value !== null && Symbol.asyncIterator in value;
    if (mode === 'stream' && !streams) throw new ActorError('not-stream', `${this.meta.className}.${method} does not stream; use ask`);
    if (mode !== 'stream' && streams) throw new ActorError('is-stream', `${this.meta.className}.${method} streams its reply; use stream`);
    return value;
  }

  private async restart(cause: unknown): Promise<void> {
    const now = Date.now();
    this.restarts = this.restarts.filter((t) => now - t < this.meta.restartWindowMs);
    this.state = 'restarting';
    await this.stopInstance();
    for (;;) {
      if (this.restarts.length >= this.meta.maxRestarts) {
        this.hooks.log(`actor ${this.label}: ${this.restarts.length} restarts within ${this.meta.restartWindowMs} ms, stopping (${errorMessage(cause)})`);
        await this.stop();
        return;
      }
      const backoff = Math.min(this.meta.maxBackoffMs, this.meta.minBackoffMs * 2 ** this.restarts.length);
      this.restarts.push(Date.now());
      this.hooks.log(`actor ${this.label} failed (${errorMessage(cause)}); restarting in ${backoff} ms`);
      await new Promise((r) => setTimeout(r, backoff));
      if ((this.state as string) === 'stopped') return;
      try {
        await this.instantiate();
        this.state = 'running';
        return;
      } catch (error) {
        cause = error;
      }
    }
  }

  private async stopInstance(): Promise<void> {
    const instance = this.instance as { onStop?: () => unknown } | undefined;
    this.instance = undefined;
    try {
      if (instance && typeof instance.onStop === 'function') await instance.onStop();
    } catch (error) {
      this.hooks.log(`actor ${this.label}: onStop failed: ${errorMessage(error)}`);
    }
  }

  /** Stops for good: pending calls fail, the hook runs once. */
  async stop(): Promise<void> {
    if (this.state === 'stopped') return;
    this.state = 'stopped';
    const gone = new ActorError('stopped', `actor ${this.label} has stopped`);
    for (const envelope of this.queue.slice(this.head)) if (!envelope.cancelled) envelope.reject(gone);
    this.queue = [];
    this.head = 0;
    for (const admit of this.waiting.splice(0)) admit();
    for (const envelope of this.queue) envelope.reject(gone);
    this.queue = [];
    await this.stopInstance();
    this.hooks.stopped(this);
  }
}
