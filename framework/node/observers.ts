/**
 * The observer endpoints of a node: `/cluster/members`, `/actors[?all=true]` and `/health` answer
 * JSON of the shapes in observed.ts; `/metrics` answers the node's series in the Prometheus text
 * format, the gauges computed now and the counters and histograms as counted.
 */
import type { Listener } from '../core/listener.js';
import type { Membership } from '../core/membership.js';
import { STATUSES } from '../core/members.js';
import { gauge, type NodeMetrics } from '../core/metrics.js';
import type { LocalActors } from '../core/registry.js';
import type { ActorEntry, Health, MemberList } from './observed.js';

/** What the observers read of a node. */
export interface ObservedNode {
  readonly nodeId: string;
  readonly addr: string;
  readonly cluster: string;
  readonly tls: boolean;
  /** When the node started (ms since the epoch). */
  readonly startedAt: number;
  readonly leaving: boolean;
  readonly membership: Membership;
  readonly actors: LocalActors;
  readonly metrics: NodeMetrics;
  /** What clients make the node hold: connections and bytes of unanswered calls. */
  readonly listener: Pick<Listener, 'connections' | 'budget'>;
}

export function memberList(node: ObservedNode): MemberList {
  return node.membership.list().map((m) => ({ node_id: m.id, addr: m.addr, status: m.status, actors: m.actors }));
}

/** The user's named actors, or (`all`) every actor of the node, by name. */
export function actorList(node: ObservedNode, all: boolean): ActorEntry[] {
  const rows: ActorEntry[] = [];
  for (const cell of node.actors.all()) {
    const type = node.actors.kindOf(cell);
    if (type !== 'user' && !all) continue;
    rows.push({
      ...cell.metadata(),
      ...cell.extra,
      name: cell.label,
      type,
      actor_id: cell.id,
      class: cell.meta.className,
      status: cell.status,
    });
  }
  return rows.sort((a, b) => a.name.localeCompare(b.name));
}

export function health(node: ObservedNode): Health {
  const members = node.membership.list();
  const alive = members.filter((m) => m.status === 'Alive');
  return {
    status: node.leaving ? 'leaving' : 'ok',
    node_id: node.nodeId,
    addr: node.addr,
    tls: node.tls,
    uptime_seconds: uptimeSeconds(node),
    actors_count: node.actors.size,
    actors: node.actors.userNames(),
    named_actors: [...new Set(alive.flatMap((m) => m.actors))].sort(),
    cluster: { name: node.cluster, joined: node.membership.isJoined, members: members.length, alive: alive.length },
  };
}

export function renderMetrics(node: ObservedNode): string {
  const members = node.membership.list();
  const labels = { node_id: node.nodeId };
  const parts = [
    gauge('actor_cluster_members', 'Cluster members known to this node, by status', STATUSES.map((s) => [{ ...labels, status: s }, members.filter((m) => m.status === s).length])),
    gauge('actor_actors_total', 'Actors running on this node', [[labels, node.actors.size]]),
    gauge('actor_named_actors_total', 'Named actors with an Alive instance in the cluster', [[labels, new Set(members.filter((m) => m.status === 'Alive').flatMap((m) => m.actors)).size]]),
    gauge('actor_mailbox_depth', 'Messages queued or waiting in the mailboxes of this node', [[labels, node.actors.load]]),
    gauge('actor_uptime_seconds', 'Seconds since this node started', [[labels, uptimeSeconds(node)]]),
    gauge('actor_connections', 'Connections open to this node', [[labels, node.listener.connections]]),
    gauge('actor_held_call_bytes', 'Bytes of call bodies this node holds until they are answered (limit max_node_bytes)', [[labels, node.listener.budget.used]]),
    ...processGauges(labels),
    ...Object.values(node.metrics).map((m) => m.render()),
  ];
  return `${parts.join('\n')}\n`;
}

/** The process's memory, under the names Prometheus client libraries use. */
function processGauges(labels: Record<string, string>): string[] {
  const memory = process.memoryUsage();
  return [
    gauge('process_resident_memory_bytes', 'Resident memory size in bytes', [[labels, memory.rss]]),
    gauge('nodejs_heap_size_used_bytes', 'V8 heap in use, in bytes', [[labels, memory.heapUsed]]),
    gauge('nodejs_external_memory_bytes', 'Memory of buffers and other objects outside the V8 heap, in bytes', [[labels, memory.external]]),
  ];
}

function uptimeSeconds(node: ObservedNode): number {
  return Math.round((Date.now() - node.startedAt) / 1000);
}
