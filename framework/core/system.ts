/**
 * ActorSystem: one per process, and one node of a cluster. It wires together the parts that each
 * do one job: the local actors (registry.ts), the sending side of calls (caller.ts), membership
 * (../node/gossip.ts), and the h2c listener whose route table (../node/routes.ts) serves calls,
 * membership and the observer endpoints.
 */
import { randomUUID } from 'node:crypto';
import type http from 'node:http';
import { networkInterfaces } from 'node:os';
import { InvalidInputError } from '../../lib/errors.js';
import { isLoopbackHost } from '../../lib/loopback.js';
import { CallServer } from '../node/calls.js';
import { joinCluster } from '../node/gossip.js';
import { http1Observers, nodeRoutes } from '../node/routes.js';
import { remote } from './actor.js';
import { formatAddr, parseAddr } from './address.js';
import { DEFAULT_LIMITS, type ServerLimits } from './limits.js';
import { Caller, type ActorRef } from './caller.js';
import type { ActorClass, ActorContext, ActorSystemView, ResolveOptions, SpawnOptions } from './context.js';
import { DEFAULT_CLUSTER, DEFAULT_TIMERS, type MemberRecord, type MembershipTimers } from './members.js';
import type { Membership } from './membership.js';
import { nodeMetrics } from './metrics.js';
import { Listener, openHttp1 } from './listener.js';
import { DEFAULT_RECLAIM, reclaimAfterSurges, tuneAllocator } from './reclaim.js';
import { LocalActors } from './registry.js';
import { clusterOfNode, loadTls, type TlsFiles } from './tls.js';
import { Transport } from './transport.js';

export interface SystemOptions {
  /** host:port to bind; port 0 picks a free port. Default 127.0.0.1:0. */
  addr?: string;
  /** Address other nodes use to reach this one; default: the bound address (a real interface for 0.0.0.0). */
  advertise?: string;
  seeds?: string[];
  /**
   * The cluster's name: every request between nodes carries it, and requests and members of other
   * clusters are refused. Default: the cluster the TLS certificate names, else `default`.
   */
  cluster?: string;
  /** Mutual TLS: the cluster CA's certificate and this node's certificate and key (PEM files). */
  tls?: TlsFiles;
  /** Allows binding an address other than loopback without TLS, where anyone who reaches the port may join and call. */
  insecure?: boolean;
  /** Also serve the observers (`/metrics`, `/health`, ...) over plain HTTP/1.1 at this host:port. */
  metricsAddr?: string;
  /** What clients may make the node hold; unset limits keep their defaults. */
  limits?: Partial<ServerLimits>;
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
  readonly metrics = nodeMetrics();
  readonly startedAt = Date.now();
  readonly actors: LocalActors;
  readonly calls: CallServer;
  readonly limits: ServerLimits;
  transport!: Transport;
  listener!: Listener;
  private stopReclaim: (() => void) | undefined;
  membership!: Membership;
  cluster = DEFAULT_CLUSTER;
  tls = false;
  addr = '';
  leaving = false;
  private metricsServer: http.Server | undefined;
  private caller!: Caller;
  private readonly log: (message: string) => void;

  private constructor(options: SystemOptions) {
    this.log = options.log ?? ((m) => process.stderr.write(`${m}\n`));
    this.limits = { ...DEFAULT_LIMITS, ...options.limits };
    this.actors = new LocalActors(this, this.metrics, this.log, (names) => {
      if (!this.leaving) this.membership.setActors(names);
    });
    this.calls = new CallServer({
      nodeId: this.nodeId,
      actors: this.actors,
      metrics: this.metrics,
      limits: this.limits,
      peerOf: (stream) => this.listener.peerOf(stream),
      log: this.log,
    });
  }

  /**
   * Binds the listener (HTTP/2 and HTTP/1.1 observers on one port, TLS when given), joins the
   * cluster through its seeds and starts the node's system actor. Safe by default: an address
   * other than loopback needs TLS, or `insecure` (and gets a warning).
   */
  static async start(options: SystemOptions = {}): Promise<ActorSystem> {
    const system = new ActorSystem(options);
    const warn = options.warn ?? system.log;
    const addr = options.addr ?? '127.0.0.1:0';
    const material = options.tls ? loadTls(options.tls) : undefined;
    system.cluster = clusterOfNode(options.cluster, material);
    system.tls = material !== undefined;
    const insecure = options.insecure === true;
    if (!material) {
      guardExposure(addr, insecure, warn, {
        refusal: `address ${addr} is reachable from other machines, and without TLS anyone who reaches it can join the cluster and call its actors`,
        hint: 'configure TLS ([tls] ca, cert, key; see `actorctl cert`), bind 127.0.0.1, or accept the risk with --insecure',
        warning: `listening on ${addr} without TLS (--insecure): anyone who reaches it can join cluster '${system.cluster}' and call its actors`,
      });
    }
    // The observers' own port is plain HTTP even on a TLS node: what a client certificate guards on the node's port would be open there.
    if (options.metricsAddr !== undefined) {
      const metricsAddr = options.metricsAddr;
      guardExposure(metricsAddr, insecure, warn, {
        refusal: `metrics address ${metricsAddr} is reachable from other machines, and it serves plain HTTP without authentication: anyone who reaches it can read the members, actors and health of cluster '${system.cluster}'`,
        hint: `bind it to 127.0.0.1, scrape /metrics on the node's own port${material ? ' with a client certificate' : ''}, or accept the risk with --insecure`,
        warning: `serving the observers on ${metricsAddr} over plain HTTP (--insecure): anyone who reaches it can read the members, actors and health of cluster '${system.cluster}'`,
      });
    }
    system.transport = new Transport({ cluster: system.cluster, tls: material });
    const routes = nodeRoutes(system, { testFaults: options.testFaults ?? false });
    system.listener = await Listener.open({
      addr,
      limits: system.limits,
      tls: material ? { material, cluster: system.cluster } : undefined,
      onStream: routes.dispatch,
      onHttp1: http1Observers(system),
      refused: (reason, message) => {
        system.metrics.refused.inc({ reason });
        system.log(message);
      },
    });
    tuneAllocator();
    system.stopReclaim = reclaimAfterSurges(system.listener.budget, DEFAULT_RECLAIM, (before, after) =>
      system.log(`gave memory back after a surge of call bodies: resident ${mib(before)} -> ${mib(after)} MiB`),
    );
    if (options.metricsAddr) {
      try {
        system.metricsServer = await openHttp1(options.metricsAddr, http1Observers(system));
      } catch (error) {
        // The node's own listener is open already, and would keep the process running.
        system.stopReclaim();
        await system.listener.close();
        throw error;
      }
    }
    const bound = system.listener.address();
    system.addr = options.advertise ?? formatAddr(advertisedHost(parseAddr(addr).host), bound.port);
    system.membership = joinCluster({
      nodeId: system.nodeId,
      addr: system.addr,
      seeds: options.seeds ?? [],
      transport: system.transport,
      timers: { ...DEFAULT_TIMERS, ...options.timers },
      log: system.log,
      warn,
    });
    system.caller = new Caller({
      nodeId: system.nodeId,
      transport: system.transport,
      membership: system.membership,
      actors: system.actors,
      metrics: system.metrics,
      callTimeoutMs: options.callTimeoutMs ?? 30_000,
      maxStreamsPerPeer: system.limits.maxStreams,
      log: system.log,
    });
    await system.actors.spawnSystem(nodeActor(system), SYSTEM_NODE_ACTOR);
    return system;
  }

  /** Where the observers answer plain HTTP/1.1 besides the node's own port (`metricsAddr`), if anywhere. */
  get metricsAddress(): string | undefined {
    const bound = this.metricsServer?.address();
    return bound && typeof bound === 'object' ? formatAddr(bound.address, bound.port) : undefined;
  }

  async spawn(cls: ActorClass<never>, options: SpawnOptions = {}): Promise<ActorRef> {
    return this.caller.local(await this.actors.spawn(cls, options));
  }

  /** Stops one local actor (by name or id). */
  stopActor(nameOrId: string): Promise<boolean> {
    return this.actors.stop(nameOrId);
  }

  /** Alive (or, when asked, Suspect) instances of a named actor across the cluster, this node's first. */
  instances(name: string, status: 'Alive' | 'Suspect' = 'Alive'): MemberRecord[] {
    return this.membership.instancesOf(name, status);
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
    this.transport.close();
    this.metricsServer?.close();
    this.metricsServer?.closeAllConnections();
    this.stopReclaim?.();
    await this.listener.close();
  }
}

/**
 * An address other machines can reach, where nothing authenticates who connects, is refused
 * unless the user accepted that with `insecure`; then it is warned of.
 */
function guardExposure(addr: string, insecure: boolean, warn: (message: string) => void, text: { refusal: string; hint: string; warning: string }): void {
  if (isLoopbackHost(parseAddr(addr).host)) return;
  if (!insecure) throw new InvalidInputError(text.refusal, { hint: text.hint });
  warn(text.warning);
}

/** The host other nodes should dial: a wildcard bind advertises the first external IPv4 address. */
function advertisedHost(host: string): string {
  if (host !== '0.0.0.0' && host !== '::') return host;
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  return '127.0.0.1';
}

const mib = (bytes: number): string => (bytes / (1024 * 1024)).toFixed(0);
