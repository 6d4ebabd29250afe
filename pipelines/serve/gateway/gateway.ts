/**
 * The gateway of `serve`: where accepted events go (the event log in the state directory), the
 * dataset they are projected into (`--gateway-dataset`, created empty when missing, mounted for
 * the read-only API), the split of traces into partitions, and the projection worker. The event
 * gateway's routes (routes.ts) and the LLM capture gateway (capture/) both append through it.
 *
 * State (`--gateway-state DIRECTORY`, by default the dataset's own directory for a local dataset;
 * required for an object-store one): everything under `<state>/gateway/`: `events/` (the log),
 * `projected.json`, and the capture gateway's `capture/` (session index, debug log, Markdown).
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { InvalidInputError } from '../../../lib/errors.js';
import { limitFromEnv } from '../../../lib/env-limit.js';
import type { Logger } from '../../../lib/log.js';
import { maintainDataset } from '../../dataset/compaction.js';
import { COMPACTION_DEFAULTS } from '../../dataset/defaults.js';
import { GATEWAY_STATE_DIR, readManifest } from '../../dataset/layout.js';
import { canonicalPath } from '../../dataset/recover.js';
import { LocalObjectStore, type ObjectStore } from '../../dataset/store.js';
import type { DatasetSink, DatasetWriterOptions } from '../../dataset/writer.js';
import { beginWrite, type ImportOptions } from '../../import/import.js';
import { placeOf, resolveDataset, type ResolveContext } from '../../pins/resolve.js';
import { PriceList } from '../../pricing/cost.js';
import { loadConfig } from '../../pins/config.js';
import { datasetArchive } from './archive.js';
import { tracePath } from './decode.js';
import { DEFAULT_MAX_PENDING_BYTES, DEFAULT_MAX_TRACE_EVENTS, EventLog, type AppendRequest, type AppendResult, type LogLimits } from './event-log.js';
import type { AppendAnswer, EventRecord } from './events.js';
import { Projection, projectedStatePath } from './projection.js';
import { parseSplitTemplate, UNKNOWN_USER, type SplitTemplate } from './split.js';

/** How long a projection batch waits for another writer of the dataset before it gives up and retries. */
const PROJECTION_LOCK_TIMEOUT_MS = 60_000;

export interface GatewayOptions {
  /** `--gateway-dataset`: a path, an `s3://` uri or a pin. */
  dataset: string;
  /** `--gateway-state`. */
  state?: string | undefined;
  /** `--gateway-split`. */
  split?: string | undefined;
  idleMs: number;
  log: Logger;
}

export interface Gateway {
  /** The dataset as given, for answers and messages. */
  datasetUri: string;
  /** What the read-only API mounts (`GATEWAY_MOUNT`): the dataset argument resolved again by the mounts. */
  mountArg: string;
  /** `<state>/gateway`. */
  dir: string;
  split: SplitTemplate | undefined;
  idleMs: number;
  events: EventLog;
  projection: Projection;
  /** Appends a checked batch of one trace (durable when it resolves). */
  append(request: TraceAppend): Promise<AppendAnswer & { result: AppendResult }>;
  /** Appends batches of several traces as one: all are durable when it resolves, or none was stored. */
  appendAll(requests: readonly TraceAppend[]): Promise<AppendResult[]>;
  /** Waits for the writes under way, stops projection. */
  close(): Promise<void>;
}

export interface TraceAppend {
  agentId: string;
  sessionId: string;
  rootSessionId?: string | undefined;
  /** `{user}` of the split (the request's user header), when given. */
  user?: string | undefined;
  records: readonly EventRecord[];
  /** Past the capacity bound too (the capture gateway's records). */
  mustTake?: boolean;
}

/** Checks the gateway's arguments that need no I/O: the split template (exit 2 before anything listens). */
export function checkGatewayArguments(options: Pick<GatewayOptions, 'split'>): void {
  if (options.split !== undefined) parseSplitTemplate(options.split);
}

/** `TRAJSTORE_GATEWAY_MAX_PENDING_BYTES` (bytes of events waiting for their write; past it, 429) and `TRAJSTORE_GATEWAY_MAX_TRACE_EVENTS` (events of one trace; past it, 413). */
function logLimits(env: NodeJS.ProcessEnv): LogLimits {
  return {
    maxPendingBytes: limitFromEnv(env, 'TRAJSTORE_GATEWAY_MAX_PENDING_BYTES', DEFAULT_MAX_PENDING_BYTES, 'bytes'),
    maxTraceEvents: limitFromEnv(env, 'TRAJSTORE_GATEWAY_MAX_TRACE_EVENTS', DEFAULT_MAX_TRACE_EVENTS, 'events'),
  };
}

type Place = { kind: 'local'; path: string } | { kind: 's3'; remote: NonNullable<ImportOptions['remote']> };

/** The dataset's store, to read its manifest. */
async function storeOf(place: Place): Promise<ObjectStore & { close?: () => void }> {
  if (place.kind === 'local') return new LocalObjectStore(place.path);
  const { S3ObjectStore } = await import('../../dataset/s3-store.js');
  return new S3ObjectStore(place.remote.place, place.remote.env);
}

/** Makes an empty Storyline dataset at the place when there is none; refuses a place that holds something else. */
async function ensureDataset(place: Place, shown: string, log: Logger): Promise<void> {
  const store = await storeOf(place);
  try {
    const manifest = await readManifest(store);
    if (manifest) {
      if (manifest.kind !== 'storyline') throw new InvalidInputError(`--gateway-dataset ${shown}: is a ${manifest.kind} dataset; the gateway writes Storyline datasets`);
      return;
    }
  } finally {
    store.close?.();
  }
  let mode: DatasetWriterOptions['mode'] = 'create';
  if (place.kind === 'local' && existsSync(place.path)) {
    if (!statSync(place.path).isDirectory() || readdirSync(place.path).length > 0) {
      throw new InvalidInputError(`--gateway-dataset ${shown}: exists and is not a trajstore dataset`, { hint: 'name a new directory, an empty one, or a Storyline dataset' });
    }
    mode = 'replace';
  }
  const sink = await beginWrite(place.kind === 's3' ? place.remote : undefined, { path: place.kind === 'local' ? place.path : '', mode, kind: 'storyline', purpose: 'serve --gateway (creating its dataset)', log });
  try {
    await sink.commit();
  } catch (error) {
    await sink.abort();
    throw error;
  }
  log.info(`gateway: created the dataset ${shown}`);
}

export async function startGateway(rc: ResolveContext, options: GatewayOptions): Promise<Gateway> {
  const split = options.split === undefined ? undefined : parseSplitTemplate(options.split);
  const location = await resolveDataset(options.dataset, { ...rc, purpose: 'write' });
  const place: Place = location.kind === 'local' ? { kind: 'local', path: canonicalPath(location.path) } : { kind: 's3', remote: { place: placeOf(location), env: rc.env } };
  if (place.kind === 's3' && options.state === undefined) {
    throw new InvalidInputError(`--gateway-dataset ${options.dataset} is on object storage: give --gateway-state DIRECTORY for the gateway's local state (its event log)`);
  }
  const { prices } = await loadConfig(rc.config, { env: rc.env });
  await ensureDataset(place, options.dataset, options.log);
  const stateRoot = options.state ?? (place.kind === 'local' ? place.path : '');
  const dir = join(stateRoot, GATEWAY_STATE_DIR);
  // Projected idle traces leave the log: their events are then read back from the dataset.
  const archive = datasetArchive(location, rc.env);
  const events = await EventLog.open(join(dir, 'events'), options.log, logLimits(rc.env), archive.read);
  const writerOptions = (signal: AbortSignal): DatasetWriterOptions => ({
    path: place.kind === 'local' ? place.path : '',
    mode: 'append',
    kind: 'storyline',
    purpose: 'serve --gateway (projection)',
    lockTimeoutMs: PROJECTION_LOCK_TIMEOUT_MS,
    signal,
    log: options.log,
  });
  const projection = new Projection(events, {
    idleMs: options.idleMs,
    statePath: projectedStatePath(dir),
    beginAppend: (signal): Promise<DatasetSink> => beginWrite(place.kind === 's3' ? place.remote : undefined, writerOptions(signal)),
    ...(place.kind === 'local'
      ? { maintain: (signal: AbortSignal) => maintainDataset(place.path, { purpose: 'serve --gateway (compaction)', graceMs: COMPACTION_DEFAULTS.graceMs, signal, log: options.log }) }
      : {}),
    prices: new PriceList(prices),
    log: options.log,
  });
  projection.start();
  const logRequest = (request: TraceAppend): AppendRequest => ({
    agentId: request.agentId,
    sessionId: request.sessionId,
    rootSessionId: request.rootSessionId,
    // A session stays in its first partition; a subagent's session goes where its root went.
    partition: () => (request.rootSessionId !== undefined ? events.partitionOfRoute(request.agentId, request.rootSessionId) : undefined) ?? split?.render(request.user ?? UNKNOWN_USER, new Date()) ?? '',
    records: request.records,
    mustTake: request.mustTake,
  });
  return {
    datasetUri: options.dataset,
    mountArg: place.kind === 'local' ? place.path : options.dataset,
    dir,
    split,
    idleMs: options.idleMs,
    events,
    projection,
    async append(request) {
      const result = await events.append(logRequest(request));
      const duplicates = result.duplicates;
      return {
        storage: tracePath(result.trace),
        agent_id: request.agentId,
        session_id: request.sessionId,
        accepted_records: request.records.length,
        dataset: options.dataset,
        status: 'ok',
        note:
          duplicates === 0
            ? 'canonical events are durable (fsynced) and visible in the live trace endpoints'
            : `canonical events are durable (fsynced); ${duplicates} record(s) were stored before (same source and seq) and were not stored again`,
        result,
      };
    },
    appendAll: (requests) => events.appendAll(requests.map(logRequest)),
    async close() {
      await projection.close();
      await events.close();
      archive.close();
    },
  };
}
