/**
 * ActorSystem: one per process, and one node of a cluster. It wires together the parts that each
 * do one job: the local actors (registry.ts), the sending side of calls (caller.ts), membership
 * (../node/gossip.ts), and the h2c listener whose route table (../node/routes.ts) serves calls,
 * membership and the observer endpoints.
 */
import { randomUUID } from 'node:crypto';
import { networkInterfaces } from 'node:os';
import { CallServer } from '../node/calls.js';
import { joinCluster } from '../node/gossip.js';
import { nodeRoutes } from '../node/routes.js';
import { remote } from './actor.js';
import { formatAddr } from './address.js';
import { Caller, type ActorRef } from './caller.js';
import type { ActorClass, ActorContext, ActorSystemView, ResolveOptions, SpawnOptions } from './context.js';
import { DEFAULT_TIMERS, type MemberRecord, type MembershipTimers } from './members.js';
import type { Membership } from './membership.js';
import { nodeMetrics } from './metrics.js';
import { LocalActors } from './registry.js';
import { Transport } from './transport.js';

export interface SystemOptions {
  /** host:port to bind; port 0 picks a free port. Default 127.0.0.1:0. */
  addr?: string;
  /** Address other nodes use to reach this one; default: the bound address (a real interface for 0.0.0.0). */
  advertise?: string;
  seeds?: string[];
  timers?: Partial<MembershipTimers>;
  /** Default timeout of ask and stream calls. */
  callTimeoutMs?: number;
  /** Enables POST /_test/faults, the test-only hook that blocks traffic to given addresses. */
  testFaults?: boolean;
  log?: (message: string) => void;
  /** Where problems an operator should see go; default: `log`. */
  warn?: (message: string) => void;
}

const SYSTEM_NODE_ACTOR = 'system/node';

/** The system actor every node runs: answers who it is, so a node can be called like any actor. */
function nodeActor(system: ActorSystem): ActorClass<never> {
  class NodeActor {
    context?: ActorContext;
    info(): Record<string, unknown> {
      return { node_id: system.nodeId, addr: system.addr, members: system.membership.list().length };
    }
    ping(): string {
      return 'pong';
    }
  }
  return remote(NodeActor);
}

export class ActorSystem implements ActorSystemView {
  readonly nodeId = randomUUID().replaceAll('-', '');
  readonly transport = new Transport();
  readonly metrics = nodeMetrics();
  readonly startedAt = Date.now();
  readonly actors: LocalActors;
  readonly calls: CallServer;
  membership!: Membership;
  addr = '';
  leaving = false;
  private caller!: Caller;
  private readonly log: (message: string) => void;

  private constructor(options: SystemOptions) {
    this.log = options.log ?? ((m) => process.stderr.write(`${m}\n`));
    this.actors = new LocalActors(this, this.metrics, this.log, (names) => {
      if (!this.leaving) this.membership.setActors(names);
    });
    this.calls = new CallServer({ nodeId: this.nodeId, actors: this.actors, metrics: this.metrics, log: this.log });
  }

  static async start(options: SystemOptions = {}): Promise<ActorSystem> {
    const system = new ActorSystem(options);
    const routes = nodeRoutes(system, { testFaults: options.testFaults ?? false });
    const bound = await system.transport.listen(options.addr ?? '127.0.0.1:0', routes.dispatch);
    system.addr = options.advertise ?? formatAddr(advertisedHost(bound.host), bound.port);
    system.membership = joinCluster({
      nodeId: system.nodeId,
      addr: system.addr,
      seeds: options.seeds ?? [],
      transport: system.transport,
      timers: { ...DEFAULT_TIMERS, ...options.timers },
      log: system.log,
      warn: options.warn ?? system.log,
    });
    system.caller = new Caller({
      nodeId: system.nodeId,
      transport: system.transport,
      membership: system.membership,
      actors: system.actors,
      metrics: system.metrics,
      callTimeoutMs: options.callTimeoutMs ?? 30_000,
      log: system.log,
    });
    await system.actors.spawnSystem(nodeActor(system), SYSTEM_NODE_ACTOR);
    return system;
  }

  async spawn(cls: ActorClass<never>, options: SpawnOptions = {}): Promise<ActorRef> {
    return this.caller.local(await this.actors.spawn(cls, options));
  }

  /** Stops one local actor (by name or id). */
  stopActor(nameOrId: string): Promise<boolean> {
    return this.actors.stop(nameOrId);
  }

  /** Alive instances of a named actor across the cluster, this node's first. */
  instances(name: string): MemberRecord[] {
    return this.membership.instancesOf(name);
  }

  /** A reference that picks an Alive instance of `name` for every call. */
  resolve(name: string, options: ResolveOptions = {}): ActorRef {
    return this.caller.resolve(name, options);
  }

  /** A reference to one actor by id on a given node (named or not), as `/actors` lists it. */
  actor(nodeId: string, actorId: string): ActorRef {
    return this.caller.actor(nodeId, actorId);
  }

  /** Leaves the cluster (Left is announced to the members), stops the actors, closes the listener. */
  async shutdown(): Promise<void> {
    if (this.leaving) return;
    this.leaving = true;
    await this.membership.leave();
    await this.actors.stopAll();
    this.caller.close();
    this.calls.close();
    await this.transport.close();
  }
}

/** The host other nodes should dial: a wildcard bind advertises the first external IPv4 address. */
function advertisedHost(host: string): string {
  if (host !== '0.0.0.0' && host !== '::') return host;
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  return '127.0.0.1';
}
