/**
 * The canonical trajectory events of `POST /v1/events` (reference/trajectory-formats.md §5.2): the
 * gateway body `{agent_id, session_id, root_session_id?, records}` and its `EventRecord`s, as
 * TypeBox schemas (the types and the validator), and the checks a schema cannot say, each with the
 * error code the gateway answers (`invalid_identity`, `invalid_event`, `too_many_records`).
 *
 * Unknown keys are refused in the body and in each record. Identity values (`agent_id`,
 * `session_id`, `root_session_id`) are one path-safe segment: a trace is stored under them.
 * A record may repeat the body's `agent_id` or `session_id` but not contradict it.
 */
import type { BodyLimits } from '../../../lib/bounded-body.js';
import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { isRfc3339 } from '../../../lib/rfc3339.js';
import { GatewayFailure } from './failure.js';
import { pathSegmentProblem } from './identity.js';

/** At most this many records per request... */
export const MAX_RECORDS = 256;
/** ...and this many bytes of body. */
export const MAX_BODY_BYTES = 8 * 1024 * 1024;
/** Request bodies: up to MAX_BODY_BYTES; a larger one is read and dropped up to 8 times that, so its sender gets the 413. */
export const BODY_LIMITS: BodyLimits = { maxBytes: MAX_BODY_BYTES, drainBytes: 8 * MAX_BODY_BYTES };

/** `seq` is an integer JSON number; beyond 2^53 JavaScript (and most JSON readers) cannot hold it exactly. */
const Seq = Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER });
const OptionalText = Type.Optional(Type.String());
/**
 * The times a record may give: in UTC, the years 0000 to 9999, which RFC 3339 writes. Stored times
 * are UTC text, sorted and filtered as text: a later or earlier one would be `+010000-...` or
 * `-000001-...`, and sort before `2026-...`.
 */
const FIRST_TIME_MS = -62_167_219_200_000; // 0000-01-01T00:00:00.000Z
const LAST_TIME_MS = 253_402_300_799_999; // 9999-12-31T23:59:59.999Z
/** Whether a time (milliseconds since the epoch) is one a record may give. */
export const isStorableTime = (ms: number): boolean => ms >= FIRST_TIME_MS && ms <= LAST_TIME_MS;
/** Milliseconds since the epoch (before the epoch is not a time an event has), to the year 9999. */
const UnixMs = Type.Integer({ minimum: 0, maximum: LAST_TIME_MS });

export const EventRecord = Type.Object(
  {
    event_id: OptionalText,
    run_id: OptionalText,
    attempt_id: OptionalText,
    storyline_id: OptionalText,
    turn_id: OptionalText,
    timestamp_unix_ms: Type.Optional(UnixMs),
    producer: OptionalText,
    seq: Seq,
    source: Type.String({ minLength: 1 }),
    kind: Type.String({ minLength: 1 }),
    timestamp: OptionalText,
    session_id: OptionalText,
    agent_id: OptionalText,
    parent_uuid: OptionalText,
    trace_id: OptionalText,
    call_id: OptionalText,
    subagent_id: OptionalText,
    parent_agent_id: OptionalText,
    branch: OptionalText,
    parent_call_id: OptionalText,
    payload: Type.Unknown(),
  },
  { additionalProperties: false },
);
export type EventRecord = Static<typeof EventRecord>;

export const GatewayBody = Type.Object(
  {
    agent_id: Type.String(),
    session_id: Type.String(),
    root_session_id: Type.Optional(Type.String()),
    records: Type.Array(Type.Unknown()),
  },
  { additionalProperties: false },
);
export type GatewayBody = Omit<Static<typeof GatewayBody>, 'records'> & { records: EventRecord[] };

/** The 200 answer of `POST /v1/events`. */
export const AppendAnswer = Type.Object({
  storage: Type.String({ description: 'the trace: `[<partition>/]<agent_id>/<session_id>` (source_path of its run)' }),
  agent_id: Type.String(),
  session_id: Type.String(),
  accepted_records: Type.Integer({ description: 'records of the request that are now stored (new ones and ones stored before)' }),
  dataset: Type.String(),
  status: Type.Literal('ok'),
  note: Type.String(),
});
export type AppendAnswer = Static<typeof AppendAnswer>;

/** The body of every error answer of the gateway listener. */
export const GatewayError = Type.Object({ error: Type.String(), message: Type.String() });
export type GatewayError = Static<typeof GatewayError>;

export type GatewayErrorCode = 'invalid_identity' | 'invalid_event' | 'too_many_records' | 'too_many_spans';

/** A request the gateway refuses: the status and code of its answer (event-log.ts GatewayFailure). */
export class RejectedBatch extends GatewayFailure {
  constructor(status: 400 | 413, code: GatewayErrorCode, message: string) {
    super(status, code, message);
  }
}

export function checkIdentity(field: string, value: string): void {
  const problem = pathSegmentProblem(value);
  if (problem !== undefined) throw new RejectedBatch(400, 'invalid_identity', `${field} ${JSON.stringify(value.slice(0, 80))} is not one path-safe segment: ${problem}`);
}

const bodyCheck = TypeCompiler.Compile(GatewayBody);
const recordCheck = TypeCompiler.Compile(EventRecord);

/** The first schema error of `value` as `<pointer>: <message>`. */
function firstError(check: typeof recordCheck | typeof bodyCheck, value: unknown, base: string): string {
  const error = check.Errors(value).First();
  if (!error) return `${base || '/'}: invalid`;
  // An unknown key is reported at the object; name the key.
  const unknown = error.message.includes('additional') ? Object.keys(value as object).find((key) => !Object.hasOwn(check.Schema().properties as object, key)) : undefined;
  if (unknown !== undefined) return `${base}/${unknown}: unknown key`;
  return `${base}${error.path || ''}: ${error.message}`;
}

/**
 * Checks a parsed request body; returns it typed, or throws RejectedBatch. The order of the checks
 * decides which code a body with several faults gets: its shape, the identity, the record count, then each record.
 */
export function checkBody(body: unknown): GatewayBody {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new RejectedBatch(400, 'invalid_event', 'the body must be a JSON object {agent_id, session_id, root_session_id?, records}');
  const b = body as Record<string, unknown>;
  for (const field of ['agent_id', 'session_id'] as const) {
    if (typeof b[field] !== 'string') throw new RejectedBatch(400, 'invalid_identity', `${field} is required and must be a string`);
  }
  if (b.root_session_id !== undefined && typeof b.root_session_id !== 'string') throw new RejectedBatch(400, 'invalid_identity', 'root_session_id must be a string');
  if (!bodyCheck.Check(body)) throw new RejectedBatch(400, 'invalid_event', firstError(bodyCheck, body, ''));
  const valid = body as Static<typeof GatewayBody>;
  checkIdentity('agent_id', valid.agent_id);
  checkIdentity('session_id', valid.session_id);
  if (valid.root_session_id !== undefined) checkIdentity('root_session_id', valid.root_session_id);
  if (valid.records.length > MAX_RECORDS) throw new RejectedBatch(413, 'too_many_records', `${valid.records.length} records; one request may hold at most ${MAX_RECORDS}`);
  valid.records.forEach((record, i) => {
    if (!recordCheck.Check(record)) throw new RejectedBatch(400, 'invalid_event', firstError(recordCheck, record, `/records/${i}`));
    const r = record as EventRecord;
    if (r.source.trim() === '') throw new RejectedBatch(400, 'invalid_event', `/records/${i}/source: must not be blank`);
    if (r.kind.trim() === '') throw new RejectedBatch(400, 'invalid_event', `/records/${i}/kind: must not be blank`);
    // Stored times are sorted and filtered (`since`, `until`) as text: only one shape of time may be stored.
    if (r.timestamp !== undefined && !isRfc3339(r.timestamp)) {
      throw new RejectedBatch(400, 'invalid_event', `/records/${i}/timestamp: ${JSON.stringify(r.timestamp.slice(0, 80))} is not an RFC 3339 date and time with a zone (e.g. 2026-05-02T08:00:03.100Z)`);
    }
    if (r.timestamp !== undefined && !isStorableTime(Date.parse(r.timestamp))) {
      throw new RejectedBatch(400, 'invalid_event', `/records/${i}/timestamp: ${JSON.stringify(r.timestamp)} is, in UTC, outside the years 0000 to 9999`);
    }
    for (const field of ['agent_id', 'session_id'] as const) {
      if (r[field] !== undefined && r[field] !== valid[field]) {
        throw new RejectedBatch(400, 'invalid_identity', `/records/${i}/${field}: ${JSON.stringify(r[field])} contradicts the body's ${field} ${JSON.stringify(valid[field])}`);
      }
    }
  });
  return valid as GatewayBody;
}

/** The identity of an event within its trace: a retried record with the same source and seq is stored once. */
export const eventKey = (record: Pick<EventRecord, 'source' | 'seq'>): string => `${record.source}\u0000${record.seq}`;
