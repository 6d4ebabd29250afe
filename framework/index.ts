/**
 * The framework's engine: the one module the command line (and anything else outside framework/)
 * imports. Constants and types are exported as they are; each operation loads its implementation
 * on first use, so that loading the tool (for --help, or another command) costs nothing of the
 * actor system, the inspect client or the load generator.
 *
 * Operations take typed arguments and return results (a running system, what inspect found, a
 * benchmark report); they never parse flags or render.
 */
import { join } from 'node:path';
import type { TObject } from '@sinclair/typebox';
import type { CaRequest, CertificateFiles, LeafRequest } from './core/cert-files.js';
import type { LoadedActorClass } from './core/loader.js';
import type { ParamInfo } from './core/params.js';
import type { ActorSystem, SystemOptions } from './core/system.js';
import type { ActorsOptions, ClusterActors, ClusterMetrics, ClusterView, InspectOptions, WatchOptions, WatchRound } from './node/inspect-types.js';
import type { ClientCall } from './node/call-client.js';
import type { ActorEntry } from './node/observed.js';
import type { BenchConfig, BenchIO, BenchReport } from './loadgen/types.js';
import type { ModelShape } from './serving/models/tiny.js';

// Address checks are pure functions of a leaf module: the command line checks --addr and --seeds with them.
export { DEFAULT_NODE_PORT, normalizeAddr, parseAddr } from './core/address.js';
export { DEFAULT_CLUSTER, DEFAULT_TIMERS, STATUSES, TIMER_SETTING_KEYS, clusterNameProblem, type MemberRecord, type MemberStatus, type MembershipTimers } from './core/members.js';
export { DEFAULT_LIMITS, LIMIT_SETTING_KEYS, type ServerLimits } from './core/limits.js';
export { ALIVE_NODES, WATCH_KINDS, type WatchKind } from './node/inspect-types.js';
export { ARRIVALS, BENCH_KINDS, MAX_RATE, MAX_USERS, TOKENIZERS, type Arrival, type BenchKind, type TokenizerName } from './loadgen/types.js';
export type { ActorClass, ActorContext, ActorHandle, CallOptions, ResolveOptions, ResolvePolicy, SpawnOptions } from './core/context.js';
export type { LoadedActorClass } from './core/loader.js';
export type { ParamInfo } from './core/params.js';
export type { ActorSystem, SystemOptions } from './core/system.js';
export type { TlsFiles } from './core/tls.js';
export type { CaRequest, CertificateFiles, LeafRequest } from './core/cert-files.js';
export type { ActorPlacement, ActorsOptions, ClusterActors, ClusterMetrics, ClusterView, InspectOptions, MetricSample, NodeFailure, NodeMetricsView, WatchChange, WatchOptions, WatchRound, WatchState } from './node/inspect-types.js';
export type { ActorEntry, MemberEntry } from './node/observed.js';
export type { ClientCall, ClientCallMode } from './node/call-client.js';
export { isActorError, type ActorError, type ActorErrorCode } from './core/errors.js';
export type { BenchConfig, BenchIO, BenchReport, LatencySummary, PhaseReport, Slo, TokenTarget } from './loadgen/types.js';
export type { ChatMessage, FinishReason, GenerateChunk, GenerateRequest, LoadReport, Usage } from './serving/contract.js';
export type { ModelShape } from './serving/models/tiny.js';

// ---- actors ----

/** The actor class a class path (`module.path.ClassName`) names; invalid input lists every place tried. */
export async function loadActorClass(classPath: string): Promise<LoadedActorClass> {
  return (await import('./core/loader.js')).loadActorClass(classPath);
}

/** The constructor parameters of the class a class path names, for help. */
export async function describeActorClass(classPath: string): Promise<{ className: string; params: ParamInfo[] }> {
  const loader = await import('./core/loader.js');
  const loaded = await loader.loadActorClass(classPath);
  return { className: loaded.className, params: loader.describeParams(loaded.meta.params) };
}

/** Constructor parameters from JSON objects and `--key value` words (which win), typed and checked by the class's schema. */
export async function actorParams(schema: TObject, given: { json: readonly string[]; words: readonly string[] }): Promise<Record<string, unknown>> {
  return (await import('./core/loader.js')).actorParams(schema, given);
}

/**
 * Starts loading the node's code without waiting for it: `actorctl actor` calls this before it
 * loads the actor class, so that the two loads overlap (a node is visible to the cluster sooner).
 */
export function prepareSystem(): void {
  void import('./core/system.js').catch(() => {});
}

/** Starts an actor system node: binds its h2c listener and joins the cluster through its seeds. */
export async function startSystem(options: SystemOptions): Promise<ActorSystem> {
  return (await import('./core/system.js')).ActorSystem.start(options);
}

/** Makes a cluster CA: `<dir>/ca.crt` and its key `<dir>/ca.key` (mode 0600). */
export async function createCa(request: CaRequest): Promise<CertificateFiles> {
  return (await import('./core/cert-files.js')).createCa(request);
}

/** Makes a node or client certificate signed by the CA in `request.dir`: `<out>/<name>.crt` and `.key` (mode 0600). */
export async function createCertificate(request: LeafRequest): Promise<CertificateFiles> {
  return (await import('./core/cert-files.js')).createLeaf(request);
}

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

/** Calls a named actor from outside the cluster: the reply of an ask; a streamed reply's items go to `onItem`. */
export async function callActor(call: ClientCall, onItem: (item: unknown) => void): Promise<unknown> {
  return (await import('./node/call-client.js')).callActor(call, onItem);
}

// ---- bench ----

/** Runs a load test against a chat-completions endpoint and returns its report. */
export async function runBenchmark(config: BenchConfig, io: BenchIO): Promise<BenchReport> {
  return (await import('./loadgen/run.js')).runBenchmark(config, io);
}

// ---- serving ----

/**
 * Writes the project's generated model (a bigram model of its own corpus, serving/models/tiny.ts)
 * of `shape` to `path`; false when the file already held exactly those bytes.
 */
export async function writeGeneratedModel(path: string, shape: ModelShape): Promise<boolean> {
  return (await import('./serving/models/tiny.js')).writeBigramModel(path, shape);
}

/** Makes the tiny model among the build's own models (`dist/models/tiny.gguf`), where workers find it by the name `tiny`. */
export async function makeTinyModel(): Promise<{ path: string; written: boolean }> {
  const { TINY_SHAPE, writeBigramModel } = await import('./serving/models/tiny.js');
  const { TINY_MODEL, builtinModelsDirectory } = await import('./serving/models/locate.js');
  const path = join(builtinModelsDirectory(), `${TINY_MODEL}.gguf`);
  return { path, written: writeBigramModel(path, TINY_SHAPE) };
}
