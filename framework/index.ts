/**
 * The framework's engine: the one module the command line (and anything else outside framework/)
 * imports. Constants and types are exported as they are; each operation loads its implementation
 * on first use, so that loading the tool (for --help, or another command) costs nothing of the
 * inspect client.
 *
 * Operations take typed arguments and return results (what inspect found); they never parse flags
 * or render.
 */
import type { ActorsOptions, ClusterActors, ClusterMetrics, ClusterView, InspectOptions, WatchOptions, WatchRound } from './node/inspect-types.js';
import type { ActorEntry } from './node/observed.js';

// Address checks are pure functions of a leaf module: the command line checks --addr and --seeds with them.
export { DEFAULT_NODE_PORT, normalizeAddr, parseAddr } from './core/address.js';
export { DEFAULT_TIMERS, STATUSES, TIMER_SETTING_KEYS, type MemberRecord, type MemberStatus, type MembershipTimers } from './core/members.js';
export { ALIVE_NODES, WATCH_KINDS, type WatchKind } from './node/inspect-types.js';
export type { ActorPlacement, ActorsOptions, ClusterActors, ClusterMetrics, ClusterView, InspectOptions, MetricSample, NodeFailure, NodeMetricsView, WatchChange, WatchOptions, WatchRound } from './node/inspect-types.js';
export type { ActorEntry, MemberEntry } from './node/observed.js';

// ---- inspect ----

/** The members of a cluster, as the first seed that answers knows them. */
export async function inspectCluster(options: InspectOptions): Promise<ClusterView> {
  return (await import('./node/inspect.js')).inspectCluster(options);
}

/** Named actors across the cluster's Alive members and where their instances run. */
export async function inspectActors(options: ActorsOptions): Promise<ClusterActors> {
  return (await import('./node/inspect.js')).inspectActors(options);
}

/** The actors of one node. */
export async function inspectNodeActors(endpoint: string, options: Omit<ActorsOptions, 'seeds' | 'bestEffort'>): Promise<ActorEntry[]> {
  return (await import('./node/inspect.js')).inspectNodeActors(endpoint, options);
}

/** Each Alive member's metrics, all samples or the key series. */
export async function inspectMetrics(options: InspectOptions & { keyOnly: boolean }): Promise<ClusterMetrics> {
  return (await import('./node/inspect.js')).inspectMetrics(options);
}

/** Polls the cluster and hands each round, with what changed, to `onRound`. */
export async function watchCluster(options: WatchOptions, onRound: (round: WatchRound) => void): Promise<void> {
  return (await import('./node/inspect.js')).watchCluster(options, onRound);
}
