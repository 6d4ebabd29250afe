/**
 * Membership wiring: the node's SWIM membership started with its hooks (status changes logged,
 * operator problems warned), and the route its messages arrive on (`POST /cluster/swim`).
 */
import type http2 from 'node:http2';
import type { ServerLimits } from '../core/limits.js';
import { errorMessage } from '../core/errors.js';
import type { Listener } from '../core/listener.js';
import { Membership, SWIM_PATH, parseSwimMessage } from '../core/membership.js';
import { MAX_SWIM_BYTES, type MembershipTimers } from '../core/members.js';
import type { NodeMetrics } from '../core/metrics.js';
import { CLUSTER_HEADER, readBody, type Transport } from '../core/transport.js';
import { refuseWithError, respond } from './route-table.js';

export interface JoinOptions {
  nodeId: string;
  addr: string;
  seeds: string[];
  transport: Transport;
  timers: MembershipTimers;
  log(message: string): void;
  warn(message: string): void;
}

/** Starts probing and, with seeds, joining. */
export function joinCluster(options: JoinOptions): Membership {
  const { log } = options;
  const membership = new Membership(options.nodeId, options.addr, options.seeds, options.transport, options.timers, {
    changed: (member, previous) => {
      if (member.status !== previous) log(`member ${member.addr} (${member.id}): ${previous ?? 'new'} -> ${member.status}`);
    },
    log,
    warn: options.warn,
  });
  membership.start();
  return membership;
}

export interface SwimServing {
  readonly membership: Membership;
  /** A leaving node has announced Left and takes no part in membership any more. */
  readonly leaving: boolean;
  readonly metrics: NodeMetrics;
  readonly cluster: string;
  readonly limits: ServerLimits;
  readonly listener: Listener;
}

/** `POST /cluster/swim`: one membership message in, the membership's answer (naming our cluster) out. */
export async function serveSwim(node: SwimServing, stream: http2.ServerHttp2Stream): Promise<void> {
  const { swimBudget: budget } = node.listener.peerOf(stream);
  let body: Buffer;
  try {
    body = await readBody(stream, { maxBytes: MAX_SWIM_BYTES, limitName: 'largest membership message', budget, timeoutMs: node.limits.bodyTimeoutMs });
  } catch (error) {
    return refuseWithError(stream, error);
  }
  try {
    let message;
    try {
      message = parseSwimMessage(JSON.parse(body.toString('utf8')));
    } catch (error) {
      node.metrics.badRequests.inc({ path: SWIM_PATH });
      return respond(stream, 400, { error: { code: 'bad-request', message: errorMessage(error) } });
    }
    if (node.leaving) return respond(stream, 503, { error: { code: 'stopped', message: 'node is leaving' } });
    respond(stream, 200, await node.membership.handle(message), { [CLUSTER_HEADER]: node.cluster });
  } finally {
    budget.give(body.length);
  }
}
