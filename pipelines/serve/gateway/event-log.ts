/**
 * The gateway's durable event log: the canonical copy of every event it acknowledged, in
 * `<state>/gateway/events/segment-<n>.log`. A `200` of the gateway means the events are in this
 * log and fsynced: the dataset's `events` relation and the runs decoded from them (projection.ts)
 * are derived from it and may lag behind.
 *
 * - **Entries.** One line per accepted batch of one trace: `<JSON>\t<CRC-32 of the JSON, 8 hex
 *   digits>\n`, the JSON `{a: agent_id, s: session_id, root?: root_session_id, p: partition,
 *   at: received at, records: [...]}` with only the records that were new. JSON text holds no raw
 *   newline, so a line is an entry; the checksum tells a whole entry from a torn one.
 * - **Group commit.** Appends that arrive while a write and its fsync are under way wait and go
 *   out together in the next one: one `write` and one `fdatasync` for every batch of every trace
 *   that arrived meanwhile, so concurrent clients share the cost of durability. Each append's
 *   promise settles after the fsync that covers it. The entries of one append (an OTLP export
 *   holds many traces, and a trace's records go in entries of at most MAX_RECORDS) share one write,
 *   so a failed write or a refusal for capacity leaves nothing of it stored.
 * - **Idempotence.** A record is known by its trace and its `source` and `seq` (events.ts
 *   `eventKey`); one already stored, or in a write under way, is not written again (a retry whose
 *   first attempt is still being written waits for it). The stored keys are kept as ranges of seqs
 *   per source (seq-ranges.ts), rebuilt from the log when it is opened, so this holds across restarts.
 * - **Crashes.** Opening the log reads every segment: a torn last entry (written, never
 *   acknowledged: the fsync had not returned) is cut off; every acknowledged one was fsynced whole.
 *   A failed write (disk full, a file size limit) is cut off the file at once, and its appends
 *   fail; if it cannot be cut off, the log refuses further appends until it is opened again.
 * - **Capacity.** At most `maxPendingBytes` of entries may be on their way to the disk (waiting for
 *   their write, or in it); past that an append is refused (CapacityError) rather than queued
 *   without bound, unless nothing is on its way at all.
 *
 * Segments are started past SEGMENT_BYTES. Each trace keeps, in memory, where its entries are
 * (segment, offset, length) and its event keys; its events are read back from the segments. A trace
 * holds at most `maxTraceEvents` events (TraceFullError past it), which bounds what it keeps and
 * what reading it back costs.
 *
 * **Letting go.** A resident gateway receives events for days: were every entry kept, its memory,
 * its segments and the replay at start-up would grow with every event it ever took. Once a trace is
 * projected and idle (projection.ts calls `settle` after the commit, when nothing came meanwhile),
 * its events are in the dataset, which becomes their canonical copy: the log keeps only the trace's
 * summary (counts, times, partition) and its event keys (seq-ranges.ts, a few numbers per source:
 * retries stay duplicates forever), written to `settled.log` (entries like the segments', the last
 * one of a trace wins) and fsynced before anything is dropped. Then its entries leave memory, and a
 * segment (the current one too, by starting another) none of whose entries belongs to a trace still
 * held is deleted; at start-up a settled trace's entries are skipped and such segments deleted, so
 * the replay holds only what is not projected. A settled trace's events are read back from the
 * dataset (the `ArchiveReader`), before those it took since (a late event projects the whole trace
 * again). Without an ArchiveReader the log lets go of nothing. A trace settled again supersedes its
 * line in `settled.log`; once superseded lines pile up, the file is rewritten crash-safely with only
 * the latest of each trace (`rewriteSettled`): it grows with the traces, not with the settles.
 */
import { closeSync, existsSync, fstatSync, fsyncSync, mkdirSync, openSync, readdirSync, readSync, ftruncateSync, rmSync, statSync } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { setImmediate } from 'node:timers/promises';
import { crc32 } from 'node:zlib';
import { Subject } from 'rxjs';
import { chunks } from '../../../lib/chunks.js';
import { UnavailableError } from '../../../lib/errors.js';
import type { Logger } from '../../../lib/log.js';
import { DurableFile, fsyncPath } from '../../../lib/durable.js';
import { eventKey, MAX_RECORDS, type EventRecord } from './events.js';
import { GatewayFailure } from './failure.js';
import { SeqRanges } from './seq-ranges.js';

/** Bytes of entries read back between two turns of the event loop. */
const READ_SLICE_BYTES = 4 * 1024 * 1024;
/** A new segment is started once the current one is past this. */
export const SEGMENT_BYTES = 64 * 1024 * 1024;
/** Default bound of the bytes waiting for a write (TRAJSTORE_GATEWAY_MAX_PENDING_BYTES overrides it). */
export const DEFAULT_MAX_PENDING_BYTES = 64 * 1024 * 1024;
/**
 * Default bound of the events of one trace (TRAJSTORE_GATEWAY_MAX_TRACE_EVENTS overrides it): far
 * past any agent session (a long one has thousands), and small enough to keep projecting a trace (one
 * document) and paging it bounded: a page of a million events takes about half a second, and a trace
 * of 2.3 million took 3 GB to project.
 */
export const DEFAULT_MAX_TRACE_EVENTS = 1_000_000;

export interface LogLimits {
  maxPendingBytes: number;
  maxTraceEvents: number;
}

export interface TraceRef {
  agentId: string;
  sessionId: string;
}

/** The text that names a trace: both parts are path-safe segments, so `/` cannot be inside either. */
export const traceIdOf = (ref: TraceRef): string => `${ref.agentId}/${ref.sessionId}`;

/** Where a line is in a file. */
interface LineAt {
  offset: number;
  length: number;
}

interface Location extends LineAt {
  segment: number;
}

/** What the log knows of one trace (a session of an agent). */
export interface Trace extends TraceRef {
  id: string;
  rootSessionId: string | undefined;
  /** The `--gateway-split` partition ('' without one); a trace stays in its first. */
  partition: string;
  /** Events stored (durable), those let go of included. */
  events: number;
  /** The first events stored that the log let go of once they were projected: the dataset holds them (`settle`). */
  archived: number;
  /** Bytes of its entries in the log. */
  bytes: number;
  firstReceivedAt: string | undefined;
  lastReceivedAt: string | undefined;
  /** Where its entries are that the log still holds (those of events not let go of). */
  entries: Location[];
  /** Where its latest summary is in SETTLED_FILE, once it was let go of: the line a rewrite of the file keeps. */
  settledAt?: LineAt | undefined;
  /** The `seq`s stored per `source`: the event keys, compactly. */
  readonly seqs: Map<string, SeqRanges>;
  /** Keys in a write under way, and that write. */
  readonly pending: Map<string, Promise<void>>;
}

/** One event as stored: the record as it was sent, and when the gateway acknowledged it. */
export interface StoredEvent {
  record: EventRecord;
  receivedAt: string;
}

/** The events of a trace the log let go of, in trace order: the dataset's copy (archive.ts). */
export type ArchiveReader = (trace: Trace) => Promise<StoredEvent[]>;

/** What the log holds, for /api/gateway. */
export interface LogStats {
  traces: number;
  /** Entries held in memory (traces not let go of). */
  entries: number;
  /** Segment files. */
  segments: number;
}

export interface AppendRequest extends TraceRef {
  rootSessionId?: string | undefined;
  /** The partition of a trace seen for the first time (ignored for a known one). */
  partition: () => string;
  records: readonly EventRecord[];
  /** Taken even past the capacity bound (the capture gateway's own records: a call already answered must not be lost). */
  mustTake?: boolean | undefined;
}

export interface AppendResult {
  trace: Trace;
  /** Records written by this append. */
  stored: number;
  /** Records of the request that were stored already (or twice in it). */
  duplicates: number;
}

/** The log has more on its way to the disk than it may hold: the client should retry later (HTTP 429). */
export class CapacityError extends GatewayFailure {
  constructor(message: string) {
    super(429, 'capacity_exhausted', message);
  }
}
/** The append would make a trace hold more events than it may: the client should start another session (HTTP 413). */
export class TraceFullError extends GatewayFailure {
  constructor(message: string) {
    super(413, 'trace_full', message);
  }
}
/** The write or its fsync failed: nothing of this append is acknowledged (HTTP 503). */
export class AppendFailedError extends GatewayFailure {
  constructor(message: string) {
    super(503, 'append_failed', message);
  }
}

/** Records per entry: an entry is read back whole, so one is no bigger than one request of /v1/events. */
const MAX_ENTRY_RECORDS = MAX_RECORDS;

interface AppendPlan {
  request: AppendRequest;
  trace: Trace;
  /** Records to write. */
  fresh: EventRecord[];
  /** Writes under way that hold some of its records. */
  inFlight: Promise<void>[];
}

interface Waiting {
  bytes: Buffer;
  trace: Trace;
  keys: string[];
  records: EventRecord[];
  at: string;
  settle: (error?: Error) => void;
}

const segmentName = (n: number): string => `segment-${String(n).padStart(8, '0')}.log`;
/** The summaries of the traces the log let go of. */
const SETTLED_FILE = 'settled.log';
/** Where SETTLED_FILE is rewritten: a fixed name (the dataset's writers sweep lib/durable's temporaries), so a crashed rewrite's is replaced by the next. */
const SETTLED_REWRITE = `${SETTLED_FILE}.partial`;
/**
 * SETTLED_FILE is rewritten with only the latest line of each trace once this many of its lines are
 * superseded (a trace settled again after a late event) and at least as many as the latest ones:
 * each rewrite then copies no more lines than settles appended since the last, so the file stays
 * within twice its live lines (or this many more) at a constant cost per settle.
 */
export const SETTLED_REWRITE_MIN_SUPERSEDED = 1024;

/** An entry line: the JSON, a tab, its CRC-32 in hex, a newline. */
function entryLine(json: string): Buffer {
  const body = Buffer.from(json, 'utf8');
  return Buffer.concat([body, Buffer.from(`\t${crc32(body).toString(16).padStart(8, '0')}\n`, 'latin1')]);
}

interface EntryJson {
  a: string;
  s: string;
  root?: string;
  p: string;
  at: string;
  records: EventRecord[];
}

/** A line of SETTLED_FILE: a trace let go of, all its `n` events in the dataset. */
interface SettledJson {
  a: string;
  s: string;
  root?: string;
  p: string;
  /** Events, bytes of entries, first and last received. */
  n: number;
  b: number;
  f: string | null;
  l: string | null;
  /** SeqRanges per source. */
  seqs: Record<string, number[]>;
}

/** The entry at a location of an open segment; throws when it is cut short or damaged. */
function readEntry(fd: number, at: Location): EntryJson {
  const line = Buffer.alloc(at.length);
  if (readAt(fd, line, at.offset) < at.length) throw new Error(`${segmentName(at.segment)}: entry at ${at.offset} is cut short`);
  const entry = parseLine<EntryJson>(line.subarray(0, at.length - 1));
  if (!entry) throw new Error(`${segmentName(at.segment)}: entry at ${at.offset} is damaged`);
  return entry;
}

/** Reads into `bytes` from `position` until it is full or the file ends; the bytes read. */
function readAt(fd: number, bytes: Buffer, position: number): number {
  let read = 0;
  while (read < bytes.length) {
    const n = readSync(fd, bytes, read, bytes.length - read, position + read);
    if (n === 0) break;
    read += n;
  }
  return read;
}

/** The JSON of a line (without its newline), or undefined when it is torn or damaged. */
function parseLine<T>(line: Buffer): T | undefined {
  const tab = line.lastIndexOf(0x09);
  if (tab < 0 || line.length - tab !== 9) return undefined;
  const body = line.subarray(0, tab);
  if (crc32(body).toString(16).padStart(8, '0') !== line.subarray(tab + 1).toString('latin1')) return undefined;
  try {
    return JSON.parse(body.toString('utf8')) as T;
  } catch {
    return undefined;
  }
}

export class EventLog {
  private readonly traces = new Map<string, Trace>();
  private readonly waiting: Waiting[] = [];
  /** Bytes of entries not yet durable: waiting for their write, or in it. */
  private unsyncedBytes = 0;
  private flushing: Promise<void> | undefined;
  private handle: FileHandle | undefined;
  private segment = 0;
  private size = 0;
  /** Segment files on disk. */
  private readonly segments = new Set<number>();
  /** Per segment, the traces held (not let go of) that have entries in it: one with none is deleted. */
  private readonly heldIn = new Map<number, Set<string>>();
  /** Segments with a damaged entry: kept for whoever looks into it, never deleted. */
  private readonly damaged = new Set<number>();
  /** Entries held in memory. */
  private heldEntries = 0;
  /** SETTLED_FILE, open for appends once something is let go of, and its length. */
  private settledHandle: FileHandle | undefined;
  private settledSize = 0;
  /** Lines of SETTLED_FILE, and those of them that are the latest of their trace (a trace's `settledAt`). */
  private settledLines = 0;
  private latestSettledLines = 0;
  /** After a rewrite failed, the next is tried once the file has this many lines. */
  private rewriteSettledAt = 0;
  private rewritingSettled: Promise<void> | undefined;
  /** Why nothing more is let go of (SETTLED_FILE could not be written, nor cut back). */
  private settleBroken: Error | undefined;
  private broken: Error | undefined;
  private closed = false;
  /** Traces whose events became durable, once per write (projection listens). */
  readonly appended = new Subject<Trace>();

  private constructor(
    readonly dir: string,
    private readonly log: Logger,
    private readonly limits: LogLimits,
    private readonly archive: ArchiveReader | undefined,
  ) {}

  /**
   * Opens (or creates) the log in `dir`, reading the settled traces and every entry back; cuts off a
   * torn last entry, and deletes the segments that hold nothing of a trace still held.
   */
  static async open(dir: string, log: Logger, limits: Partial<LogLimits> = {}, archive?: ArchiveReader): Promise<EventLog> {
    mkdirSync(dir, { recursive: true });
    const events = new EventLog(dir, log, { maxPendingBytes: DEFAULT_MAX_PENDING_BYTES, maxTraceEvents: DEFAULT_MAX_TRACE_EVENTS, ...limits }, archive);
    const segments = readdirSync(dir)
      .map((name) => /^segment-(\d{8})\.log$/.exec(name))
      .filter((m): m is RegExpExecArray => m !== null)
      .map((m) => Number(m[1]))
      .sort((a, b) => a - b);
    events.readSettled();
    segments.forEach((n, i) => events.replay(n, i === segments.length - 1));
    await events.openSegment(segments.at(-1) ?? 1);
    await events.reclaim();
    // A rewrite a crash cut short: SETTLED_FILE is whole beside it.
    rmSync(join(dir, SETTLED_REWRITE), { force: true });
    await events.rewriteSettledWhenDue();
    return events;
  }

  /**
   * Calls `take` with each entry of a file (its JSON, offset and length), reading it in slices of
   * READ_SLICE_BYTES (a file is never held whole: settled.log grows with every trace ever settled).
   * A damaged entry is left out (and logged). In a file that is only appended to, a torn end is a
   * write a crash cut short, never acknowledged: it is cut off (`cut` 'tail'); in the last segment,
   * a damaged entry and all after it are (`cut` 'rest'). Returns whether a damaged entry was left out.
   */
  private readEntries<T>(path: string, cut: 'rest' | 'tail' | 'none', take: (json: T, offset: number, length: number) => void): boolean {
    let damaged = false;
    let cutAt: number | undefined;
    let size = 0;
    const fd = openSync(path, 'r');
    try {
      size = fstatSync(fd).size;
      // One buffer, reused: its lines are taken, the start of a line it ends with moved to its front, and it is filled again.
      let buffer = Buffer.alloc(READ_SLICE_BYTES);
      let filled = 0;
      /** Where in the file buffer[0] is. */
      let bufferAt = 0;
      let readTo = 0;
      for (;;) {
        // A line longer than the buffer: it grows to hold it.
        if (filled === buffer.length) buffer = Buffer.concat([buffer, Buffer.alloc(buffer.length)]);
        const n = readTo < size ? readSync(fd, buffer, filled, Math.min(buffer.length - filled, size - readTo), readTo) : 0;
        readTo += n;
        filled += n;
        const bytes = buffer.subarray(0, filled);
        let start = 0;
        for (let end = bytes.indexOf(0x0a); end >= 0 && cutAt === undefined; end = bytes.indexOf(0x0a, start)) {
          const offset = bufferAt + start;
          const json = parseLine<T>(bytes.subarray(start, end));
          if (json !== undefined) take(json, offset, end + 1 - start);
          else if (cut === 'rest' || (cut === 'tail' && bufferAt + end === size - 1)) cutAt = offset;
          else {
            this.log.error(`${path}: a damaged entry at byte ${offset} is left out`);
            damaged = true;
          }
          start = end + 1;
        }
        if (cutAt !== undefined) break;
        if (n === 0) {
          // What follows the last newline: a line a crash cut short.
          if (start === filled) break;
          if (cut !== 'none') cutAt = bufferAt + start;
          else {
            this.log.error(`${path}: a damaged entry at byte ${bufferAt + start} is left out`);
            damaged = true;
          }
          break;
        }
        buffer.copyWithin(0, start, filled);
        filled -= start;
        bufferAt += start;
      }
    } finally {
      closeSync(fd);
    }
    if (cutAt !== undefined) {
      this.log.warn(`${path}: cut off ${size - cutAt} bytes of an entry that was never acknowledged (a write cut short by a crash)`);
      const rw = openSync(path, 'r+');
      try {
        ftruncateSync(rw, cutAt);
        fsyncSync(rw);
      } finally {
        closeSync(rw);
      }
    }
    return damaged;
  }

  /** Reads the summaries of the traces let go of (the last of a trace is its latest). */
  private readSettled(): void {
    const path = join(this.dir, SETTLED_FILE);
    if (!existsSync(path)) return;
    this.readEntries<SettledJson>(path, 'tail', (settled, offset, length) => {
      const trace = this.traceFor({ agentId: settled.a, sessionId: settled.s }, settled.root, () => settled.p);
      this.settledLines += 1;
      if (trace.settledAt === undefined) this.latestSettledLines += 1;
      trace.settledAt = { offset, length };
      trace.events = settled.n;
      trace.archived = settled.n;
      trace.bytes = settled.b;
      trace.firstReceivedAt = settled.f ?? undefined;
      trace.lastReceivedAt = settled.l ?? undefined;
      trace.seqs.clear();
      for (const [source, bounds] of Object.entries(settled.seqs)) trace.seqs.set(source, SeqRanges.fromJSON(bounds));
    });
  }

  /** Reads a segment's entries into the traces, but those of events let go of; in the last segment a damaged entry and all after it are cut off. */
  private replay(segment: number, last: boolean): void {
    this.segments.add(segment);
    const damaged = this.readEntries<EntryJson>(join(this.dir, segmentName(segment)), last ? 'rest' : 'none', (entry, offset, length) => {
      const trace = this.traceFor({ agentId: entry.a, sessionId: entry.s }, entry.root, () => entry.p);
      // An entry is written whole after its trace was last let go of, or was let go of whole.
      if (trace.archived > 0 && entry.records.every((r) => trace.seqs.get(r.source)?.has(r.seq))) return;
      this.stored(trace, { segment, offset, length }, entry.records, entry.at);
    });
    if (damaged) this.damaged.add(segment);
  }

  private async openSegment(n: number): Promise<void> {
    const path = join(this.dir, segmentName(n));
    const created = !existsSync(path);
    const handle = await open(path, 'a');
    if (created) {
      await handle.sync();
      fsyncPath(this.dir);
    }
    const old = this.handle;
    this.handle = handle;
    this.segment = n;
    this.segments.add(n);
    this.size = (await handle.stat()).size;
    await old?.close();
  }

  private traceFor(ref: TraceRef, rootSessionId: string | undefined, partition: () => string): Trace {
    const id = traceIdOf(ref);
    let trace = this.traces.get(id);
    if (!trace) {
      // Named field by field: `ref` may be the append's request, whose records a spread would keep for as long as the trace.
      trace = {
        agentId: ref.agentId,
        sessionId: ref.sessionId,
        id,
        rootSessionId,
        partition: partition(),
        events: 0,
        archived: 0,
        bytes: 0,
        firstReceivedAt: undefined,
        lastReceivedAt: undefined,
        entries: [],
        seqs: new Map(),
        pending: new Map(),
      };
      this.traces.set(id, trace);
    }
    return trace;
  }

  /** Records that an entry is durable. */
  private stored(trace: Trace, at: Location, records: readonly Pick<EventRecord, 'source' | 'seq'>[], receivedAt: string): void {
    trace.entries.push(at);
    this.heldEntries += 1;
    let held = this.heldIn.get(at.segment);
    if (!held) this.heldIn.set(at.segment, (held = new Set()));
    held.add(trace.id);
    for (const r of records) {
      let seqs = trace.seqs.get(r.source);
      if (!seqs) trace.seqs.set(r.source, (seqs = new SeqRanges()));
      seqs.add(r.seq);
    }
    trace.events += records.length;
    trace.bytes += at.length;
    trace.firstReceivedAt ??= receivedAt;
    trace.lastReceivedAt = receivedAt;
  }

  /**
   * Lets go of traces whose every stored event the dataset now holds (`projected`: the events each
   * had when it was projected; one that got more since is kept). Their summaries are made durable
   * first; then their entries leave memory and the segments left without a held trace are deleted.
   */
  async settle(projected: ReadonlyArray<readonly [Trace, number]>): Promise<void> {
    const leaving = () => projected.filter(([trace, n]) => n === trace.events && trace.entries.length > 0).map(([trace]) => trace);
    if (!this.archive || this.closed || this.settleBroken || leaving().length === 0) return;
    const settling = leaving();
    const lines = settling.map((trace) => {
      const settled: SettledJson = { a: trace.agentId, s: trace.sessionId, ...(trace.rootSessionId !== undefined ? { root: trace.rootSessionId } : {}), p: trace.partition, n: trace.events, b: trace.bytes, f: trace.firstReceivedAt ?? null, l: trace.lastReceivedAt ?? null, seqs: Object.fromEntries([...trace.seqs].map(([source, seqs]) => [source, seqs.toJSON()])) };
      return entryLine(JSON.stringify(settled));
    });
    const at = await this.appendSettled(Buffer.concat(lines));
    if (at === undefined) return;
    // Each trace's line is its latest (a trace that got events during the write too: it is what a replay would take).
    let offset = at;
    settling.forEach((trace, i) => {
      if (trace.settledAt === undefined) this.latestSettledLines += 1;
      trace.settledAt = { offset, length: lines[i]!.length };
      offset += lines[i]!.length;
    });
    this.settledLines += lines.length;
    // A trace that got events during the write keeps them all; its summary (of fewer) stands for the ones it had.
    for (const trace of leaving()) {
      for (const segment of new Set(trace.entries.map((at) => at.segment))) this.heldIn.get(segment)?.delete(trace.id);
      this.heldEntries -= trace.entries.length;
      trace.entries = [];
      trace.archived = trace.events;
    }
    if (!this.closed) this.flushing ??= this.flush().finally(() => (this.flushing = undefined));
    await this.rewriteSettledWhenDue();
  }

  /** Appends summaries to SETTLED_FILE and fsyncs them; where they begin, or undefined (logged) when that failed, and then nothing of them is in it. */
  private async appendSettled(bytes: Buffer): Promise<number | undefined> {
    const path = join(this.dir, SETTLED_FILE);
    try {
      if (!this.settledHandle) {
        const created = !existsSync(path);
        this.settledHandle = await open(path, 'a');
        this.settledSize = (await this.settledHandle.stat()).size;
        if (created) fsyncPath(this.dir);
      }
      for (let written = 0; written < bytes.length; ) {
        const { bytesWritten } = await this.settledHandle.write(bytes, written, bytes.length - written, this.settledSize + written);
        written += bytesWritten;
      }
      await this.settledHandle.datasync();
      const at = this.settledSize;
      this.settledSize += bytes.length;
      return at;
    } catch (error) {
      this.log.warn(`${path}: cannot keep the summaries of projected traces, so the log keeps their events: ${(error as Error).message}`);
      try {
        await this.settledHandle?.truncate(this.settledSize);
        await this.settledHandle?.datasync();
      } catch (cut) {
        this.settleBroken = cut as Error;
      }
      return undefined;
    }
  }

  /**
   * Rewrites SETTLED_FILE when enough of its lines are superseded (SETTLED_REWRITE_MIN_SUPERSEDED);
   * close() waits for it. Nothing settles meanwhile: settle() awaits this, and the projection
   * settles one batch at a time (PROJECTION_CONCURRENCY), so no line is appended to the old file
   * after the rewrite has taken its list of latest lines.
   */
  private async rewriteSettledWhenDue(): Promise<void> {
    const superseded = this.settledLines - this.latestSettledLines;
    if (this.closed || superseded < SETTLED_REWRITE_MIN_SUPERSEDED || superseded < this.latestSettledLines || this.settledLines < this.rewriteSettledAt) return;
    this.rewritingSettled = this.rewriteSettled().finally(() => (this.rewritingSettled = undefined));
    await this.rewritingSettled;
  }

  /**
   * Rewrites SETTLED_FILE with only the latest line of each trace, copied as it is, in the order of
   * the file, a slice at a time with a turn of the event loop between. The new file is written under
   * SETTLED_REWRITE, fsynced, renamed over the old one, and the directory fsynced (lib/durable): a
   * crash at any point leaves the old file or the new one, either holding every trace's latest
   * summary. A failure leaves the old file in use (logged), and the rewrite is tried again once it
   * has twice the lines.
   */
  private async rewriteSettled(): Promise<void> {
    const path = join(this.dir, SETTLED_FILE);
    const kept = [...this.traces.values()].filter((t): t is Trace & { settledAt: LineAt } => t.settledAt !== undefined).sort((a, b) => a.settledAt.offset - b.settledAt.offset);
    const moved: LineAt[] = [];
    let written = 0;
    let fd: number | undefined;
    let oldFile: number | undefined;
    let file: DurableFile | undefined;
    let failure: Error | undefined;
    try {
      fd = openSync(path, 'r');
      oldFile = fstatSync(fd).ino;
      rmSync(join(this.dir, SETTLED_REWRITE), { force: true });
      file = new DurableFile(path, { temp: join(this.dir, SETTLED_REWRITE) });
      const slice = Buffer.alloc(READ_SLICE_BYTES);
      for (let i = 0; i < kept.length; ) {
        const from = kept[i]!.settledAt.offset;
        // A slice holds at least the first line whole.
        const bytes = kept[i]!.settledAt.length > slice.length ? Buffer.alloc(kept[i]!.settledAt.length) : slice;
        const n = readAt(fd, bytes, from);
        const lines: Buffer[] = [];
        for (; i < kept.length && kept[i]!.settledAt.offset + kept[i]!.settledAt.length <= from + n; i++) {
          const at = kept[i]!.settledAt;
          lines.push(bytes.subarray(at.offset - from, at.offset - from + at.length));
          moved.push({ offset: written, length: at.length });
          written += at.length;
        }
        if (lines.length === 0) throw new Error(`${SETTLED_FILE}: the line at ${from} is cut short`);
        file.write(Buffer.concat(lines));
        await setImmediate();
      }
      file.commit();
    } catch (error) {
      file?.abort();
      failure = error as Error;
    } finally {
      if (fd !== undefined) closeSync(fd);
    }
    // A failure after the rename (the directory's fsync) still leaves the new file in place: appends must go to it.
    const now = oldFile === undefined ? undefined : statSync(path, { throwIfNoEntry: false })?.ino;
    if (now === undefined || now === oldFile) {
      this.rewriteSettledAt = this.settledLines * 2;
      this.log.warn(`${path}: cannot rewrite it without its ${this.settledLines - this.latestSettledLines} superseded lines (it is kept as it is, and tried again once it has ${this.rewriteSettledAt} lines): ${failure?.message}`);
      return;
    }
    if (failure) this.log.warn(`${path}: rewritten, but ${failure.message}`);
    // Appends go to the new file: it is opened again at the next.
    const old = this.settledHandle;
    this.settledHandle = undefined;
    await old?.close();
    kept.forEach((trace, i) => (trace.settledAt = moved[i]!));
    this.settledLines = kept.length;
  }


  /**
   * Starts a new segment when the current one is full, or holds nothing of a trace still held (so
   * that it can go); deletes the other segments that hold nothing of one. Runs in the flush chain,
   * so no write is under way.
   */
  private async reclaim(): Promise<void> {
    const needed = (segment: number): boolean => (this.heldIn.get(segment)?.size ?? 0) > 0 || this.damaged.has(segment);
    if (this.size >= SEGMENT_BYTES || (this.size > 0 && !needed(this.segment))) {
      try {
        await this.openSegment(this.segment + 1);
      } catch (error) {
        this.broken = error as Error;
        this.log.error(`${this.dir}: cannot start a new segment: ${(error as Error).message}`);
        return;
      }
    }
    const unneeded = [...this.segments].filter((segment) => segment !== this.segment && !needed(segment));
    if (unneeded.length === 0) return;
    try {
      for (const segment of unneeded) {
        rmSync(join(this.dir, segmentName(segment)), { force: true });
        this.segments.delete(segment);
        this.heldIn.delete(segment);
      }
      fsyncPath(this.dir);
    } catch (error) {
      // Kept for the next try: what it holds is in the dataset, and a replay skips it.
      this.log.warn(`${this.dir}: cannot delete a segment of projected events: ${(error as Error).message}`);
    }
  }

  /** What the log holds. */
  get stats(): LogStats {
    return { traces: this.list().length, entries: this.heldEntries, segments: this.segments.size };
  }

  /** Known traces (with at least one stored event), in the order they were first seen. */
  list(): Trace[] {
    return [...this.traces.values()].filter((t) => t.events > 0);
  }

  get(ref: TraceRef | string): Trace | undefined {
    const trace = this.traces.get(typeof ref === 'string' ? ref : traceIdOf(ref));
    return trace && trace.events > 0 ? trace : undefined;
  }

  /** The partition of a route (an agent and its root session) already placed, so a subagent's session follows its root. */
  partitionOfRoute(agentId: string, rootSessionId: string): string | undefined {
    return this.traces.get(traceIdOf({ agentId, sessionId: rootSessionId }))?.partition;
  }

  /**
   * Appends a trace's records; resolves once they are durable. Records whose key is stored already
   * (or repeated in the request) are not written again; one in a write under way is waited for.
   */
  async append(request: AppendRequest): Promise<AppendResult> {
    const [result] = await this.appendAll([request]);
    return result as AppendResult;
  }

  /**
   * Appends the records of several traces as one (an OTLP export holds many): every entry goes into
   * the same write, after one capacity check for all of them, so either all are durable when it
   * resolves or none of them was written.
   */
  async appendAll(requests: readonly AppendRequest[]): Promise<AppendResult[]> {
    if (this.closed) throw new AppendFailedError('the gateway is stopping');
    if (this.broken) throw new AppendFailedError(`the event log cannot be written: ${this.broken.message}`);
    const seen = new Map<Trace, Set<string>>();
    const plans = requests.map((request) => this.plan(request, seen));
    try {
      this.checkTraceSizes(plans);
      const entries = plans.flatMap((plan) => chunks(plan.fresh, MAX_ENTRY_RECORDS).map((records) => this.entryOf(plan.trace, records)));
      const bytes = entries.reduce((sum, entry) => sum + entry.bytes.length, 0);
      if (!requests.some((r) => r.mustTake === true) && !this.hasRoomFor(bytes)) {
        throw new CapacityError(`${this.unsyncedBytes} bytes of events are waiting to be written (at most ${this.limits.maxPendingBytes}); retry shortly`);
      }
      const writes = entries.map((entry) => this.enqueue(entry));
      // Started once all are queued: a flush takes what waits when it starts, so they go into one write.
      if (writes.length > 0) this.flushing ??= this.flush().finally(() => (this.flushing = undefined));
      await Promise.all([...new Set(plans.flatMap((plan) => plan.inFlight)), ...writes]);
      return plans.map((plan) => ({ trace: plan.trace, stored: plan.fresh.length, duplicates: plan.request.records.length - plan.fresh.length }));
    } finally {
      for (const { trace } of plans) this.forgetIfEmpty(trace);
    }
  }

  /**
   * Drops a trace that holds nothing (no event stored, none on its way to the disk): an append
   * that stored nothing (no records, or refused) must leave nothing behind, or a client sending
   * such batches under ever new session ids grows the log's memory for good.
   */
  private forgetIfEmpty(trace: Trace): void {
    if (trace.events === 0 && trace.pending.size === 0 && this.traces.get(trace.id) === trace) this.traces.delete(trace.id);
  }

  /**
   * What of a request is new: its records whose key is neither stored, nor in a write under way
   * (that write is waited for), nor earlier in the request or in another of the same append (`seen`).
   */
  private plan(request: AppendRequest, seen: Map<Trace, Set<string>>): AppendPlan {
    const trace = this.traceFor(request, request.rootSessionId, request.partition);
    const plan: AppendPlan = { request, trace, fresh: [], inFlight: [] };
    const keys = seen.get(trace) ?? new Set<string>();
    seen.set(trace, keys);
    for (const record of request.records) {
      const key = eventKey(record);
      if (keys.has(key) || trace.seqs.get(record.source)?.has(record.seq)) continue;
      keys.add(key);
      const pending = trace.pending.get(key);
      if (pending) plan.inFlight.push(pending);
      else plan.fresh.push(record);
    }
    return plan;
  }

  /** Whether an append of about `bytes` would be taken now (callers that build entries lazily ask first). */
  hasRoomFor(bytes: number): boolean {
    return this.unsyncedBytes === 0 || this.unsyncedBytes + bytes <= this.limits.maxPendingBytes;
  }

  /** Refuses the whole append when it would take a trace past maxTraceEvents (stored, in writes under way, and new). */
  private checkTraceSizes(plans: readonly AppendPlan[]): void {
    const added = new Map<Trace, number>();
    for (const { trace, fresh } of plans) added.set(trace, (added.get(trace) ?? 0) + fresh.length);
    const max = this.limits.maxTraceEvents;
    for (const [trace, n] of added) {
      const held = trace.events + trace.pending.size;
      if (n > 0 && held + n > max) throw new TraceFullError(`trace ${trace.id} holds ${held} events and may hold at most ${max}; ${n} more were refused (send further events under a new session_id)`);
    }
  }

  /** The entry line of some of a trace's records, not yet queued. */
  private entryOf(trace: Trace, records: EventRecord[]): Omit<Waiting, 'settle'> {
    const at = new Date().toISOString();
    const entry: EntryJson = { a: trace.agentId, s: trace.sessionId, ...(trace.rootSessionId !== undefined ? { root: trace.rootSessionId } : {}), p: trace.partition, at, records };
    return { bytes: entryLine(JSON.stringify(entry)), trace, keys: records.map(eventKey), records, at };
  }

  /** Queues an entry for the next write (the caller starts the flush); settles once it is durable. */
  private enqueue(entry: Omit<Waiting, 'settle'>): Promise<void> {
    const done = new Promise<void>((resolve, reject) => {
      this.waiting.push({ ...entry, settle: (error) => (error ? reject(error) : resolve()) });
    });
    this.unsyncedBytes += entry.bytes.length;
    for (const key of entry.keys) entry.trace.pending.set(key, done);
    // A failed append is answered through its own promise; this copy only keeps the others' waits quiet.
    done.catch(() => {});
    return done;
  }

  /** Writes what waits, one group at a time, until nothing does; before each, reclaims segments. */
  private async flush(): Promise<void> {
    for (;;) {
      await this.reclaim();
      if (this.waiting.length === 0) return;
      const group = this.waiting.splice(0);
      const bytes = Buffer.concat(group.map((w) => w.bytes));
      const start = this.size;
      try {
        if (this.broken) throw this.broken;
        const handle = this.handle as FileHandle;
        for (let written = 0; written < bytes.length; ) {
          const { bytesWritten } = await handle.write(bytes, written, bytes.length - written, start + written);
          written += bytesWritten;
        }
        await handle.datasync();
        this.size = start + bytes.length;
      } catch (error) {
        this.failGroup(group, start, error as Error);
        continue;
      } finally {
        this.unsyncedBytes -= bytes.length;
      }
      let offset = start;
      for (const w of group) {
        this.stored(w.trace, { segment: this.segment, offset, length: w.bytes.length }, w.records, w.at);
        for (const key of w.keys) w.trace.pending.delete(key);
        offset += w.bytes.length;
      }
      for (const w of group) w.settle();
      for (const trace of new Set(group.map((w) => w.trace))) this.appended.next(trace);
    }
  }

  /** A write that failed: its bytes cut off the segment (so the next entry starts on a clean line), its appends failed. */
  private failGroup(group: Waiting[], start: number, error: Error): void {
    this.log.error(`${this.dir}: writing ${group.length} batch(es) of events failed: ${error.message}`);
    try {
      const fd = openSync(join(this.dir, segmentName(this.segment)), 'r+');
      try {
        ftruncateSync(fd, start);
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
    } catch (cut) {
      this.broken = new Error(`a failed write could not be cut off (${(cut as Error).message})`);
    }
    const failure = new AppendFailedError(`writing the events failed: ${error.message}`);
    for (const w of group) {
      for (const key of w.keys) w.trace.pending.delete(key);
      w.settle(failure);
    }
  }

  /**
   * The stored events of a trace: those let go of (from the dataset, in trace order), then those
   * the log holds, in the order they were acknowledged. Read in slices of READ_SLICE_BYTES with a
   * turn of the event loop between them: a trace of a million events takes a second or more to
   * read, and requests (appends, /healthz) are answered meanwhile.
   */
  async events(trace: Trace): Promise<StoredEvent[]> {
    const entries = [...trace.entries];
    const archived = trace.archived;
    const fds = new Map<number, number>();
    const held: StoredEvent[] = [];
    try {
      // All opened before the first wait: a segment deleted meanwhile (its traces let go of) stays readable.
      for (const at of entries) if (!fds.has(at.segment)) fds.set(at.segment, openSync(join(this.dir, segmentName(at.segment)), 'r'));
      let sinceYield = 0;
      for (const at of entries) {
        const entry = readEntry(fds.get(at.segment) as number, at);
        for (const record of entry.records) held.push({ record, receivedAt: entry.at });
        sinceYield += at.length;
        if (sinceYield >= READ_SLICE_BYTES) {
          sinceYield = 0;
          await setImmediate();
        }
      }
    } finally {
      for (const fd of fds.values()) closeSync(fd);
    }
    return archived === 0 ? held : [...(await this.archivedEvents(trace, archived, held)), ...held];
  }

  /** The `archived` events of a trace the log let go of, from the dataset (without any of `held`, which a projection since may have added). */
  private async archivedEvents(trace: Trace, archived: number, held: readonly StoredEvent[]): Promise<StoredEvent[]> {
    if (!this.archive) throw new UnavailableError(`trace ${trace.id}: its first ${archived} events are in the dataset, and this log was opened without it`);
    const heldKeys = new Set(held.map((e) => eventKey(e.record)));
    const earlier = (await this.archive(trace)).filter((e) => !heldKeys.has(eventKey(e.record)));
    if (earlier.length < archived) {
      throw new UnavailableError(`trace ${trace.id}: the gateway projected ${archived} of its events into its dataset and let go of them, but the dataset holds ${earlier.length} (was it replaced or dropped?)`);
    }
    return earlier;
  }

  /** Waits for the writes under way (every acknowledged append is then durable) and closes; later appends fail. */
  async close(): Promise<void> {
    this.closed = true;
    while (this.flushing) await this.flushing;
    await this.rewritingSettled;
    await this.handle?.close();
    this.handle = undefined;
    await this.settledHandle?.close();
    this.settledHandle = undefined;
    this.appended.complete();
  }
}
