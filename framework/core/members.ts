/**
 * What a cluster member is (its record and statuses) and the membership timers with their defaults
 * and `-D cluster.*` setting names. Constants and types only: the command line shows them in --help
 * without loading the membership protocol (membership.ts).
 */

/** The cluster of a node that is given no name. */
export const DEFAULT_CLUSTER = 'default';

/** Why a cluster name cannot be used (it travels in a header and a certificate's URI), or undefined. */
export function clusterNameProblem(name: string): string | undefined {
  return /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/.test(name) ? undefined : `cluster name '${name}' must be 1-63 of A-Z a-z 0-9 . _ - (starting with a letter or digit)`;
}

/** A named actor's name, as the registry takes them and member records may list them. */
export const ACTOR_NAME_RE = /^[A-Za-z0-9_][A-Za-z0-9_.\/-]{0,255}$/;
/** Named actors one member record may list, and the characters of their names together. */
export const MAX_RECORD_ACTORS = 1024;
export const MAX_RECORD_ACTOR_CHARS = 64 * 1024;
/** Largest membership message a node accepts, and so the largest it may send: a whole member table rides on join and sync. */
export const MAX_SWIM_BYTES = 4 * 1024 * 1024;

export type MemberStatus = 'Alive' | 'Suspect' | 'Failed' | 'Left';
export const STATUSES: readonly MemberStatus[] = ['Alive', 'Suspect', 'Failed', 'Left'];

/** A member as it travels between nodes. */
export interface MemberRecord {
  id: string;
  addr: string;
  status: MemberStatus;
  inc: number;
  /** Process start time (ms): tells which of two ids at one address is the newer process. */
  started: number;
  /** Named actors with an instance on that node. */
  actors: string[];
}

export interface MembershipTimers {
  /** Period of the probe loop; each round probes one member. */
  probeIntervalMs: number;
  /** Wait for a direct ack. */
  probeTimeoutMs: number;
  /** Members asked to probe indirectly when the direct probe fails. */
  indirectProbes: number;
  /** Wait for an indirect ack. */
  indirectTimeoutMs: number;
  /** Suspect -> Failed when not refuted within this time. */
  suspectTimeoutMs: number;
  /** Failed or Left members are forgotten after this time. */
  removeAfterMs: number;
  /** Period of the full-table push-pull exchange. */
  syncIntervalMs: number;
  /** Retry period while no seed answers. */
  joinRetryMs: number;
  /** An update rides on this many times log2(n+1) messages. */
  retransmitMult: number;
}

/** Defaults: a killed node is Suspect within about 1-2 s and Failed within about 10 s. */
export const DEFAULT_TIMERS: MembershipTimers = {
  probeIntervalMs: 500,
  probeTimeoutMs: 300,
  indirectProbes: 3,
  indirectTimeoutMs: 600,
  suspectTimeoutMs: 8000,
  removeAfterMs: 60_000,
  syncIntervalMs: 5000,
  joinRetryMs: 1000,
  retransmitMult: 4,
};

/** `-D cluster.<key>=<value>` settings by timer: `probeIntervalMs` is `cluster.probe_interval_ms`. */
export const TIMER_SETTING_KEYS: ReadonlyMap<string, keyof MembershipTimers> = new Map(
  (Object.keys(DEFAULT_TIMERS) as Array<keyof MembershipTimers>).map((k) => [`cluster.${k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)}`, k]),
);
