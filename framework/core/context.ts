/**
 * What an actor and the system agree on, as types only: the actor's context, the system it sees
 * through it, and references to other actors. Declared here, below both, so that the actor classes
 * (actor.ts, cell.ts) never import the system that runs them.
 */
import type { MemberRecord } from './members.js';

/** The shape of any class the system can instantiate. */
export type ActorClass<P = Record<string, unknown>> = new (params: P) => object;

export type ResolvePolicy = 'round-robin' | 'random' | 'least-load';

export interface ResolveOptions {
  policy?: ResolvePolicy;
  /** Only the instance on this node. */
  nodeId?: string;
}

/**
 * What `/actors` shows of an actor beside the fields every actor has: text, or numbers (counts,
 * rates), which stay numbers in JSON for the programs that read them.
 */
export type ActorMetadata = Record<string, string | number>;

export interface SpawnOptions {
  /** A named actor is public: listed by /actors and resolvable from every node. */
  name?: string;
  params?: Record<string, unknown>;
  /** Extra key/values shown by /actors (e.g. module, class). */
  metadata?: ActorMetadata;
}

export interface CallOptions {
  timeoutMs?: number;
  signal?: AbortSignal;
  /**
   * A stream call beyond the caller's `limits.max_streams` to one peer waits for a free slot, and
   * by default that wait counts against `timeoutMs`. With `queue`, only the signal ends it, and
   * `timeoutMs` bounds the wait for the stream to start once sent: a queue in front of a busy
   * peer (the serving Router's requests to a worker), not a sign that the peer is stuck.
   */
  queue?: boolean;
}

/** A handle to call one actor, or any Alive instance of a named actor. */
export interface ActorHandle {
  readonly label: string;
  ask<T = unknown>(method: string, args?: unknown[], options?: CallOptions): Promise<T>;
  /** Fire and forget: resolves once the message is queued (remote: accepted by the node). */
  tell(method: string, args?: unknown[], options?: CallOptions): Promise<void>;
  /** A streamed reply; breaking out of the loop cancels the call. */
  stream<T = unknown>(method: string, args?: unknown[], options?: CallOptions): AsyncIterable<T>;
}

/** The system as a running actor sees it: the node it runs on, and ways to reach other actors. */
export interface ActorSystemView {
  readonly nodeId: string;
  readonly addr: string;
  spawn(cls: ActorClass<never>, options?: SpawnOptions): Promise<ActorHandle>;
  stopActor(nameOrId: string): Promise<boolean>;
  resolve(name: string, options?: ResolveOptions): ActorHandle;
  actor(nodeId: string, actorId: string): ActorHandle;
  /** Alive (or, when asked, Suspect: a missed probe, perhaps alive) instances of a named actor across the cluster, this node's first. */
  instances(name: string, status?: 'Alive' | 'Suspect'): MemberRecord[];
}

/** What a running actor knows about itself. */
export interface ActorContext {
  system: ActorSystemView;
  actorId: string;
  name: string | undefined;
  /**
   * The signal of the call being handled: aborted when its caller cancels it or gives up (an abort,
   * a timeout, or a CANCEL over the call channel). Outside a call it never aborts.
   */
  readonly signal: AbortSignal;
}
