/**
 * What the inspect operations (inspect.ts) take and return, and the constants the command line
 * needs for --help: types and constants only, so that loading them loads nothing of the client.
 */
import type { TlsFiles } from '../core/tls.js';
import type { MemberEntry } from './observed.js';

export interface InspectOptions {
  /** Seed addresses (host:port), tried in order for the member list. */
  seeds: string[];
  timeoutMs: number;
  /** Go on without the members that do not answer (and report them) instead of failing. */
  bestEffort: boolean;
  /** The cluster the nodes must belong to (with TLS: the certificate's when unset). */
  cluster?: string | undefined;
  /** Speak TLS with this certificate (as a node's peers do) instead of h2c. */
  tls?: TlsFiles | undefined;
}

/** A member that did not answer. */
export interface NodeFailure {
  node_id: string;
  addr: string;
  error: string;
}

export interface ClusterView {
  /** The seed that answered. */
  seed: string;
  /** Alive members first, then the others by status; each group by node id. */
  members: MemberEntry[];
}

export interface ActorsOptions extends InspectOptions {
  /** Include system and unnamed actors. */
  all: boolean;
  /** Keep actor names containing this (case-insensitive). */
  filter?: string;
  /** At most this many actors: those with the most instances. */
  top?: number;
}

/** The instances of one named actor across the cluster. */
export interface ActorPlacement {
  name: string;
  instances: Array<{ node_id: string; actor_id: string }>;
}

export interface ClusterActors {
  /** Members that answered. */
  nodes: number;
  /** Most instances first, then by name. */
  actors: ActorPlacement[];
  failures: NodeFailure[];
}

export interface MetricSample {
  /** Name and labels as in the text format: `actor_calls_total{mode="ask",locality="local"}`. */
  series: string;
  value: number;
}

export interface NodeMetricsView {
  node_id: string;
  addr: string;
  /** The node's answer as it came (Prometheus text format 0.0.4). */
  text: string;
  /** Its samples: all of them, or the key series only. */
  samples: MetricSample[];
}

export interface ClusterMetrics {
  nodes: NodeMetricsView[];
  failures: NodeFailure[];
}

export const WATCH_KINDS = ['cluster', 'actors', 'metrics', 'all'] as const;
export type WatchKind = (typeof WATCH_KINDS)[number];

export interface WatchOptions extends InspectOptions {
  intervalMs: number;
  kind: WatchKind;
  /** Rounds to run; undefined runs until `signal` aborts. */
  maxRounds: number | undefined;
  signal: AbortSignal;
}

/** One thing that changed between two rounds; null before: it is new; null after: it is gone. */
export interface WatchChange {
  kind: 'cluster' | 'actors' | 'metrics';
  /** `alive nodes`, a member (`<node id> (<addr>)`), an actor name or a metric series. */
  subject: string;
  before: string | number | null;
  after: string | number | null;
}

/** What a watch round saw. */
export interface WatchState {
  /** Every member as the answering node lists it: Alive first, then the others by status. */
  members: MemberEntry[];
  /** Named actors with their instance counts, most first (kind actors or all). */
  actors: Array<{ name: string; instances: number }> | undefined;
  /** The key series summed over the nodes (kind metrics or all). */
  metrics: MetricSample[] | undefined;
}

export interface WatchRound {
  round: number;
  at: Date;
  /** The first round: its changes list everything as new. */
  initial: boolean;
  /** The node whose member list this round shows; undefined when no node answered, and `state` is the last one seen. */
  source: string | undefined;
  /** Why no node answered, when none did. */
  unreachable: string | undefined;
  state: WatchState;
  changes: WatchChange[];
  /** Members that did not answer this round (they stay listed with the status the cluster gives them). */
  failures: NodeFailure[];
}

/** The subject of the alive-count change in `watch --kind cluster`. */
export const ALIVE_NODES = 'alive nodes';

