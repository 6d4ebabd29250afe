/**
 * SWIM membership: join through seeds, direct probes, k indirect probes, suspicion with a timeout,
 * incarnation numbers to refute, and dissemination piggybacked on every membership message, plus a
 * periodic push-pull exchange of the whole table (which also heals partitions and restarted seeds).
 *
 * Rules for merging a record about member m (higher incarnation = newer news from m itself):
 *   Alive{i} overrides Alive/Suspect/Failed/Left{j} when i > j (m refuted).
 *   Suspect{i} overrides Alive{j} when i >= j, and Suspect/Failed{j} when i > j.
 *   Failed{i} overrides Alive/Suspect{j} when i >= j; Left{i} overrides any other status when i >= j.
 * A member that hears anything of itself other than its own record (suspected, failed, left, at
 * another address, with other actors) answers with Alive at a higher incarnation: records are
 * hearsay any peer can forge, and this is how a live member takes its place back. A leaving member
 * announces Left at a new incarnation and refutes nothing more, so stale news cannot revive it.
 * Hearsay may move a known member's incarnation by at most MAX_HEARSAY_STEP; its own reply, any amount.
 * A member keeps the address it joined with (a node process never moves; a restarted one has a new
 * id). A new id at an address already known replaces the older process only when the address itself
 * answers with that id: hearsay of it only makes this node probe the address.
 */
import { ADDR_HOST } from './address.js';
import { errorMessage } from './errors.js';
import { ACTOR_NAME_RE, MAX_RECORD_ACTORS, MAX_RECORD_ACTOR_CHARS, MAX_SWIM_BYTES, STATUSES, type MemberRecord, type MemberStatus, type MembershipTimers } from './members.js';
import { CLUSTER_HEADER, type Transport } from './transport.js';

interface Member extends MemberRecord {
  /** When this node last changed the member's status (local clock). */
  since: number;
}

const MAX_PIGGYBACK = 12;
/**
 * Bytes the records of one message may take: the limit peers hold us to, less room for the sender's
 * own record (bounded as every record is) and the message around them.
 */
const RECORDS_BYTES = MAX_SWIM_BYTES - 256 * 1024;
/**
 * How far hearsay may move a known member's incarnation at once. A member raises its own by one per
 * refutation or actor change, so honest news is rarely more than a few ahead; a forged record far
 * ahead would make the member refute past it, up to the largest incarnation peers accept, after
 * which it could refute nothing. A member's own reply (`direct`) may carry any jump.
 */
const MAX_HEARSAY_STEP = 1024;
/** Members told directly of this node's record when it joins or its actors change. */
const ANNOUNCE_FANOUT = 32;
export const SWIM_PATH = '/cluster/swim';

export type SwimMessage =
  | { type: 'ping'; from: MemberRecord; updates: MemberRecord[] }
  | { type: 'ping-req'; from: MemberRecord; target: { id: string; addr: string }; updates: MemberRecord[] }
  | { type: 'join' | 'sync'; from: MemberRecord; members: MemberRecord[] };

export type SwimReply = { type: 'ack' | 'nack'; from: MemberRecord; updates: MemberRecord[] } | { type: 'sync'; from: MemberRecord; members: MemberRecord[] };

export interface MembershipHooks {
  changed(member: MemberRecord, previous: MemberStatus | undefined): void;
  log(message: string): void;
  /** Problems an operator should see (no seed answers). */
  warn(message: string): void;
}

export class Membership {
  private readonly members = new Map<string, Member>();
  /** Removed ids, kept so stale gossip cannot bring them back. */
  private readonly tombstones = new Map<string, number>();
  private readonly outbox = new Map<string, { record: MemberRecord; sent: number }>();
  private readonly suspicions = new Map<string, NodeJS.Timeout>();
  private readonly timers: NodeJS.Timeout[] = [];
  private probeOrder: string[] = [];
  /** Addresses being probed to see which process answers there (see `apply`). */
  private readonly verifying = new Set<string>();
  /** Alive and Suspect members by status, then by named actor; rebuilt after any change (resolution reads it on every call). */
  private registry: Map<MemberStatus, Map<string, MemberRecord[]>> | undefined;
  private joined = false;
  private lastJoinWarning = 0;
  private stopped = false;
  self: Member;

  constructor(
    id: string,
    addr: string,
    private readonly seeds: string[],
    private readonly transport: Transport,
    readonly config: MembershipTimers,
    private readonly hooks: MembershipHooks,
  ) {
    this.self = { id, addr, status: 'Alive', inc: 0, started: Date.now(), actors: [], since: Date.now() };
    this.seeds = seeds.filter((s) => s !== addr);
  }

  start(): void {
    const every = (ms: number, fn: () => Promise<void> | void): void => {
      this.timers.push(setInterval(() => void Promise.resolve(fn()).catch((e) => this.hooks.log(`membership: ${(e as Error).message}`)), ms));
    };
    every(this.config.probeIntervalMs, () => this.probeRound());
    every(this.config.syncIntervalMs, () => this.syncRound());
    every(Math.max(200, Math.min(this.config.removeAfterMs, this.config.suspectTimeoutMs) / 4), () => this.sweep());
    if (this.seeds.length) void this.join();
    else this.joined = true;
  }

  /** Every known member, this node included. */
  list(): MemberRecord[] {
    return [this.record(this.self), ...[...this.members.values()].map((m) => this.record(m))];
  }

  /**
   * Members with an instance of the named actor, this node included: the Alive ones, or those SWIM
   * suspects (a missed probe, as a busy node misses one: it may well be alive, and refutes the
   * suspicion when it hears of it).
   */
  instancesOf(name: string, status: 'Alive' | 'Suspect' = 'Alive'): MemberRecord[] {
    if (!this.registry) {
      this.registry = new Map([
        ['Alive', new Map()],
        ['Suspect', new Map()],
      ]);
      for (const m of this.list()) {
        const byActor = this.registry.get(m.status);
        if (!byActor) continue;
        for (const a of m.actors) byActor.set(a, [...(byActor.get(a) ?? []), m]);
      }
    }
    return this.registry.get(status)!.get(name) ?? [];
  }

  get(id: string): MemberRecord | undefined {
    return id === this.self.id ? this.record(this.self) : this.members.get(id);
  }

  get isJoined(): boolean {
    return this.joined;
  }

  /** Publishes this node's named actors (a new incarnation so the newest list wins everywhere). */
  setActors(actors: string[]): void {
    const names = [...actors].sort();
    this.self.actors = publishable(names);
    // Peers refuse a record past the bounds: publishing every name would leave this node unknown.
    if (this.self.actors.length < names.length) {
      this.hooks.warn(`membership: ${names.length - this.self.actors.length} of ${names.length} named actors are not published (a member record lists at most ${MAX_RECORD_ACTORS} names, ${MAX_RECORD_ACTOR_CHARS} characters in all)`);
    }
    this.self.inc++;
    this.registry = undefined;
    this.enqueue(this.record(this.self));
    if (this.joined) this.announce();
  }

  /**
   * Tells members of this node's record at once (after joining, and when its actors change),
   * instead of waiting for probes to carry it: a new node or actor is known cluster-wide after one
   * round trip. Beyond ANNOUNCE_FANOUT members, gossip carries it the rest of the way.
   */
  private announce(): void {
    const me = this.record(this.self);
    const peers = shuffle([...this.members.values()].filter((m) => m.status === 'Alive')).slice(0, ANNOUNCE_FANOUT);
    for (const m of peers) void this.send(m.addr, { type: 'ping', from: me, updates: [me] }, this.config.probeTimeoutMs).catch(() => {});
  }

  /**
   * The member table as one message may carry it: this node first, the others in random order as
   * far as they fit, so that a table too big for one message still travels, a part each round.
   */
  private table(): MemberRecord[] {
    return fitting([this.record(this.self), ...shuffle([...this.members.values()].map((m) => this.record(m)))]);
  }

  private record(m: Member | MemberRecord): MemberRecord {
    return { id: m.id, addr: m.addr, status: m.status, inc: m.inc, started: m.started, actors: m.actors };
  }

  private async join(): Promise<void> {
    while (!this.stopped && !this.joined) {
      const replies = await Promise.allSettled(this.seeds.map((seed) => this.send(seed, { type: 'join', from: this.record(this.self), members: [] }, this.config.probeTimeoutMs * 3)));
      if (replies.some((r) => r.status === 'fulfilled')) {
        this.joined = true;
        this.announce();
        return;
      }
      const reasons = replies.map((r) => (r.status === 'rejected' ? errorMessage(r.reason) : '')).join('; ');
      const message = `membership: no seed let this node join (${reasons}); retrying every ${this.config.joinRetryMs} ms`;
      // Say it once, then every 30 s, not on every retry.
      if (Date.now() - this.lastJoinWarning > 30_000) {
        this.lastJoinWarning = Date.now();
        this.hooks.warn(message);
      } else this.hooks.log(message);
      await new Promise((r) => setTimeout(r, this.config.joinRetryMs));
    }
  }

  /** Announces Left to every member that can hear it, then stops all timers. */
  async leave(timeoutMs = 1000): Promise<void> {
    this.self.status = 'Left';
    this.self.inc++;
    this.registry = undefined;
    const me = this.record(this.self);
    const peers = [...this.members.values()].filter((m) => m.status === 'Alive' || m.status === 'Suspect');
    await Promise.allSettled(peers.map((m) => this.send(m.addr, { type: 'ping', from: me, updates: [me] }, timeoutMs)));
    this.stop();
  }

  stop(): void {
    this.stopped = true;
    for (const t of this.timers) clearInterval(t);
    for (const t of this.suspicions.values()) clearTimeout(t);
    this.suspicions.clear();
  }

  // ---- handling of incoming messages ----

  handle(message: SwimMessage): SwimReply | Promise<SwimReply> {
    const sender = this.members.get(message.from.id);
    this.apply(message.from);
    if (message.type === 'join' || message.type === 'sync') {
      for (const r of message.members) this.apply(r);
      return { type: 'sync', from: this.record(this.self), members: this.table() };
    }
    const probe = message as Extract<SwimMessage, { updates: MemberRecord[] }>;
    for (const r of probe.updates) this.apply(r);
    if (probe.type === 'ping-req') return this.indirect(probe.target);
    const updates = this.piggyback();
    // A sender we hold as Suspect/Failed may never hear of it otherwise: tell it so it can refute.
    if (sender && (sender.status === 'Suspect' || sender.status === 'Failed') && !updates.some((u) => u.id === sender.id)) updates.push(this.record(sender));
    return { type: 'ack', from: this.record(this.self), updates };
  }

  private async indirect(target: { id: string; addr: string }): Promise<SwimReply> {
    const ok = await this.ping(target.addr, this.config.probeTimeoutMs);
    return { type: ok ? 'ack' : 'nack', from: this.record(this.self), updates: this.piggyback() };
  }

  /**
   * Merges one record; returns true when it changed anything. `direct`: the record is the `from` of
   * a reply that came from the record's own address, the one thing a peer cannot forge by hearsay.
   */
  apply(r: MemberRecord, direct = false): boolean {
    if (!isRecord(r)) return false;
    if (r.id === this.self.id) {
      this.refute(r);
      return false;
    }
    if (this.tombstones.has(r.id)) return false;
    const current = this.members.get(r.id);
    if (!current) {
      if (r.addr === this.self.addr) return false; // an earlier process at our own address
      for (const other of this.members.values()) {
        if (other.addr !== r.addr) continue;
        if (other.started > r.started) return false; // news of an older process at that address
        // A restarted process, or a forgery that would evict a live member: the address tells which.
        if (!direct) return this.verify(r.addr), false;
        this.remove(other.id);
      }
      if (this.members.size >= MAX_MEMBERS - 1) return false; // with this node, the table is full
      this.set(r, undefined);
      return true;
    }
    if (r.addr !== current.addr) return false;
    if (!direct && r.inc > current.inc + MAX_HEARSAY_STEP) return false;
    const c = current.status;
    const newer =
      (r.status === 'Alive' && r.inc > current.inc) ||
      (r.status === 'Suspect' && (c === 'Alive' ? r.inc >= current.inc : r.inc > current.inc && c !== 'Left')) ||
      (r.status === 'Failed' && c !== 'Failed' && c !== 'Left' && r.inc >= current.inc) ||
      (r.status === 'Left' && c !== 'Left' && r.inc >= current.inc);
    if (!newer) return false;
    this.set(r, current);
    return true;
  }

  /** A record about this node that is not its own, at its incarnation or above: answer it with Alive above it. */
  private refute(r: MemberRecord): void {
    const self = this.self;
    // Only a forger can be that far ahead (others learn this node's incarnation from it), and peers refuse the jump.
    if (self.status !== 'Alive' || r.inc < self.inc || r.inc > self.inc + MAX_HEARSAY_STEP) return;
    if (r.status === 'Alive' && r.inc === self.inc && r.addr === self.addr && r.started === self.started && r.actors.join() === self.actors.join()) return;
    self.inc = r.inc + 1;
    this.registry = undefined;
    this.enqueue(this.record(self));
    const what = r.status === 'Alive' ? `a record of this node it did not send (address ${r.addr})` : r.status;
    this.hooks.log(`membership: refuting ${what} with incarnation ${self.inc}`);
  }

  /** Probes `addr` once (not again while that probe runs): its answer, applied as direct, says which process is there. */
  private verify(addr: string): void {
    if (this.stopped || this.verifying.has(addr)) return;
    this.verifying.add(addr);
    void this.ping(addr, this.config.probeTimeoutMs).finally(() => this.verifying.delete(addr));
  }

  private set(r: MemberRecord, previous: Member | undefined): void {
    const member: Member = { ...this.record(r), since: previous && previous.status === r.status ? previous.since : Date.now() };
    this.members.set(r.id, member);
    this.registry = undefined;
    const timer = this.suspicions.get(r.id);
    if (timer) {
      clearTimeout(timer);
      this.suspicions.delete(r.id);
    }
    if (r.status === 'Suspect') {
      const inc = r.inc;
      const t = setTimeout(() => {
        this.suspicions.delete(r.id);
        const m = this.members.get(r.id);
        if (m && m.status === 'Suspect' && m.inc === inc) this.set({ ...m, status: 'Failed' }, m);
      }, this.config.suspectTimeoutMs);
      this.suspicions.set(r.id, t);
    }
    this.enqueue(this.record(member));
    if (previous?.status !== r.status || previous.actors.join() !== r.actors.join()) this.hooks.changed(this.record(member), previous?.status);
  }

  private remove(id: string): void {
    const m = this.members.get(id);
    this.members.delete(id);
    this.registry = undefined;
    this.outbox.delete(id);
    this.tombstones.set(id, Date.now());
    const t = this.suspicions.get(id);
    if (t) clearTimeout(t);
    this.suspicions.delete(id);
    if (m) this.hooks.log(`membership: forgot ${m.addr} (${m.id}), ${m.status} since ${new Date(m.since).toISOString()}`);
  }

  // ---- dissemination ----

  private enqueue(record: MemberRecord): void {
    this.outbox.set(record.id, { record, sent: 0 });
  }

  private piggyback(): MemberRecord[] {
    const limit = this.config.retransmitMult * Math.ceil(Math.log2(this.members.size + 2));
    const entries = [...this.outbox.values()].sort((a, b) => a.sent - b.sent).slice(0, MAX_PIGGYBACK);
    // Bounded records make twelve fit with room for one more (the sender's, in an ack); fitting is what guarantees it.
    const records = fitting(entries.map((e) => e.record));
    for (const e of entries.slice(0, records.length)) {
      e.sent++;
      if (e.sent >= limit) this.outbox.delete(e.record.id);
    }
    return records;
  }

  // ---- failure detection ----

  private nextTarget(): Member | undefined {
    for (let tries = 0; tries < 2; tries++) {
      while (this.probeOrder.length) {
        const m = this.members.get(this.probeOrder.pop()!);
        if (m && (m.status === 'Alive' || m.status === 'Suspect')) return m;
      }
      this.probeOrder = shuffle([...this.members.values()].filter((m) => m.status === 'Alive' || m.status === 'Suspect').map((m) => m.id));
    }
    return undefined;
  }

  private probing = false;

  private async probeRound(): Promise<void> {
    if (this.probing || this.stopped) return; // a slow round must not pile up behind itself
    this.probing = true;
    try {
      const target = this.nextTarget();
      if (!target) return;
      if (await this.ping(target.addr, this.config.probeTimeoutMs)) return;
      const helpers = shuffle([...this.members.values()].filter((m) => m.status === 'Alive' && m.id !== target.id)).slice(0, this.config.indirectProbes);
      const acks = await Promise.allSettled(
        helpers.map(async (h) => {
          const reply = await this.send(h.addr, { type: 'ping-req', from: this.record(this.self), target: { id: target.id, addr: target.addr }, updates: this.piggyback() }, this.config.indirectTimeoutMs);
          if (reply.type !== 'ack') throw new Error('nack');
        }),
      );
      if (acks.some((a) => a.status === 'fulfilled')) return;
      const now = this.members.get(target.id);
      if (now && now.status === 'Alive' && now.inc === target.inc) {
        this.hooks.log(`membership: ${now.addr} (${now.id}) did not answer probes; Suspect`);
        this.set({ ...now, status: 'Suspect' }, now);
      }
    } finally {
      this.probing = false;
    }
  }

  private async ping(addr: string, timeoutMs: number): Promise<boolean> {
    try {
      const reply = await this.send(addr, { type: 'ping', from: this.record(this.self), updates: this.piggyback() }, timeoutMs);
      return reply.type === 'ack';
    } catch {
      return false;
    }
  }

  private async syncRound(): Promise<void> {
    if (this.stopped || !this.joined) return;
    const members = [...this.members.values()];
    const alive = members.filter((m) => m.status === 'Alive');
    const failed = members.filter((m) => m.status === 'Failed');
    const targets = new Set<string>();
    const pick = <T>(list: T[]): T | undefined => list[Math.floor(Math.random() * list.length)];
    const a = pick(alive);
    if (a) targets.add(a.addr);
    // Reaching a Failed member (a healed partition) lets both sides refute; alone, go back to the seeds.
    const f = pick(failed);
    if (f) targets.add(f.addr);
    if (!alive.length) for (const s of this.seeds) targets.add(s);
    const message = { type: 'sync' as const, from: this.record(this.self), members: this.table() };
    await Promise.allSettled([...targets].map((addr) => this.send(addr, message, this.config.probeTimeoutMs * 3)));
  }

  private sweep(): void {
    const now = Date.now();
    for (const m of [...this.members.values()]) {
      if ((m.status === 'Failed' || m.status === 'Left') && now - m.since > this.config.removeAfterMs) this.remove(m.id);
    }
    for (const [id, at] of this.tombstones) if (now - at > this.config.removeAfterMs * 10) this.tombstones.delete(id);
  }

  /**
   * Sends one message and merges the reply. Only a member of this cluster is listened to: a reply
   * that does not name our cluster is refused before anything in it is applied.
   */
  private async send(addr: string, message: SwimMessage, timeoutMs: number): Promise<SwimReply> {
    const reply = await this.transport.request(addr, SWIM_PATH, {
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(message),
      timeoutMs,
    });
    if (reply.status !== 200) throw new Error(`${addr} answered ${reply.status}${refusal(reply.body)}`);
    const cluster = reply.headers[CLUSTER_HEADER];
    if (cluster !== this.transport.cluster) {
      const answered = cluster === undefined ? `it answered without ${CLUSTER_HEADER}: not an actor node` : `it answered as '${String(cluster)}'`;
      throw new Error(`${addr} is not a member of cluster '${this.transport.cluster}' (${answered})`);
    }
    const parsed = JSON.parse(reply.body.toString('utf8')) as SwimReply;
    if (!isRecord(parsed.from)) throw new Error(`${addr} sent a malformed reply`);
    this.apply(parsed.from, parsed.from.addr === addr);
    for (const r of parsed.type === 'sync' ? parsed.members : parsed.updates) this.apply(r);
    return parsed;
  }
}

/**
 * The most members a node keeps, and so the most records a message may carry. Each new record is
 * checked against every member (a new process at a known address replaces the old one): a
 * message of tens of thousands of records froze a node for seconds.
 */
export const MAX_MEMBERS = 1024;

/** A member's address as nodes give theirs: a host name or IP (IPv6 in brackets) and a port 1-65535. */
const MEMBER_ADDR = new RegExp(`^(?:${ADDR_HOST}):(?:[1-9]\\d{0,3}|[1-5]\\d{4}|6[0-4]\\d{3}|65[0-4]\\d{2}|655[0-2]\\d|6553[0-5])$`);

/** A node id as nodes make theirs (32 hex digits), with room to spare: bounded, as everything in a record is. */
const MEMBER_ID = /^[A-Za-z0-9_-]{1,64}$/;

/** Why a record received from the network is not one, or undefined when it is. */
export function recordProblem(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null) return 'a member record must be an object';
  const r = value as Record<string, unknown>;
  if (typeof r.id !== 'string' || !MEMBER_ID.test(r.id)) return 'a member record needs an `id` of 1-64 of A-Z a-z 0-9 _ -';
  if (typeof r.addr !== 'string' || !MEMBER_ADDR.test(r.addr)) return 'a member record needs an `addr` host:port';
  if (!STATUSES.includes(r.status as MemberStatus)) return `a member record needs a \`status\` of ${STATUSES.join(', ')}`;
  // Safe integers only: past 2^53 a refutation's inc + 1 is the same number, and could never win.
  if (!Number.isSafeInteger(r.inc) || (r.inc as number) < 0 || (r.inc as number) >= Number.MAX_SAFE_INTEGER) return 'a member record needs an `inc` that is a safe integer >= 0';
  if (typeof r.started !== 'number') return 'a member record needs a `started` time';
  if (!Array.isArray(r.actors)) return 'a member record needs a list of `actors`';
  return actorsProblem(r.actors);
}

/**
 * Why a record's actor names are more than one record may carry. A record travels on every message
 * that piggybacks it and in every sync: without a bound, two records of a few MB made a node send
 * messages its peers refused, and its healthy peers looked Failed.
 */
function actorsProblem(actors: unknown[]): string | undefined {
  if (actors.length > MAX_RECORD_ACTORS) return `a member record lists ${actors.length} actors; at most ${MAX_RECORD_ACTORS}`;
  let chars = 0;
  for (const name of actors) {
    // The name itself is not repeated: it may be megabytes, or hold terminal escapes.
    if (typeof name !== 'string' || !ACTOR_NAME_RE.test(name)) return `a member record lists an actor name that does not match ${ACTOR_NAME_RE}`;
    chars += name.length;
  }
  return chars > MAX_RECORD_ACTOR_CHARS ? `a member record's actor names take ${chars} characters; at most ${MAX_RECORD_ACTOR_CHARS}` : undefined;
}

/** Checks the shape and bounds of a record received from the network. */
export function isRecord(value: unknown): value is MemberRecord {
  return recordProblem(value) === undefined;
}

/** The first of `names` (valid actor names) that one record may carry. */
function publishable(names: string[]): string[] {
  let chars = 0;
  const fit = names.findIndex((name, i) => (chars += name.length) > MAX_RECORD_ACTOR_CHARS || i >= MAX_RECORD_ACTORS);
  return fit === -1 ? names : names.slice(0, fit);
}

/** The first of `records` whose JSON fits RECORDS_BYTES: a node never sends a message its peers refuse for size. */
function fitting(records: MemberRecord[]): MemberRecord[] {
  let bytes = 0;
  const fit = records.findIndex((r) => (bytes += Buffer.byteLength(JSON.stringify(r)) + 1) > RECORDS_BYTES);
  return fit === -1 ? records : records.slice(0, fit);
}

/** Checks a SWIM message received from the network; the error names what is wrong. */
export function parseSwimMessage(value: unknown): SwimMessage {
  if (typeof value !== 'object' || value === null) throw new Error('membership message must be a JSON object');
  const m = value as Record<string, unknown>;
  const fromProblem = recordProblem(m.from);
  if (fromProblem) throw new Error(`membership message field \`from\`: ${fromProblem}`);
  const list = (key: string): void => {
    const records = m[key];
    if (!Array.isArray(records)) throw new Error(`membership message field \`${key}\` must be a list of member records`);
    if (records.length > MAX_MEMBERS) throw new Error(`membership message field \`${key}\` holds ${records.length} records; at most ${MAX_MEMBERS}`);
    for (const [i, r] of records.entries()) {
      const problem = recordProblem(r);
      if (problem) throw new Error(`membership message field \`${key}\` [${i}]: ${problem}`);
    }
  };
  switch (m.type) {
    case 'ping':
      list('updates');
      break;
    case 'ping-req': {
      list('updates');
      const t = m.target as Record<string, unknown> | undefined;
      if (typeof t?.id !== 'string' || !MEMBER_ID.test(t.id) || typeof t.addr !== 'string' || !MEMBER_ADDR.test(t.addr)) throw new Error('ping-req needs `target` {id, addr} as a member record has them');
      break;
    }
    case 'join':
    case 'sync':
      list('members');
      break;
    default:
      throw new Error(`unknown membership message type ${JSON.stringify(m.type)}`);
  }
  return value as SwimMessage;
}

function shuffle<T>(items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [items[i], items[j]] = [items[j]!, items[i]!];
  }
  return items;
}

/** What a refusing node said (its error message), for the log. */
function refusal(body: Buffer): string {
  try {
    const message = (JSON.parse(body.toString('utf8')) as { error?: { message?: unknown } }).error?.message;
    return typeof message === 'string' ? `: ${message}` : '';
  } catch {
    return '';
  }
}
