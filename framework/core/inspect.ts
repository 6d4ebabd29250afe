/**
 * `actorctl inspect`: reads the observer endpoints of a cluster's nodes over h2c without joining it,
 * and lays out what it found (reference §4, with real metric names in the summary and metric changes
 * in `watch`).
 */
import { Transport } from './transport.js';

export class InspectUnavailable extends Error {}
export class InspectInvalid extends Error {}

export interface InspectOptions {
  seeds: string[];
  timeoutMs: number;
  bestEffort: boolean;
  write(line: string): void;
}

interface MemberRow {
  node_id: string;
  addr?: string;
  status: string;
}

interface ActorRow {
  name: string;
  type?: string;
  actor_id?: string;
  class?: string;
  module?: string;
}

const RULE = '='.repeat(80);
const THIN = '-'.repeat(80);
const MAX_ROWS = 64;

/** `host` -> `host:8000`; a leading http:// is dropped. */
export function normalizeAddr(addr: string): string {
  const a = addr.trim().replace(/^https?:\/\//, '').replace(/\/+$/, '');
  if (!a) throw new InspectInvalid('empty node address');
  return /:\d+$/.test(a) ? a : `${a}:8000`;
}

export function parseSeeds(text: string | undefined): string[] {
  const seeds = (text ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  if (!seeds.length) throw new InspectInvalid('--seeds needs at least one address (host:port)');
  return seeds.map(normalizeAddr);
}

const cols = (widths: number[], values: string[]): string => values.map((v, i) => v.padEnd(widths[i] ?? 0)).join(' ').trimEnd();

class Client {
  private readonly transport = new Transport();
  constructor(private readonly timeoutMs: number) {}

  async text(addr: string, path: string): Promise<string> {
    const reply = await this.transport.request(addr, path, { method: 'GET', timeoutMs: this.timeoutMs });
    if (reply.status !== 200) throw new Error(`${addr}${path} answered ${reply.status}`);
    return reply.body.toString('utf8');
  }

  async json<T>(addr: string, path: string): Promise<T> {
    const text = await this.text(addr, path);
    try {
      return JSON.parse(text) as T;
    } catch {
      throw new Error(`${addr}${path} did not answer JSON`);
    }
  }

  close(): Promise<void> {
    return this.transport.close();
  }
}

async function withClient<T>(options: InspectOptions, fn: (c: Client) => Promise<T>): Promise<T> {
  const client = new Client(options.timeoutMs);
  try {
    return await fn(client);
  } finally {
    await client.close();
  }
}

/** Members as seen by the first seed that answers; no seed answering is Unavailable. */
async function members(client: Client, options: InspectOptions): Promise<{ seed: string; members: MemberRow[] }> {
  const failures: string[] = [];
  for (const seed of options.seeds) {
    try {
      const list = await client.json<MemberRow[]>(seed, '/cluster/members');
      if (!Array.isArray(list)) throw new Error(`${seed}/cluster/members is not a list`);
      return { seed, members: list };
    } catch (error) {
      failures.push(`${seed}: ${(error as Error).message}`);
    }
  }
  throw new InspectUnavailable(`cannot connect to any seed node (${failures.join('; ')})`);
}

/** Queries every Alive member; failures stop the run unless best effort, where they are reported. */
async function eachAlive<T>(client: Client, options: InspectOptions, list: MemberRow[], fn: (m: MemberRow) => Promise<T>): Promise<Array<{ member: MemberRow; value: T }>> {
  const alive = list.filter((m) => m.status === 'Alive' && m.addr).sort((a, b) => a.node_id.localeCompare(b.node_id));
  const results = await Promise.allSettled(alive.map(fn));
  const failed = alive.flatMap((m, i) => (results[i]!.status === 'rejected' ? [`${m.node_id} (${m.addr}): ${((results[i] as PromiseRejectedResult).reason as Error).message}`] : []));
  if (failed.length && !options.bestEffort) throw new InspectUnavailable(`${failed.length} node(s) did not answer: ${failed.join('; ')} (use --best_effort True to show the rest)`);
  if (failed.length) {
    options.write(`Warning: Failed to query ${failed.length} node(s):`);
    for (const f of failed) options.write(`  ${f}`);
  }
  return alive.flatMap((member, i) => (results[i]!.status === 'fulfilled' ? [{ member, value: (results[i] as PromiseFulfilledResult<T>).value }] : []));
}

export async function inspectCluster(options: InspectOptions): Promise<void> {
  const w = options.write;
  w(`Connecting to cluster via seeds: ${JSON.stringify(options.seeds)}...`);
  await withClient(options, async (client) => {
    const { members: list } = await members(client, options);
    const alive = list.filter((m) => m.status === 'Alive').sort((a, b) => a.node_id.localeCompare(b.node_id));
    w(`Cluster Status: ${list.length} total nodes (${alive.length} alive)`);
    w(RULE);
    w('Status Summary:');
    const counts = new Map<string, number>();
    for (const m of list) counts.set(m.status, (counts.get(m.status) ?? 0) + 1);
    for (const [status, n] of [...counts].sort(([a], [b]) => a.localeCompare(b))) w(`  ${status}: ${n}`);
    w('');
    const widths = [33, 30, 15];
    w(cols(widths, ['Node ID', 'Address', 'Status']));
    w(THIN);
    for (const m of alive.slice(0, MAX_ROWS)) w(cols(widths, [m.node_id, m.addr ?? '-', m.status]));
    if (alive.length > MAX_ROWS) w(`Warning: showing ${MAX_ROWS} of ${alive.length} alive nodes`);
    const others = list.filter((m) => m.status !== 'Alive').sort((a, b) => a.status.localeCompare(b.status) || a.node_id.localeCompare(b.node_id));
    if (others.length) {
      w('');
      w(`Non-Alive Members (${others.length}):`);
      for (const m of others) w(`  ${m.node_id} (${m.addr ?? '-'}) - ${m.status}`);
    }
    w(RULE);
  });
}

export interface ActorsOptions extends InspectOptions {
  endpoint?: string;
  top?: number;
  filter?: string;
  all: boolean;
}

interface ActorSummary {
  name: string;
  ids: string[];
  nodes: string[];
}

async function collectActors(client: Client, options: ActorsOptions): Promise<{ nodes: number; actors: ActorSummary[] }> {
  const { members: list } = await members(client, options);
  const path = options.all ? '/actors?all=true' : '/actors';
  const answers = await eachAlive(client, options, list, (m) => client.json<ActorRow[]>(m.addr!, path));
  const byName = new Map<string, ActorSummary>();
  for (const { member, value } of answers) {
    for (const row of value) {
      const entry = byName.get(row.name) ?? { name: row.name, ids: [], nodes: [] };
      entry.ids.push(`${member.node_id.slice(0, 8)}:${(row.actor_id ?? '').slice(0, 8)}`);
      entry.nodes.push(member.node_id);
      byName.set(row.name, entry);
    }
  }
  return { nodes: answers.length, actors: [...byName.values()] };
}

export async function inspectActors(options: ActorsOptions): Promise<void> {
  const w = options.write;
  const keep = (name: string): boolean => !options.filter || name.toLowerCase().includes(options.filter.toLowerCase());
  await withClient(options, async (client) => {
    if (options.endpoint) {
      const path = options.all ? '/actors?all=true' : '/actors';
      let rows: ActorRow[];
      try {
        rows = await client.json<ActorRow[]>(options.endpoint, path);
      } catch (error) {
        throw new InspectUnavailable(`cannot query ${options.endpoint}: ${(error as Error).message}`);
      }
      rows = rows.filter((r) => keep(r.name));
      if (options.top !== undefined) rows = rows.slice(0, options.top);
      if (!rows.length) return w('No actors found.');
      const widths = [25, 8, 33, 25, 30];
      w(cols(widths, ['Name', 'Type', 'Actor ID', 'Class', 'Module']));
      w('-'.repeat(120));
      for (const r of rows) w(cols(widths, [r.name, r.type ?? '', r.actor_id ?? '', r.class ?? '', r.module ?? '']));
      w('');
      w(`Total: ${rows.length} actor(s)`);
      return;
    }
    const { nodes, actors } = await collectActors(client, options);
    w(`Found ${nodes} alive nodes`);
    let shown = actors.filter((a) => keep(a.name)).sort((a, b) => b.ids.length - a.ids.length || a.name.localeCompare(b.name));
    if (options.top !== undefined) shown = shown.slice(0, options.top);
    if (!shown.length) return w('No actors found.');
    w('');
    w(`Actor Distribution (${shown.length} unique actors):`);
    w('='.repeat(100));
    const widths = [30, 25, 12, 30];
    w(cols(widths, ['Actor Name', 'Actor ID (node:local)', 'Instances', 'Nodes']));
    w('-'.repeat(100));
    for (const a of shown) {
      const id = a.ids.length > 1 ? `${a.ids[0]} (+${a.ids.length - 1} more)` : (a.ids[0] ?? '');
      const nodeList = a.nodes.slice(0, 5).map((n) => n.slice(0, 8)).join(', ') + (a.nodes.length > 5 ? ` ... (+${a.nodes.length - 5} more)` : '');
      w(cols(widths, [a.name, id, String(a.ids.length), nodeList]));
    }
    w('');
    w(`Total: ${shown.length} unique actors, ${shown.reduce((n, a) => n + a.ids.length, 0)} instances`);
    w(`Across ${nodes} nodes`);
  });
}

/** The summary keeps these series: membership, actor counts, message counts and latency sums. */
export const KEY_METRICS = /^actor_(cluster_members|actors_total|named_actors_total|messages_total|calls_total|mailbox_depth|bad_requests_total|ask_duration_seconds_(sum|count)|message_duration_seconds_(sum|count))\b/;

export async function inspectMetrics(options: InspectOptions & { raw: boolean }): Promise<void> {
  const w = options.write;
  await withClient(options, async (client) => {
    const { members: list } = await members(client, options);
    const answers = await eachAlive(client, options, list, (m) => client.text(m.addr!, '/metrics'));
    answers.forEach(({ member, value }, i) => {
      w(RULE);
      w(`[${i + 1}/${answers.length}] Node ${member.node_id} (${member.addr})`);
      w(RULE);
      if (options.raw) return w(value.trimEnd());
      const key = value.split('\n').filter((l) => KEY_METRICS.test(l)).slice(0, 20);
      for (const line of key.length ? key : ['(no key metrics found)']) w(line);
      w('');
    });
    if (!options.raw) w('(Use --raw True to see full metrics)');
  });
}

export type WatchKind = 'cluster' | 'actors' | 'metrics' | 'all';

interface Snapshot {
  statuses: Map<string, string>;
  instances: Map<string, number>;
  metrics: Map<string, number>;
}

/** Sums key metric series over nodes, by series name without the node label. */
function keyMetricTotals(texts: string[]): Map<string, number> {
  const totals = new Map<string, number>();
  for (const text of texts) {
    for (const line of text.split('\n')) {
      if (!KEY_METRICS.test(line)) continue;
      const m = /^(\S+?)(\{.*\})?\s+(\S+)$/.exec(line);
      if (!m) continue;
      const labels = (m[2] ?? '').replace(/node_id="[^"]*",?/, '').replace(/,\}$/, '}').replace(/^\{\}$/, '');
      const key = `${m[1]}${labels}`;
      totals.set(key, (totals.get(key) ?? 0) + Number(m[3]));
    }
  }
  return totals;
}

export async function inspectWatch(options: InspectOptions & { intervalMs: number; kind: WatchKind; maxRounds?: number; signal: AbortSignal }): Promise<void> {
  const w = options.write;
  const stamp = (): string => new Date().toTimeString().slice(0, 8);
  const wants = (k: WatchKind): boolean => options.kind === 'all' || options.kind === k;
  w(`Watching cluster via seeds: ${options.seeds.join(', ')}`);
  w(`Refresh interval: ${options.intervalMs / 1000}s, Watching: ${options.kind}`);
  w('Press Ctrl+C to stop');
  await withClient(options, async (client) => {
    let previous: Snapshot | undefined;
    for (let round = 1; options.maxRounds === undefined || round <= options.maxRounds; round++) {
      if (options.signal.aborted) break;
      const { members: list } = await members(client, options);
      const snap: Snapshot = { statuses: new Map(list.map((m) => [`${m.node_id} (${m.addr ?? '-'})`, m.status])), instances: new Map(), metrics: new Map() };
      if (wants('actors')) {
        const answers = await eachAlive(client, options, list, (m) => client.json<ActorRow[]>(m.addr!, '/actors'));
        for (const { value } of answers) for (const r of value) snap.instances.set(r.name, (snap.instances.get(r.name) ?? 0) + 1);
      }
      if (wants('metrics')) {
        const answers = await eachAlive(client, options, list, (m) => client.text(m.addr!, '/metrics'));
        snap.metrics = keyMetricTotals(answers.map((a) => a.value));
      }
      const alive = (s: Snapshot): number => [...s.statuses.values()].filter((v) => v === 'Alive').length;
      if (!previous) {
        if (wants('cluster')) w(`[${stamp()}] Initial state: ${alive(snap)}/${snap.statuses.size} nodes alive`);
        if (wants('actors')) w(`[${stamp()}] Initial state: ${snap.instances.size} unique actors, ${[...snap.instances.values()].reduce((a, b) => a + b, 0)} total instances`);
        if (wants('metrics')) w(`[${stamp()}] Initial state: ${snap.metrics.size} key metric series`);
      } else {
        const changes: string[] = [];
        if (wants('cluster')) {
          if (alive(previous) !== alive(snap)) changes.push(`Alive nodes: ${alive(previous)} -> ${alive(snap)}`);
          for (const [node, status] of snap.statuses) {
            const before = previous.statuses.get(node);
            if (before !== status) changes.push(`Node ${node}: ${before ?? '(new)'} -> ${status}`);
          }
          for (const node of previous.statuses.keys()) if (!snap.statuses.has(node)) changes.push(`Node ${node}: ${previous.statuses.get(node)} -> (removed)`);
        }
        if (wants('actors')) {
          const added = [...snap.instances.keys()].filter((n) => !previous!.instances.has(n));
          const removed = [...previous.instances.keys()].filter((n) => !snap.instances.has(n));
          if (added.length) changes.push(`New actors: ${added.join(', ')}`);
          if (removed.length) changes.push(`Removed actors: ${removed.join(', ')}`);
          for (const [n, c] of snap.instances) {
            const before = previous.instances.get(n);
            if (before !== undefined && before !== c) changes.push(`${n}: ${before} -> ${c} instances`);
          }
        }
        if (wants('metrics')) {
          for (const [k, v] of snap.metrics) {
            const before = previous.metrics.get(k);
            if (before !== v) changes.push(`${k}: ${before ?? '(new)'} -> ${v}`);
          }
        }
        if (changes.length) {
          w(`[${stamp()}] Changes detected:`);
          for (const c of changes) w(`  • ${c}`);
        } else w(`[${stamp()}] No changes`);
      }
      previous = snap;
      if (options.maxRounds !== undefined && round >= options.maxRounds) break;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, options.intervalMs);
        options.signal.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
      });
    }
    if (options.signal.aborted) w('Watch stopped.');
  });
}
