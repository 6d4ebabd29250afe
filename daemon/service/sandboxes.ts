/**
 * The lifecycle: durable intent first, then the runtime, then the confirmed outcome. Every change
 * of a sandbox runs under that sandbox's lock (controls, renewal, expiry and connection set-up
 * serialize; different sandboxes are independent); admission runs under one commit lock. A record
 * is a hard reservation of its CPU, memory and count until its cleanup is confirmed.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import type { Logger } from '../../lib/log.js';
import { parseManifest, type ImageManifest } from '../images/manifest.js';
import { WorkloadStartError } from '../runtime/guest-control.js';
import type { NativeRuntime, NativeState } from '../runtime/native.js';
import { EGRESS_PORT, EXECD_PORT } from '../runtime/vsock.js';
import type { Registry } from '../store/registry.js';
import { MAX_MESSAGE_CHARS, type SandboxRecord, type SandboxState } from '../store/record.js';
import { badState, expired, invalid, isOutOfSpace, LifecycleError, notFound, notSupported, outOfDescriptors, outOfSpace, unavailable } from './errors.js';
import { KeyedLock } from './keyed-lock.js';
import { isOutOfDescriptors } from '../../lib/http-limits.js';
import { ownValue } from '../../lib/own-property.js';
import { isRfc3339 } from '../../lib/rfc3339.js';
import { secretEquals } from '../../lib/secret.js';
import { newToken } from './secret.js';

export interface Capacity {
  maxSandboxes: number;
  cpuMillis: number;
  memoryBytes: number;
}

/** What a create asks for: the record's requested fields, and its TTL. */
export interface CreateInput extends Pick<SandboxRecord, 'image' | 'entrypoint' | 'env' | 'metadata' | 'cpuMillis' | 'memoryBytes'> {
  /** Seconds; undefined: manual cleanup. */
  timeout?: number;
}

export type MetadataPair = [key: string, value: string];

export interface ListQuery {
  states: string[];
  /** Every entry must match: the readings of one `k=v` pair, any one of which may. */
  metadata: MetadataPair[][];
  page: number;
  pageSize: number;
}

export interface Endpoint {
  endpoint: string;
  headers?: Record<string, string>;
}

const IMAGE_KEY = /^(?!\.)[A-Za-z0-9._-]{1,128}$/;
const MANIFEST_MAX = 1 << 20;
const MAINTENANCE_CONCURRENCY = 8;
const SERVICE_TOKEN_HEADER: Record<number, string> = { [EXECD_PORT]: 'X-EXECD-ACCESS-TOKEN', [EGRESS_PORT]: 'OPENSANDBOX-EGRESS-AUTH' };
export const SANDBOX_TOKEN_HEADER = 'X-SVC-SANDBOX-TOKEN';

export interface SandboxServiceOptions {
  registry: Registry;
  runtime: NativeRuntime;
  imagesDir: string;
  /** The daemon's state directory, which no image's rootfs may overlap. */
  stateDir: string;
  capacity: Capacity;
  maxTimeoutSeconds: number;
  /** The authority endpoints name (host:port); set once the listener is bound. */
  publicEndpoint: string;
  log: Logger;
}

export class SandboxService {
  private readonly locks = new KeyedLock();
  private readonly commit = new KeyedLock();
  private maintenanceTimer: NodeJS.Timeout | undefined;
  private maintaining = false;

  constructor(private readonly o: SandboxServiceOptions) {}

  setPublicEndpoint(authority: string): void {
    this.o.publicEndpoint = authority;
  }

  // ------------------------------------------------------------------ create

  /** Reads `<images_dir>/<key>.json`; the key cannot leave the directory. */
  loadImage(key: string): ImageManifest {
    if (!IMAGE_KEY.test(key)) throw invalid(`image.uri: ${JSON.stringify(key)} is not a prepared image key (1-128 of [A-Za-z0-9._-], not starting with '.'; registry references are not accepted)`);
    const path = join(this.o.imagesDir, `${key}.json`);
    const st = existsSync(path) ? statSync(path) : undefined;
    if (!st?.isFile()) throw invalid(`image.uri: no prepared image ${JSON.stringify(key)}`);
    if (st.size > MANIFEST_MAX) throw invalid(`image.uri: the manifest of ${JSON.stringify(key)} is above 1 MiB`);
    try {
      return parseManifest(readFileSync(path, 'utf8'), this.o.stateDir);
    } catch (error) {
      throw invalid(`image.uri: the manifest of ${JSON.stringify(key)} (${path}) ${(error as Error).message}`);
    }
  }

  async create(input: CreateInput): Promise<SandboxRecord> {
    if (input.timeout !== undefined && (input.timeout < 60 || input.timeout > this.o.maxTimeoutSeconds)) {
      throw invalid(`timeout: ${input.timeout} must be null or from 60 to ${this.o.maxTimeoutSeconds} seconds`);
    }
    const image = this.loadImage(input.image);
    const now = new Date();
    const record: SandboxRecord = {
      id: `sb-${randomUUID()}`,
      state: 'Pending',
      lastTransitionAt: now.toISOString(),
      createdAt: now.toISOString(),
      ...(input.timeout === undefined ? {} : { expiresAt: new Date(now.getTime() + input.timeout * 1000).toISOString() }),
      image: input.image,
      entrypoint: input.entrypoint,
      env: input.env,
      metadata: input.metadata,
      cpuMillis: input.cpuMillis,
      memoryBytes: input.memoryBytes,
      token: newToken(),
      execdToken: newToken(),
      egressToken: newToken(),
    };
    await this.commit.run('admission', async () => {
      this.admit(record);
      this.o.registry.put(record);
    });
    return this.locks.run(record.id, async () => {
      try {
        record.cgroup = this.o.runtime.prepare(record);
        this.o.registry.put(record);
        await this.o.runtime.start(record, image);
        return this.transition(record, 'Running');
      } catch (error) {
        const cause = (error as Error).message;
        this.o.log.warn(`sandbox ${record.id}: create failed: ${cause}`);
        const cleaned = await this.o.runtime.destroy(record).catch(() => false);
        if (cleaned) {
          this.o.registry.remove(record.id);
          this.o.runtime.removeDir(record.id);
          if (error instanceof WorkloadStartError) throw invalid(`entrypoint: ${cause}; nothing was created`);
          if (isOutOfSpace(error)) throw outOfSpace('sandbox creation (cleanup confirmed, nothing was created)');
          throw new LifecycleError(500, 'SANDBOX_CREATE_FAILED', `sandbox creation failed (${cause}); cleanup confirmed`);
        }
        try {
          this.transition(record, 'Failed', `creation failed: ${cause}`);
        } catch (failed) {
          // Kept as last written (Pending): reconcile turns it Failed; the answer must still name it.
          this.o.log.warn(`sandbox ${record.id}: recording the failure: ${(failed as Error).message}`);
        }
        if (isOutOfSpace(error)) throw outOfSpace(`sandbox ${record.id} (creation failed, cleanup not confirmed; query or delete this ID)`);
        throw new LifecycleError(500, 'SANDBOX_CREATE_FAILED', `sandbox ${record.id} failed (${cause}); query or delete this ID`);
      }
    });
  }

  /** Hard reservations: every record counts, whatever its state, until its deletion is confirmed. */
  private admit(record: SandboxRecord): void {
    const all = this.o.registry.all();
    const cpu = all.reduce((sum, r) => sum + r.cpuMillis, 0) + record.cpuMillis;
    const memory = all.reduce((sum, r) => sum + r.memoryBytes, 0) + record.memoryBytes;
    const { capacity } = this.o;
    const over =
      all.length + 1 > capacity.maxSandboxes ? `sandbox count would exceed ${capacity.maxSandboxes}`
      : cpu > capacity.cpuMillis ? `CPU reservations would reach ${cpu}m of ${capacity.cpuMillis}m`
      : memory > capacity.memoryBytes ? `memory reservations would reach ${memory} of ${capacity.memoryBytes} bytes`
      : undefined;
    if (over) throw new LifecycleError(429, 'CAPACITY_EXCEEDED', `capacity exhausted: ${over}`);
  }

  private transition(record: SandboxRecord, state: SandboxState, message?: string): SandboxRecord {
    record.state = state;
    record.lastTransitionAt = new Date().toISOString();
    if (message === undefined) delete record.message;
    else record.message = message.length > MAX_MESSAGE_CHARS ? `${message.slice(0, MAX_MESSAGE_CHARS - 1)}…` : message;
    this.o.registry.put(record);
    return record;
  }

  private current(id: string): SandboxRecord {
    const found = this.o.registry.get(id);
    if (!found) throw notFound(id);
    return structuredClone(found);
  }

  private isExpired(record: SandboxRecord): boolean {
    return record.expiresAt !== undefined && Date.parse(record.expiresAt) <= Date.now();
  }

  // ------------------------------------------------------------------ inspect

  /** Folds what the runtime proves into the record; uncertainty changes nothing. */
  private reconcile(record: SandboxRecord, native: NativeState): SandboxRecord {
    if (record.deleting || native === 'unknown') return record;
    if (native === 'missing') return record.state === 'Failed' ? record : this.transition(record, 'Failed', 'the sandbox is missing: its supervisor is gone');
    if (native === 'stopped') return this.transition(record, 'Terminated', 'the sandbox VM stopped');
    if (record.state === 'Pending') return this.transition(record, 'Failed', 'creation was interrupted before readiness was confirmed');
    const state: SandboxState = native === 'running' ? 'Running' : 'Paused';
    return record.state === state ? record : this.transition(record, state);
  }

  get(id: string): Promise<SandboxRecord> {
    return this.locks.run(id, async () => {
      const record = this.current(id);
      return this.reconcile(record, await this.o.runtime.inspect(record));
    });
  }

  list(query: ListQuery): { items: SandboxRecord[]; totalItems: number } {
    const states = new Set(query.states.map((s) => s.toLowerCase()));
    const matching = this.o.registry
      .all()
      .filter((r) => states.size === 0 || states.has(r.state.toLowerCase()))
      .filter((r) => query.metadata.every((readings) => readings.some(([k, v]) => ownValue(r.metadata, k) === v)))
      .sort((a, b) => (a.createdAt === b.createdAt ? a.id.localeCompare(b.id) : a.createdAt < b.createdAt ? 1 : -1));
    const start = (query.page - 1) * query.pageSize;
    return { items: matching.slice(start, start + query.pageSize), totalItems: matching.length };
  }

  // ------------------------------------------------------------------ delete and expiry

  delete(id: string): Promise<void> {
    return this.locks.run(id, () => this.deleteLocked(this.current(id)));
  }

  private async deleteLocked(record: SandboxRecord): Promise<void> {
    if (!record.deleting) {
      record.deleting = true;
      this.transition(record, 'Stopping');
    }
    const confirmed = await this.o.runtime.destroy(record).catch((error: Error) => {
      this.o.log.warn(`sandbox ${record.id}: cleanup: ${error.message}`);
      return false;
    });
    if (!confirmed) throw unavailable(`deletion of sandbox ${record.id} is not confirmed yet; it stays pending and is retried`);
    this.o.registry.remove(record.id);
    this.o.runtime.removeDir(record.id);
  }

  renew(id: string, expiresAt: string): Promise<string> {
    return this.locks.run(id, async () => {
      const record = this.current(id);
      const wanted = Date.parse(expiresAt);
      if (!isRfc3339(expiresAt)) throw invalid(`expiresAt: ${JSON.stringify(expiresAt)} is not an RFC 3339 timestamp`);
      if (record.deleting || record.state === 'Failed' || record.state === 'Terminated') throw badState(id, record.state, 'it cannot be renewed');
      if (record.expiresAt === undefined) throw new LifecycleError(409, 'INVALID_SANDBOX_STATE', `sandbox ${id} has no automatic expiration to renew`);
      if (this.isExpired(record)) throw expired(id);
      if (!(wanted > Date.now())) throw invalid(`expiresAt: ${expiresAt} is not in the future`);
      if (!(wanted > Date.parse(record.expiresAt))) throw invalid(`expiresAt: ${expiresAt} does not extend the current deadline ${record.expiresAt}`);
      if (wanted > Date.now() + this.o.maxTimeoutSeconds * 1000) throw invalid(`expiresAt: ${expiresAt} is more than ${this.o.maxTimeoutSeconds} seconds away`);
      record.expiresAt = new Date(wanted).toISOString();
      this.o.registry.put(record);
      return record.expiresAt;
    });
  }

  /** One maintenance pass: expired sandboxes and pending deletions, at most 8 at a time. */
  async maintain(): Promise<void> {
    const due = this.o.registry.all().filter((r) => r.deleting || this.isExpired(r)).map((r) => r.id);
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < due.length) {
        const id = due[next++]!;
        await this.locks
          .run(id, async () => {
            const record = this.o.registry.get(id);
            // Rechecked under the lock renewal takes: a renewal that won the race keeps the sandbox.
            if (record && (record.deleting || this.isExpired(record))) await this.deleteLocked(structuredClone(record));
          })
          .catch((error: Error) => this.o.log.warn(`maintenance of ${id}: ${error.message}`));
      }
    };
    await Promise.all(Array.from({ length: Math.min(MAINTENANCE_CONCURRENCY, due.length) }, worker));
  }

  startMaintenance(intervalMs = 1000): void {
    this.maintenanceTimer = setInterval(() => {
      if (this.maintaining) return;
      this.maintaining = true;
      void this.maintain().finally(() => (this.maintaining = false));
    }, intervalMs);
    this.maintenanceTimer.unref();
  }

  stopMaintenance(): void {
    clearInterval(this.maintenanceTimer);
  }

  /** After a restart: every record checked against the runtime; stray directories of removed records cleared. */
  async reconcileAll(): Promise<void> {
    for (const record of this.o.registry.all()) {
      if (record.deleting) continue;
      await this.locks.run(record.id, async () => {
        const current = this.current(record.id);
        this.reconcile(current, await this.o.runtime.inspect(current));
      });
    }
    const known = new Set(this.o.registry.all().map((r) => r.id));
    for (const id of this.o.runtime.strayDirs(known)) this.o.runtime.removeDir(id);
  }

  // ------------------------------------------------------------------ pause and resume

  control(id: string, op: 'pause' | 'resume'): Promise<void> {
    return this.locks.run(id, async () => {
      const record = this.current(id);
      if (record.deleting) throw badState(id, record.state, `a deleted sandbox cannot ${op}`);
      if (this.isExpired(record)) throw expired(id);
      if (!['Running', 'Paused', 'Pausing', 'Resuming'].includes(record.state)) throw badState(id, record.state, `it cannot ${op}`);
      const native = await this.o.runtime.inspect(record);
      const [from, via, to] = op === 'pause' ? (['running', 'Pausing', 'Paused'] as const) : (['paused', 'Resuming', 'Running'] as const);
      if (native === (op === 'pause' ? 'paused' : 'running')) {
        if (record.state !== to) this.transition(record, to);
        return;
      }
      if (native === 'unknown') throw unavailable(`sandbox ${id}: its state cannot be confirmed right now`);
      if (native !== from) throw badState(id, record.state, `it cannot ${op}`);
      this.transition(record, via);
      try {
        await this.o.runtime.control(record, op);
      } catch (error) {
        throw unavailable(`sandbox ${id}: ${op} not confirmed (${(error as Error).message}); retry`);
      }
      this.transition(record, to);
    });
  }

  // ------------------------------------------------------------------ data plane

  endpoint(id: string, port: number, useServerProxy: boolean): Promise<Endpoint> {
    if (port !== EXECD_PORT && port !== EGRESS_PORT) throw notSupported(`port ${port}: only ${EXECD_PORT} (execution) and ${EGRESS_PORT} (egress) are routed`);
    return this.locks.run(id, async () => {
      const record = this.routable(id);
      const native = await this.o.runtime.inspect(record);
      if (native !== 'running') throw new LifecycleError(503, 'ENDPOINT_UNAVAILABLE', `sandbox ${id} is not confirmed running`);
      const service = { [SERVICE_TOKEN_HEADER[port]!]: port === EXECD_PORT ? record.execdToken : record.egressToken };
      return {
        endpoint: `${this.o.publicEndpoint}/v1/sandboxes/${id}/proxy/${port}`,
        headers: useServerProxy ? service : { [SANDBOX_TOKEN_HEADER]: record.token, ...service },
      };
    });
  }

  private routable(id: string): SandboxRecord {
    const record = this.current(id);
    if (this.isExpired(record)) throw expired(id);
    if (record.deleting || record.state !== 'Running') throw badState(id, record.state, 'only a Running sandbox is routed');
    return record;
  }

  /** Whether `token` is this sandbox's data-plane token (constant time). */
  tokenMatches(id: string, token: string): boolean {
    const record = this.o.registry.get(id);
    return record !== undefined && secretEquals(token, record.token);
  }

  /** A connection to a guest service, set up under the sandbox's lock; the stream itself is not. */
  openDataPlane(id: string, port: number): Promise<Socket> {
    if (port !== EXECD_PORT && port !== EGRESS_PORT) return Promise.reject(notSupported(`port ${port} is not routed`));
    return this.locks.run(id, async () => {
      this.routable(id);
      try {
        return await this.o.runtime.connect(id, port);
      } catch (error) {
        if (isOutOfDescriptors(error)) throw outOfDescriptors(`sandbox ${id} port ${port}`);
        throw new LifecycleError(502, 'BAD_GATEWAY', `sandbox ${id} port ${port}: ${(error as Error).message}`);
      }
    });
  }
}
