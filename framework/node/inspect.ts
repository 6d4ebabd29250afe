/**
 * `actorctl inspect`: reads the observer endpoints of a cluster's nodes over h2c without joining
 * it. Members come from the first seed that answers; the other endpoints are read on every Alive
 * member. Answers are checked against the schemas the nodes answer with (observed.ts). Operations
 * return what they found; laying it out is the command line's business.
 */
import { UnavailableError } from '../../lib/errors.js';
import { errorMessage } from '../core/errors.js';
import { REACH_HINT, failureAt, withClient } from './client.js';
import {
  ALIVE_NODES,
  type ActorPlacement,
  type ActorsOptions,
  type ClusterActors,
  type ClusterMetrics,
  type ClusterView,
  type InspectOptions,
  type MetricSample,
  type NodeFailure,
  type WatchChange,
  type WatchKind,
  type WatchOptions,
  type WatchRound,
  type WatchState,
} from './inspect-types.js';
import { ALL_ACTORS_QUERY, ActorList, OBSERVER_PATHS, type ActorEntry, type MemberEntry } from './observed.js';

/** The summary keeps these series: membership, actor counts, message counts and latency sums. */
const KEY_METRICS = /^actor_(cluster_members|actors_total|named_actors_total|messages_total|calls_total|mailbox_depth|bad_requests_total|ask_duration_seconds_(sum|count)|message_duration_seconds_(sum|count))\b/;

const byNodeId = (a: MemberEntry, b: MemberEntry): number => a.node_id.localeCompare(b.node_id);
const actorsPath = (all: boolean): string => (all ? `${OBSERVER_PATHS.actors}?${ALL_ACTORS_QUERY}` : OBSERVER_PATHS.actors);

/** Queries every Alive member; failures stop the run unless best effort, where they are returned. */
async function eachAlive<T>(options: InspectOptions, list: MemberEntry[], fn: (m: MemberEntry) => Promise<T>): Promise<{ answers: Array<{ member: MemberEntry; value: T }>; failures: NodeFailure[] }> {
  const alive = list.filter((m) => m.status === 'Alive').sort(byNodeId);
  const results = await Promise.allSettled(alive.map(fn));
  const answers: Array<{ member: MemberEntry; value: T }> = [];
  const failures: NodeFailure[] = [];
  results.forEach((result, i) => {
    const member = alive[i]!;
    if (result.status === 'fulfilled') answers.push({ member, value: result.value });
    else failures.push({ node_id: member.node_id, addr: member.addr, error: errorMessage(result.reason) });
  });
  if (failures.length && !options.bestEffort) {
    const list = failures.map((f) => `${f.node_id} (${f.addr}): ${f.error}`).join('; ');
    throw new UnavailableError(`${failures.length} node(s) did not answer: ${list} (use --best_effort True to show the rest)`, { hint: REACH_HINT });
  }
  return { answers, failures };
}

export function inspectCluster(options: InspectOptions): Promise<ClusterView> {
  return withClient(options, async (client) => {
    const { seed, members: list } = await client.members(options.seeds);
    return { seed, members: sortMembers(list) };
  });
}

/** Alive members first, then the others by status; each group by node id. */
function sortMembers(list: MemberEntry[]): MemberEntry[] {
  const alive = list.filter((m) => m.status === 'Alive').sort(byNodeId);
  const others = list.filter((m) => m.status !== 'Alive').sort((a, b) => a.status.localeCompare(b.status) || byNodeId(a, b));
  return [...alive, ...others];
}

/** The actors of one node, as it lists them. */
export function inspectNodeActors(endpoint: string, options: Omit<ActorsOptions, 'seeds' | 'bestEffort'>): Promise<ActorEntry[]> {
  return withClient({ ...options, seeds: [], bestEffort: false }, async (client) => {
    let rows: ActorEntry[];
    try {
      rows = (await client.json(endpoint, actorsPath(options.all), ActorList)) as ActorEntry[];
    } catch (error) {
      throw new UnavailableError(`cannot query ${failureAt(endpoint, error)}`, { hint: REACH_HINT });
    }
    rows = rows.filter((r) => matches(r.name, options.filter));
    return options.top === undefined ? rows : rows.slice(0, options.top);
  });
}

/** Named actors across the Alive members, with where their instances run. */
export function inspectActors(options: ActorsOptions): Promise<ClusterActors> {
  return withClient(options, async (client) => {
    const { members: list } = await client.members(options.seeds);
    const { answers, failures } = await eachAlive(options, list, (m) => client.json(m.addr, actorsPath(options.all), ActorList));
    const byName = new Map<string, ActorPlacement>();
    for (const { member, value } of answers) {
      for (const row of value) {
        const entry = byName.get(row.name) ?? { name: row.name, instances: [] };
        entry.instances.push({ node_id: member.node_id, actor_id: row.actor_id });
        byName.set(row.name, entry);
      }
    }
    let actors = [...byName.values()].filter((a) => matches(a.name, options.filter)).sort((a, b) => b.instances.length - a.instances.length || a.name.localeCompare(b.name));
    if (options.top !== undefined) actors = actors.slice(0, options.top);
    return { nodes: answers.length, actors, failures };
  });
}

function matches(name: string, filter: string | undefined): boolean {
  return filter === undefined || name.toLowerCase().includes(filter.toLowerCase());
}

/** Each Alive member's metrics: every sample, or (`keyOnly`) those of the key series. */
export function inspectMetrics(options: InspectOptions & { keyOnly: boolean }): Promise<ClusterMetrics> {
  return withClient(options, async (client) => {
    const { members: list } = await client.members(options.seeds);
    const { answers, failures } = await eachAlive(options, list, (m) => client.text(m.addr, OBSERVER_PATHS.metrics));
    const nodes = answers.map(({ member, value }) => {
      const samples = parseSamples(value);
      return { node_id: member.node_id, addr: member.addr, text: value, samples: options.keyOnly ? samples.filter((s) => KEY_METRICS.test(s.series)) : samples };
    });
    return { nodes, failures };
  });
}

/** The samples of a Prometheus text answer; comments (HELP, TYPE) are skipped. */
function parseSamples(text: string): MetricSample[] {
  const samples: MetricSample[] = [];
  for (const line of text.split('\n')) {
    const m = /^([^#\s]\S*?(?:\{.*\})?)\s+(\S+)$/.exec(line);
    if (m) samples.push({ series: m[1]!, value: Number(m[2]) });
  }
  return samples;
}

interface Snapshot {
  statuses: Map<string, string>;
  instances: Map<string, number>;
  metrics: Map<string, number>;
}

const EMPTY: Snapshot = { statuses: new Map(), instances: new Map(), metrics: new Map() };

/** Key series summed over nodes, by series without the node label. */
function keyMetricTotals(texts: string[]): Map<string, number> {
  const totals = new Map<string, number>();
  for (const text of texts) {
    for (const { series, value } of parseSamples(text)) {
      if (!KEY_METRICS.test(series)) continue;
      const key = series.replace(/node_id="[^"]*",?/, '').replace(/,\}$/, '}').replace(/\{\}$/, '');
      totals.set(key, (totals.get(key) ?? 0) + value);
    }
  }
  return totals;
}

/**
 * Polls the cluster every `intervalMs` and hands each round, with what changed since the last, to
 * `onRound`. A watch is for when things go wrong, so after its first round nothing stops it: a
 * member that does not answer is reported and stays listed with the status the cluster gives it
 * (Suspect, then Failed), and when the seeds are gone the members last seen Alive are asked.
 * Only the first round needs a seed to answer.
 */
export function watchCluster(options: WatchOptions, onRound: (round: WatchRound) => void): Promise<void> {
  const wants = (k: WatchKind): boolean => options.kind === 'all' || options.kind === k;
  const tolerant = { ...options, bestEffort: true };
  return withClient(options, async (client) => {
    let previous = EMPTY;
    let state: WatchState = { members: [], actors: undefined, metrics: undefined };
    for (let round = 1; options.maxRounds === undefined || round <= options.maxRounds; round++) {
      if (options.signal.aborted) break;
      const known = state.members.filter((m) => m.status === 'Alive').map((m) => m.addr);
      let view: { seed: string; members: MemberEntry[] } | undefined;
      let unreachable: string | undefined;
      try {
        view = await client.members(round === 1 ? options.seeds : [...new Set([...options.seeds, ...known])]);
      } catch (error) {
        if (round === 1) throw error;
        unreachable = errorMessage(error);
      }
      const failures: NodeFailure[] = [];
      let snap = previous;
      if (view) {
        const list = view.members;
        snap = { statuses: new Map(list.map((m) => [`${m.node_id} (${m.addr})`, m.status])), instances: new Map(), metrics: new Map() };
        if (wants('actors')) {
          const polled = await eachAlive(tolerant, list, (m) => client.json(m.addr, OBSERVER_PATHS.actors, ActorList));
          for (const { value } of polled.answers) for (const r of value) snap.instances.set(r.name, (snap.instances.get(r.name) ?? 0) + 1);
          failures.push(...polled.failures);
        }
        if (wants('metrics')) {
          const polled = await eachAlive(tolerant, list, (m) => client.text(m.addr, OBSERVER_PATHS.metrics));
          snap.metrics = keyMetricTotals(polled.answers.map((a) => a.value));
          failures.push(...polled.failures);
        }
        state = {
          members: sortMembers(list),
          actors: wants('actors') ? [...snap.instances].map(([name, instances]) => ({ name, instances })).sort((a, b) => b.instances - a.instances || a.name.localeCompare(b.name)) : undefined,
          metrics: wants('metrics') ? [...snap.metrics].map(([series, value]) => ({ series, value })) : undefined,
        };
      }
      onRound({
        round,
        at: new Date(),
        initial: round === 1,
        source: view?.seed,
        unreachable,
        state,
        changes: [
          ...(wants('cluster') ? clusterChanges(previous, snap) : []),
          ...(wants('actors') ? diff('actors', previous.instances, snap.instances) : []),
          ...(wants('metrics') ? diff('metrics', previous.metrics, snap.metrics) : []),
        ],
        failures,
      });
      previous = snap;
      if (options.maxRounds !== undefined && round >= options.maxRounds) break;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, options.intervalMs);
        options.signal.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
      });
    }
  });
}

function clusterChanges(before: Snapshot, after: Snapshot): WatchChange[] {
  const alive = (s: Snapshot): number => [...s.statuses.values()].filter((v) => v === 'Alive').length;
  const count = alive(before) === alive(after) ? [] : [{ kind: 'cluster' as const, subject: ALIVE_NODES, before: before === EMPTY ? null : alive(before), after: alive(after) }];
  return [...count, ...diff('cluster', before.statuses, after.statuses)];
}

/** What differs between two maps: new keys, changed values, then removed keys. */
function diff(kind: WatchChange['kind'], before: Map<string, string | number>, after: Map<string, string | number>): WatchChange[] {
  const changes: WatchChange[] = [];
  for (const [subject, value] of after) {
    const was = before.get(subject);
    if (was !== value) changes.push({ kind, subject, before: was ?? null, after: value });
  }
  for (const [subject, value] of before) if (!after.has(subject)) changes.push({ kind, subject, before: value, after: null });
  return changes;
}
