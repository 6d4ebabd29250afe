/**
 * ActorSystem: one per process. Spawns local actors, serves calls, membership and the observer
 * endpoints on one h2c listener, and routes calls to local or remote actors.
 */
import { randomUUID } from 'node:crypto';
import http2 from 'node:http2';
import { networkInterfaces } from 'node:os';
import { Value } from '@sinclair/typebox/value';
import { actorMeta, remote, type ActorClass, type ActorContext } from './actor.js';
import { ActorCell, errorMessage, type CallMode, type Delivery } from './cell.js';
import { CHANNEL_PATH, ChannelPool, ServerChannel, type IncomingCall } from './channel.js';
import { END_FRAME, FrameDecoder, FLAG_END, FLAG_ERROR, errorFrame, frameValue, jsonFrame, parseCallBody } from './codec.js';
import { ActorError, STATUS_OF, type ActorErrorCode } from './errors.js';
import { DEFAULT_TIMERS, Membership, STATUSES, SWIM_PATH, parseSwimMessage, type MemberRecord, type MembershipTimers } from './membership.js';
import { Counter, Histogram, gauge } from './metrics.js';
import { Transport, formatAddr, readBody } from './transport.js';

const { NGHTTP2_CANCEL } = http2.constants;

export type ResolvePolicy = 'round-robin' | 'random' | 'least-load';
export const RESOLVE_POLICIES: ResolvePolicy[] = ['round-robin', 'random', 'least-load'];

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

export interface SpawnOptions {
  /** A named actor is public: listed by /actors and resolvable from every node. */
  name?: string;
  params?: Record<string, unknown>;
  /** Extra key/values shown by /actors (e.g. module, class). */
  metadata?: Record<string, string>;
}

export interface CallOptions {
  timeoutMs?: number;
  signal?: AbortSignal;
}

const SYSTEM_NODE_ACTOR = 'system/node';

/** The system actor every node runs: answers who it is, so a node can be called like any actor. */
class NodeActor {
  context?: ActorContext;
  info(): Record<string, unknown> {
    const system = this.context!.system;
    return { node_id: system.nodeId, addr: system.addr, members: system.membership.list().length };
  }
  ping(): string {
    return 'pong';
  }
}
remote(NodeActor);

const NAME_RE = /^[A-Za-z0-9_][A-Za-z0-9_.\/-]{0,255}$/;
const SYSTEM_NAME = /^(_|system\/)/;

/** Where a call goes: a local cell, or a node address plus the path of the actor there. */
type Target = { cell: ActorCell } | { addr: string; nodeId: string; path: string; key: string };

/** A handle to call one actor, or (from resolve) any Alive instance of a named actor. */
export class ActorRef {
  constructor(
    private readonly system: ActorSystem,
    private readonly pick: () => Target,
    readonly label: string,
  ) {}

  async ask<T = unknown>(method: string, args: unknown[] = [], options: CallOptions = {}): Promise<T> {
    return (await this.system.call(this.pick(), method, args, 'ask', options)) as T;
  }

  /** Fire and forget: resolves once the message is queued (remote: accepted by the node). */
  async tell(method: string, args: unknown[] = [], options: CallOptions = {}): Promise<void> {
    await this.system.call(this.pick(), method, args, 'tell', options);
  }

  /** A streamed reply; breaking out of the loop cancels the call (and resets its HTTP/2 stream). */
  stream<T = unknown>(method: string, args: unknown[] = [], options: CallOptions = {}): AsyncIterable<T> {
    return this.system.openStream(() => this.pick(), method, args, options) as AsyncIterable<T>;
  }
}

export class ActorSystem {
  readonly nodeId = randomUUID().replaceAll('-', '');
  readonly transport = new Transport();
  /** Asks and tells to other nodes ride one call channel per peer (see channel.ts). */
  private readonly channels = new ChannelPool(this.transport);
  private readonly serverChannels = new Set<ServerChannel>();
  membership!: Membership;
  addr = '';
  private readonly cells = new Map<string, ActorCell>();
  private readonly named = new Map<string, ActorCell>();
  private readonly roundRobin = new Map<string, number>();
  private readonly inflight = new Map<string, number>();
  private readonly startedAt = Date.now();
  private readonly log: (message: string) => void;
  private readonly callTimeoutMs: number;
  private leaving = false;
  readonly metrics = {
    messages: new Counter('actor_messages_total', 'Messages handled by actors of this node, by outcome'),
    calls: new Counter('actor_calls_total', 'Calls sent by this node, by mode and locality'),
    created: new Counter('actor_actors_created_total', 'Actors started on this node'),
    stopped: new Counter('actor_actors_stopped_total', 'Actors stopped on this node'),
    handling: new Histogram('actor_message_duration_seconds', 'Time an actor spent handling a message'),
    latency: new Histogram('actor_ask_duration_seconds', 'Round trip of asks sent by this node, by locality'),
    badRequests: new Counter('actor_bad_requests_total', 'Requests refused as malformed'),
  };

  /** Pre-bound metric series for the hot paths. */
  private readonly hot = {
    ok: this.metrics.messages.bind({ outcome: 'ok' }),
    error: this.metrics.messages.bind({ outcome: 'error' }),
    handling: this.metrics.handling.bind(),
    localLatency: this.metrics.latency.bind({ locality: 'local' }),
    remoteLatency: this.metrics.latency.bind({ locality: 'remote' }),
    calls: {
      local: { ask: this.metrics.calls.bind({ mode: 'ask', locality: 'local' }), tell: this.metrics.calls.bind({ mode: 'tell', locality: 'local' }), stream: this.metrics.calls.bind({ mode: 'stream', locality: 'local' }) },
      remote: { ask: this.metrics.calls.bind({ mode: 'ask', locality: 'remote' }), tell: this.metrics.calls.bind({ mode: 'tell', locality: 'remote' }), stream: this.metrics.calls.bind({ mode: 'stream', locality: 'remote' }) },
    },
  };

  private constructor(private readonly options: SystemOptions) {
    this.log = options.log ?? ((m) => process.stderr.write(`${m}\n`));
    this.callTimeoutMs = options.callTimeoutMs ?? 30_000;
  }

  static async start(options: SystemOptions = {}): Promise<ActorSystem> {
    const system = new ActorSystem(options);
    const bound = await system.transport.listen(options.addr ?? '127.0.0.1:0', (s, h) => system.onStream(s, h));
    system.addr = options.advertise ?? formatAddr(advertisedHost(bound.host), bound.port);
    const timers = { ...DEFAULT_TIMERS, ...options.timers };
    system.membership = new Membership(system.nodeId, system.addr, options.seeds ?? [], system.transport, timers, {
      changed: (member, previous) => {
        if (member.status !== previous) system.log(`member ${member.addr} (${member.id}): ${previous ?? 'new'} -> ${member.status}`);
      },
      log: system.log,
      warn: options.warn ?? system.log,
    });
    system.membership.start();
    await system.spawnInternal(NodeActor, SYSTEM_NODE_ACTOR);
    return system;
  }

  // ---- local actors ----

  async spawn(cls: ActorClass<never>, options: SpawnOptions = {}): Promise<ActorRef> {
    if (options.name !== undefined && SYSTEM_NAME.test(options.name)) {
      throw new ActorError('bad-request', `actor name '${options.name}' is reserved for system actors (starts with '_' or 'system/')`);
    }
    return this.spawnInternal(cls, options.name, options);
  }

  private async spawnInternal(cls: ActorClass<never>, name: string | undefined, options: SpawnOptions = {}): Promise<ActorRef> {
    const meta = actorMeta(cls);
    if (!meta) throw new ActorError('bad-request', `${cls.name || 'class'} is not an actor class (extend Actor or wrap it with remote())`);
    if (name !== undefined) {
      if (!NAME_RE.test(name)) throw new ActorError('bad-request', `actor name '${name}' must match ${NAME_RE}`);
      if (this.named.has(name)) throw new ActorError('bad-request', `an actor named '${name}' already runs on this node`);
    }
    const params = Value.Default(meta.params, structuredClone(options.params ?? {})) as Record<string, unknown>;
    const errors = [...Value.Errors(meta.params, params)];
    if (errors.length) {
      throw new ActorError('bad-request', `invalid parameters for ${meta.className}: ${errors.map((e) => `${e.path || '/'}: ${e.message}`).join('; ')}`);
    }
    const cell = new ActorCell(randomUUID().replaceAll('-', ''), name, cls, meta, params, { system: this }, {
      observe: (seconds, failed) => {
        this.hot.handling(seconds);
        (failed ? this.hot.error : this.hot.ok)();
      },
      stopped: (c) => this.forget(c),
      log: this.log,
    });
    cell.extra = options.metadata ?? {};
    await cell.start();
    this.cells.set(cell.id, cell);
    this.metrics.created.inc();
    if (name !== undefined) {
      this.named.set(name, cell);
      this.publishNames();
    }
    return new ActorRef(this, () => ({ cell }), cell.label);
  }

  /** Stops one local actor (by reference label, name or id). */
  async stopActor(nameOrId: string): Promise<boolean> {
    const cell = this.named.get(nameOrId) ?? this.cells.get(nameOrId);
    if (!cell) return false;
    await cell.stop();
    return true;
  }

  private forget(cell: ActorCell): void {
    this.cells.delete(cell.id);
    this.metrics.stopped.inc();
    if (cell.name !== undefined && this.named.get(cell.name) === cell) {
      this.named.delete(cell.name);
      this.publishNames();
    }
  }

  private publishNames(): void {
    if (!this.leaving) this.membership.setActors([...this.named.keys()]);
  }

  // ---- resolution ----

  /** Alive instances of a named actor across the cluster, this node's first. */
  instances(name: string): MemberRecord[] {
    return this.membership.instancesOf(name);
  }

  /** A reference that picks an Alive instance of `name` for every call. */
  resolve(name: string, options: { policy?: ResolvePolicy; nodeId?: string } = {}): ActorRef {
    const policy = options.policy ?? 'round-robin';
    return new ActorRef(this, () => this.pickInstance(name, policy, options.nodeId), name);
  }

  /** A reference to one actor by id on a given node (named or not), as `/actors` lists it. */
  actor(nodeId: string, actorId: string): ActorRef {
    return new ActorRef(
      this,
      () => {
        if (nodeId === this.nodeId) {
          const cell = this.cells.get(actorId);
          if (!cell) throw new ActorError('not-found', `no actor with id ${actorId} on this node`);
          return { cell };
        }
        const member = this.membership.get(nodeId);
        if (!member || member.status !== 'Alive') throw new ActorError('not-found', `node ${nodeId} is ${member?.status ?? 'unknown'}, not Alive`);
        return { addr: member.addr, nodeId, path: `/actors/${actorId}`, key: `${nodeId}/${actorId}` };
      },
      actorId,
    );
  }

  private pickInstance(name: string, policy: ResolvePolicy, nodeId: string | undefined): Target {
    let candidates = this.instances(name);
    if (nodeId !== undefined) candidates = candidates.filter((m) => m.id === nodeId);
    if (!candidates.length) throw new ActorError('not-found', `no Alive instance of actor '${name}'${nodeId ? ` on node ${nodeId}` : ''}`);
    let chosen: MemberRecord;
    if (policy === 'random') chosen = candidates[Math.floor(Math.random() * candidates.length)]!;
    else if (policy === 'least-load') {
      const loads = candidates.map((m) => (m.id === this.nodeId ? (this.named.get(name)?.load ?? 0) : (this.inflight.get(`${m.id}/${name}`) ?? 0)));
      const least = Math.min(...loads);
      const ties = candidates.filter((_, i) => loads[i] === least);
      chosen = ties[Math.floor(Math.random() * ties.length)]!;
    } else {
      const next = this.roundRobin.get(name) ?? 0;
      this.roundRobin.set(name, next + 1);
      chosen = candidates[next % candidates.length]!;
    }
    if (chosen.id === this.nodeId) {
      const cell = this.named.get(name);
      if (cell) return { cell };
    }
    return { addr: chosen.addr, nodeId: chosen.id, path: `/named/${encodeURIComponent(name)}`, key: `${chosen.id}/${name}` };
  }

  // ---- calls ----

  /** Sends one ask or tell. */
  async call(target: Target, method: string, args: unknown[], mode: 'ask' | 'tell', options: CallOptions): Promise<unknown> {
    const timeoutMs = options.timeoutMs ?? this.callTimeoutMs;
    if ('cell' in target) {
      this.hot.calls.local[mode]();
      const delivery = target.cell.deliver(method, args, mode);
      if (mode === 'tell') {
        delivery.result.catch((e) => this.log(`tell ${target.cell.label}.${method} failed: ${errorMessage(e)}`));
        return undefined;
      }
      const started = performance.now();
      const value = await withDeadline(delivery, timeoutMs, options.signal, `${target.cell.label}.${method}`);
      this.hot.localLatency((performance.now() - started) / 1000);
      return value;
    }
    this.hot.calls.remote[mode]();
    this.inflight.set(target.key, (this.inflight.get(target.key) ?? 0) + 1);
    const started = performance.now();
    try {
      const reply = await this.channels.call(target.addr, mode, target.path, JSON.stringify({ method, args }), timeoutMs, options.signal);
      const body = decodeReply(reply.status, reply.body, target.addr);
      if (mode === 'ask') this.hot.remoteLatency((performance.now() - started) / 1000);
      return body;
    } finally {
      this.inflight.set(target.key, (this.inflight.get(target.key) ?? 1) - 1);
    }
  }

  async *openStream(pick: () => Target, method: string, args: unknown[], options: CallOptions): AsyncGenerator<unknown> {
    const target = pick();
    const timeoutMs = options.timeoutMs ?? this.callTimeoutMs;
    if ('cell' in target) {
      this.hot.calls.local.stream();
      const delivery = target.cell.deliver(method, args, 'stream');
      const iterable = (await withDeadline(delivery, timeoutMs, options.signal, `${target.cell.label}.${method}`)) as AsyncIterable<unknown>;
      for await (const item of iterable) {
        if (options.signal?.aborted) throw new ActorError('cancelled', 'stream cancelled');
        yield item;
      }
      return;
    }
    this.hot.calls.remote.stream();
    const request = this.transport.open(target.addr, target.path, {
      headers: { 'x-message-mode': 'stream' },
      body: JSON.stringify({ method, args }),
    });
    const cancel = (): void => {
      if (!request.closed) request.close(NGHTTP2_CANCEL);
    };
    options.signal?.addEventListener('abort', cancel, { once: true });
    // The timeout bounds the wait for the reply to start, not the length of the stream.
    const timer = setTimeout(cancel, timeoutMs);
    try {
      const headers = await new Promise<http2.IncomingHttpHeaders>((resolve, reject) => {
        request.once('response', resolve);
        request.once('close', () => reject(new ActorError(options.signal?.aborted ? 'cancelled' : 'unreachable', `${target.addr}: stream closed before a reply`)));
        request.once('error', (e) => reject(new ActorError('unreachable', `${target.addr}: ${e.message}`)));
      });
      clearTimeout(timer);
      const status = Number(headers[':status']);
      if (status !== 200 || headers['x-response-type'] !== 'stream') {
        decodeReply(status, await readBody(request), target.addr);
        throw new ActorError('failed', `${target.addr} did not answer with a stream`);
      }
      const decoder = new FrameDecoder();
      for await (const chunk of request as AsyncIterable<Buffer>) {
        for (const frame of decoder.push(chunk)) {
          if (frame.flags & FLAG_ERROR) throw new ActorError('failed', frame.error ?? 'stream failed');
          if (frame.flags & FLAG_END) return;
          yield frameValue(frame);
        }
      }
      throw new ActorError(options.signal?.aborted ? 'cancelled' : 'unreachable', `${target.addr}: stream ended without an END frame`);
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', cancel);
      cancel();
    }
  }

  // ---- the h2c listener ----

  private onStream(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void {
    const method = headers[':method'];
    const rawPath = headers[':path'] ?? '/';
    if (rawPath === CHANNEL_PATH) {
      if (method !== 'POST') return respond(stream, 405, { error: { code: 'bad-request', message: `${method} not allowed on ${rawPath}; use POST` } });
      const channel = new ServerChannel(
        stream,
        (call) => this.serveChannelCall(call),
        (problem) => {
          this.metrics.badRequests.inc({ path: 'channel' });
          this.log(`call channel reset: ${problem}`);
        },
        (c) => this.serverChannels.delete(c),
      );
      this.serverChannels.add(channel);
      return;
    }
    // Calls are the hot path: their paths carry no query, so they skip URL parsing.
    if (rawPath.startsWith('/named/') || rawPath.startsWith('/actors/')) {
      const path = rawPath;
      if (method !== 'POST') return respond(stream, 405, { error: { code: 'bad-request', message: `${method} not allowed on ${path}; use POST` } });
      void this.serveCall(stream, headers, path);
      return;
    }
    const url = new URL(rawPath, 'http://node');
    const path = url.pathname;
    if (path === SWIM_PATH) {
      if (method !== 'POST') return respond(stream, 405, { error: { code: 'bad-request', message: 'use POST' } });
      void this.serveSwim(stream);
      return;
    }
    if (path === '/_test/faults' && this.options.testFaults && method === 'POST') {
      void readBody(stream).then((body) => {
        const { block } = JSON.parse(body.toString('utf8')) as { block: string[] };
        this.transport.blocked.clear();
        for (const a of block) this.transport.blocked.add(a);
        respond(stream, 200, { blocked: block });
      }, () => {});
      return;
    }
    const observers: Record<string, () => unknown> = {
      '/cluster/members': () => this.membership.list().map((m) => ({ node_id: m.id, addr: m.addr, status: m.status })),
      '/actors': () => this.actorList(url.searchParams.get('all') === 'true'),
      '/health': () => this.health(),
    };
    const observer = observers[path];
    if (observer || path === '/metrics') {
      if (method !== 'GET' && method !== 'HEAD') return respond(stream, 405, { error: { code: 'bad-request', message: `${method} not allowed on ${path}; use GET` } });
      if (path === '/metrics') {
        stream.respond({ ':status': 200, 'content-type': 'text/plain; version=0.0.4' });
        stream.end(this.renderMetrics());
        return;
      }
      return respond(stream, 200, observer!());
    }
    respond(stream, 404, { error: { code: 'not-found', message: `no route ${path}` } });
  }

  private async serveSwim(stream: http2.ServerHttp2Stream): Promise<void> {
    try {
      const body = await readBody(stream, 4 * 1024 * 1024);
      let message;
      try {
        message = parseSwimMessage(JSON.parse(body.toString('utf8')));
      } catch (error) {
        this.metrics.badRequests.inc({ path: SWIM_PATH });
        return respond(stream, 400, { error: { code: 'bad-request', message: errorMessage(error) } });
      }
      if (this.leaving) return respond(stream, 503, { error: { code: 'stopped', message: 'node is leaving' } });
      respond(stream, 200, await this.membership.handle(message));
    } catch (error) {
      respond(stream, 400, { error: { code: 'bad-request', message: errorMessage(error) } });
    }
  }

  private async serveCall(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, path: string): Promise<void> {
    const modeHeader = headers['x-message-mode'] ?? 'ask';
    const fail = (code: ActorErrorCode, message: string): void => respond(stream, STATUS_OF[code], { error: { code, message } });
    if (modeHeader !== 'ask' && modeHeader !== 'tell' && modeHeader !== 'stream') {
      this.metrics.badRequests.inc({ path: 'call' });
      return fail('bad-request', `header x-message-mode must be ask, tell or stream, not '${String(modeHeader)}'`);
    }
    const mode = modeHeader as CallMode;
    let body;
    try {
      body = parseCallBody(await readBody(stream));
    } catch (error) {
      this.metrics.badRequests.inc({ path: 'call' });
      return fail('bad-request', errorMessage(error));
    }
    const cell = this.cellAt(path);
    if (cell instanceof ActorError) return fail(cell.code, cell.message);
    const delivery = cell.deliver(body.method, body.args, mode);
    // A caller that resets its stream cancels a call still waiting in the mailbox.
    const onClose = (): void => delivery.cancel();
    stream.once('close', onClose);
    if (mode === 'tell') {
      stream.off('close', onClose);
      delivery.result.catch((e) => this.log(`tell ${cell.label}.${body.method} failed: ${errorMessage(e)}`));
      return respond(stream, 202, {});
    }
    let value: unknown;
    try {
      value = await delivery.result;
    } catch (error) {
      stream.off('close', onClose);
      if (stream.closed) return;
      const e = error instanceof ActorError ? error : new ActorError('failed', errorMessage(error));
      return fail(e.code, e.message);
    }
    stream.off('close', onClose);
    if (mode === 'ask') return respond(stream, 200, { result: value ?? null });
    await this.pump(stream, value as AsyncIterable<unknown>);
  }

  /** The local actor a call path (`/named/<name>` or `/actors/<id>`) names, or why there is none. */
  private cellAt(path: string): ActorCell | ActorError {
    let key: string;
    try {
      key = decodeURIComponent(path.slice(path.indexOf('/', 1) + 1));
    } catch {
      return new ActorError('bad-request', `path ${path} is not valid percent-encoding`);
    }
    const named = path.startsWith('/named/');
    if (!named && !path.startsWith('/actors/')) return new ActorError('bad-request', `call target ${path} is neither /named/<name> nor /actors/<id>`);
    const cell = named ? this.named.get(key) : this.cells.get(key);
    return cell ?? new ActorError('not-found', `no actor ${named ? `named '${key}'` : `with id ${key}`} on node ${this.nodeId}`);
  }

  /** An ask or tell that arrived on a call channel: answered like the per-message routes answer. */
  private serveChannelCall(call: IncomingCall): void {
    const fail = (code: ActorErrorCode, message: string): void => call.reply(STATUS_OF[code], JSON.stringify({ error: { code, message } }));
    let body;
    try {
      body = parseCallBody(call.body);
    } catch (error) {
      this.metrics.badRequests.inc({ path: 'call' });
      return fail('bad-request', errorMessage(error));
    }
    const cell = this.cellAt(call.target);
    if (cell instanceof ActorError) return fail(cell.code, cell.message);
    const delivery = cell.deliver(body.method, body.args, call.mode);
    if (call.mode === 'tell') {
      delivery.result.catch((e) => this.log(`tell ${cell.label}.${body.method} failed: ${errorMessage(e)}`));
      return call.reply(202, '{}');
    }
    // The caller's CANCEL drops the call if still queued and aborts its signal if running.
    call.onCancel = () => delivery.cancel();
    delivery.result.then(
      (value) => call.reply(200, JSON.stringify({ result: value ?? null })),
      (error) => {
        const e = error instanceof ActorError ? error : new ActorError('failed', errorMessage(error));
        fail(e.code, e.message);
      },
    );
  }

  /** Writes a streamed reply as frames, honouring HTTP/2 flow control; a reset stream stops the producer. */
  private async pump(stream: http2.ServerHttp2Stream, iterable: AsyncIterable<unknown>): Promise<void> {
    const iterator = iterable[Symbol.asyncIterator]();
    let closed = stream.closed;
    const onClose = (): void => {
      closed = true;
      void iterator.return?.();
    };
    stream.once('close', onClose);
    if (closed) return void iterator.return?.();
    stream.respond({ ':status': 200, 'content-type': 'application/octet-stream', 'x-response-type': 'stream' });
    try {
      for (;;) {
        const next = await iterator.next();
        if (closed) return;
        if (next.done) break;
        if (!stream.write(jsonFrame(next.value))) await new Promise<void>((resolve) => {
          stream.once('drain', resolve);
          stream.once('close', resolve);
        });
      }
      stream.end(END_FRAME);
    } catch (error) {
      if (!closed) stream.end(errorFrame(errorMessage(error)));
    } finally {
      stream.off('close', onClose);
    }
  }

  // ---- observers ----

  private actorList(all: boolean): Array<Record<string, string>> {
    const rows: Array<Record<string, string>> = [];
    for (const cell of this.cells.values()) {
      const type = cell.name === undefined ? 'internal' : SYSTEM_NAME.test(cell.name) ? 'system' : 'user';
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
    return rows.sort((a, b) => (a.name ?? '').localeCompare(b.name ?? ''));
  }

  private health(): Record<string, unknown> {
    const members = this.membership.list();
    const named = new Set(members.filter((m) => m.status === 'Alive').flatMap((m) => m.actors));
    return {
      status: this.leaving ? 'leaving' : 'ok',
      node_id: this.nodeId,
      addr: this.addr,
      uptime_seconds: Math.round((Date.now() - this.startedAt) / 1000),
      actors_count: this.cells.size,
      actors: [...this.named.keys()].filter((n) => !SYSTEM_NAME.test(n)).sort(),
      named_actors: [...named].sort(),
      cluster: { joined: this.membership.isJoined, members: members.length, alive: members.filter((m) => m.status === 'Alive').length },
    };
  }

  renderMetrics(): string {
    const members = this.membership.list();
    const node = { node_id: this.nodeId };
    const parts = [
      gauge('actor_cluster_members', 'Cluster members known to this node, by status', STATUSES.map((s) => [{ ...node, status: s }, members.filter((m) => m.status === s).length])),
      gauge('actor_actors_total', 'Actors running on this node', [[node, this.cells.size]]),
      gauge('actor_named_actors_total', 'Named actors with an Alive instance in the cluster', [[node, new Set(members.filter((m) => m.status === 'Alive').flatMap((m) => m.actors)).size]]),
      gauge('actor_mailbox_depth', 'Messages queued or waiting in the mailboxes of this node', [[node, [...this.cells.values()].reduce((n, c) => n + c.load, 0)]]),
      gauge('actor_uptime_seconds', 'Seconds since this node started', [[node, Math.round((Date.now() - this.startedAt) / 1000)]]),
      ...Object.values(this.metrics).map((m) => m.render()),
    ];
    return `${parts.join('\n')}\n`;
  }

  /** Leaves the cluster (Left is announced to the members), stops the actors, closes the listener. */
  async shutdown(): Promise<void> {
    if (this.leaving) return;
    this.leaving = true;
    await this.membership.leave();
    await Promise.allSettled([...this.cells.values()].map((c) => c.stop()));
    // Channels never end on their own: close them so the sessions can close gracefully.
    this.channels.close();
    for (const channel of this.serverChannels) channel.end();
    await this.transport.close();
  }
}

function respond(stream: http2.ServerHttp2Stream, status: number, body: unknown): void {
  if (stream.destroyed || stream.closed || stream.headersSent) return;
  stream.respond({ ':status': status, 'content-type': 'application/json' });
  stream.end(JSON.stringify(body));
}

/** Turns a call reply into its value or the ActorError it carries. */
function decodeReply(status: number, body: Buffer, addr: string): unknown {
  let parsed: { result?: unknown; error?: { code?: string; message?: string } };
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    throw new ActorError('failed', `${addr} answered ${status} with a body that is not JSON`);
  }
  if (status === 200) return parsed.result;
  if (status === 202) return undefined;
  const code = (parsed.error?.code ?? 'failed') as ActorErrorCode;
  throw new ActorError(code in STATUS_OF ? code : 'failed', parsed.error?.message ?? `${addr} answered ${status}`);
}

/** Waits for a local result with a timeout and an abort signal; either fails the call (and drops it if still queued). */
async function withDeadline(delivery: Delivery, timeoutMs: number, signal: AbortSignal | undefined, what: string): Promise<unknown> {
  const cancelled = (): void => delivery.cancel(new ActorError('cancelled', `${what} cancelled`));
  if (signal?.aborted) cancelled();
  const timer = setTimeout(() => delivery.cancel(new ActorError('timeout', `${what} did not answer within ${timeoutMs} ms`)), timeoutMs);
  signal?.addEventListener('abort', cancelled, { once: true });
  try {
    return await delivery.result;
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', cancelled);
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

