/**
 * The sending side of calls: references to actors, resolution of a named actor to one of its Alive
 * instances (round-robin, random or least-load), and asks, tells and streams to a local cell or to
 * another node. Remote calls, streamed replies too, ride the peer's call channel.
 */
import type { ActorCell, Delivery } from './cell.js';
import { ChannelPool } from './channel.js';
import type { ActorHandle, CallOptions, ResolveOptions, ResolvePolicy } from './context.js';
import { ActorError, errorMessage } from './errors.js';
import type { MemberRecord } from './members.js';
import type { Membership } from './membership.js';
import type { NodeMetrics } from './metrics.js';
import type { LocalActors } from './registry.js';
import { callJson, decodeReply } from './remote.js';
import type { Transport } from './transport.js';

/** Where a call goes: a local cell, or a node address plus the path of the actor there. */
type Target = { cell: ActorCell } | { addr: string; nodeId: string; path: string; key: string };

/** A handle to call one actor, or (from resolve) any Alive instance of a named actor. */
export class ActorRef implements ActorHandle {
  constructor(
    private readonly caller: Caller,
    private readonly pick: () => Target,
    readonly label: string,
  ) {}

  async ask<T = unknown>(method: string, args: unknown[] = [], options: CallOptions = {}): Promise<T> {
    return (await this.caller.call(this.pick(), method, args, 'ask', options)) as T;
  }

  /** Fire and forget: resolves once the message is queued (remote: accepted by the node). */
  async tell(method: string, args: unknown[] = [], options: CallOptions = {}): Promise<void> {
    await this.caller.call(this.pick(), method, args, 'tell', options);
  }

  /** A streamed reply; breaking out of the loop cancels the call. */
  stream<T = unknown>(method: string, args: unknown[] = [], options: CallOptions = {}): AsyncIterable<T> {
    return this.caller.openStream(this.pick, method, args, options) as AsyncIterable<T>;
  }
}

export interface CallerOptions {
  nodeId: string;
  transport: Transport;
  membership: Membership;
  actors: LocalActors;
  metrics: NodeMetrics;
  /** Default timeout of ask and stream calls. */
  callTimeoutMs: number;
  /** Stream calls sent to one peer at once; more wait their turn. */
  maxStreamsPerPeer: number;
  log(message: string): void;
}

export class Caller {
  /** Calls to other nodes ride one call channel per peer (see channel.ts). */
  private readonly channels: ChannelPool;
  private readonly roundRobin = new Map<string, number>();
  /** Remote calls in flight by `<node id>/<name>`: the load least-load compares for other nodes. */
  private readonly inflight = new Map<string, number>();
  /** Pre-bound metric series for the hot paths. */
  private readonly hot;

  constructor(private readonly options: CallerOptions) {
    this.channels = new ChannelPool(options.transport, options.maxStreamsPerPeer);
    const { calls, latency } = options.metrics;
    this.hot = {
      localLatency: latency.bind({ locality: 'local' }),
      remoteLatency: latency.bind({ locality: 'remote' }),
      calls: {
        local: { ask: calls.bind({ mode: 'ask', locality: 'local' }), tell: calls.bind({ mode: 'tell', locality: 'local' }), stream: calls.bind({ mode: 'stream', locality: 'local' }) },
        remote: { ask: calls.bind({ mode: 'ask', locality: 'remote' }), tell: calls.bind({ mode: 'tell', locality: 'remote' }), stream: calls.bind({ mode: 'stream', locality: 'remote' }) },
      },
    };
  }

  /** A reference to a local actor. */
  local(cell: ActorCell): ActorRef {
    return new ActorRef(this, () => ({ cell }), cell.label);
  }

  /** A reference that picks an Alive instance of `name` for every call. */
  resolve(name: string, options: ResolveOptions = {}): ActorRef {
    const policy = options.policy ?? 'round-robin';
    return new ActorRef(this, () => this.pickInstance(name, policy, options.nodeId), name);
  }

  /** A reference to one actor by id on a given node (named or not), as `/actors` lists it. */
  actor(nodeId: string, actorId: string): ActorRef {
    return new ActorRef(
      this,
      () => {
        if (nodeId === this.options.nodeId) {
          const cell = this.options.actors.withId(actorId);
          if (!cell) throw new ActorError('not-found', `no actor with id ${actorId} on this node`);
          return { cell };
        }
        const member = this.options.membership.get(nodeId);
        if (!member || member.status !== 'Alive') throw new ActorError('not-found', `node ${nodeId} is ${member?.status ?? 'unknown'}, not Alive`);
        return { addr: member.addr, nodeId, path: `/actors/${actorId}`, key: `${nodeId}/${actorId}` };
      },
      actorId,
    );
  }

  private pickInstance(name: string, policy: ResolvePolicy, nodeId: string | undefined): Target {
    const self = this.options.nodeId;
    let candidates = this.options.membership.instancesOf(name);
    // A node named by the caller is tried while only suspected too: the caller chose it (a Router
    // whose only worker missed a probe under load), and a node that is down fails the call itself.
    if (nodeId !== undefined) {
      const pinned = (m: MemberRecord): boolean => m.id === nodeId;
      candidates = candidates.filter(pinned);
      if (!candidates.length) candidates = this.options.membership.instancesOf(name, 'Suspect').filter(pinned);
    }
    if (!candidates.length) throw new ActorError('not-found', `no Alive instance of actor '${name}'${nodeId ? ` on node ${nodeId}` : ''}`);
    let chosen: MemberRecord;
    if (policy === 'random') chosen = candidates[Math.floor(Math.random() * candidates.length)]!;
    else if (policy === 'least-load') {
      const loads = candidates.map((m) => (m.id === self ? (this.options.actors.named(name)?.load ?? 0) : (this.inflight.get(`${m.id}/${name}`) ?? 0)));
      const least = Math.min(...loads);
      const ties = candidates.filter((_, i) => loads[i] === least);
      chosen = ties[Math.floor(Math.random() * ties.length)]!;
    } else {
      const next = this.roundRobin.get(name) ?? 0;
      this.roundRobin.set(name, next + 1);
      chosen = candidates[next % candidates.length]!;
    }
    if (chosen.id === self) {
      const cell = this.options.actors.named(name);
      if (cell) return { cell };
    }
    return { addr: chosen.addr, nodeId: chosen.id, path: `/named/${encodeURIComponent(name)}`, key: `${chosen.id}/${name}` };
  }

  /** Sends one ask or tell. */
  async call(target: Target, method: string, args: unknown[], mode: 'ask' | 'tell', options: CallOptions): Promise<unknown> {
    const timeoutMs = options.timeoutMs ?? this.options.callTimeoutMs;
    if ('cell' in target) {
      this.hot.calls.local[mode]();
      const delivery = target.cell.deliver(method, args, mode);
      if (mode === 'tell') {
        delivery.result.catch((e) => this.options.log(`tell ${target.cell.label}.${method} failed: ${errorMessage(e)}`));
        return undefined;
      }
      const started = performance.now();
      const value = await withDeadline(delivery, timeoutMs, options.signal, `${target.cell.label}.${method}`);
      this.hot.localLatency((performance.now() - started) / 1000);
      return value;
    }
    this.hot.calls.remote[mode]();
    this.inflight.set(target.key, (this.inflight.get(target.key) ?? 0) + 1);
    const started = performance.now();
    try {
      const reply = await this.channels.call(target.addr, mode, target.path, callJson(method, args), timeoutMs, options.signal);
      const body = decodeReply(reply.status, reply.body, target.addr);
      if (mode === 'ask') this.hot.remoteLatency((performance.now() - started) / 1000);
      return body;
    } finally {
      this.inflight.set(target.key, (this.inflight.get(target.key) ?? 1) - 1);
    }
  }

  async *openStream(pick: () => Target, method: string, args: unknown[], options: CallOptions): AsyncGenerator<unknown> {
    const target = pick();
    const timeoutMs = options.timeoutMs ?? this.options.callTimeoutMs;
    if ('cell' in target) {
      this.hot.calls.local.stream();
      const delivery = target.cell.deliver(method, args, 'stream');
      const iterable = (await withDeadline(delivery, timeoutMs, options.signal, `${target.cell.label}.${method}`)) as AsyncIterable<unknown>;
      for await (const item of iterable) {
        if (options.signal?.aborted) throw new ActorError('cancelled', 'stream cancelled');
        yield item;
      }
      return;
    }
    this.hot.calls.remote.stream();
    yield* this.channels.stream(target.addr, target.path, callJson(method, args), timeoutMs, options.signal, options.queue);
  }

  /** Channels never end on their own: closing them lets the sessions close gracefully. */
  close(): void {
    this.channels.close();
  }
}

/** Waits for a local result with a timeout and an abort signal; either fails the call (and drops it if still queued). */
async function withDeadline(delivery: Delivery, timeoutMs: number, signal: AbortSignal | undefined, what: string): Promise<unknown> {
  const cancelled = (): void => delivery.cancel(new ActorError('cancelled', `${what} cancelled`));
  if (signal?.aborted) cancelled();
  const timer = setTimeout(() => delivery.cancel(new ActorError('timeout', `${what} did not answer within ${timeoutMs} ms`)), timeoutMs);
  signal?.addEventListener('abort', cancelled, { once: true });
  try {
    return await delivery.result;
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', cancelled);
  }
}
