/**
 * The gateway's decoding of stored events (decode.ts) takes a log written before the gateway
 * bounded times: a time past what a date can hold is no time (the received time stands in), not an
 * error that would stop the trace's projection and its storyline for good; nor is one outside the
 * years 0000 to 9999, which would sort wrong among the stored times (text).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { eventRows, storylineOf } from '../serve/gateway/decode.js';
import type { StoredEvent, Trace } from '../serve/gateway/event-log.js';
import type { EventRecord } from '../serve/gateway/events.js';

const trace: Trace = { id: 'a/s', agentId: 'a', sessionId: 's', rootSessionId: undefined, partition: '', events: 2, archived: 0, bytes: 0, firstReceivedAt: undefined, lastReceivedAt: undefined, entries: [], seqs: new Map(), pending: new Map() };
const receivedAt = '2026-11-29T00:00:00.000Z';
const stored = (seq: number, extra: Partial<EventRecord>): StoredEvent => ({ record: { seq, source: 'sdk', kind: 'llm.request', payload: { model: 'm', input: { user_text: `question ${seq}` } }, ...extra } as EventRecord, receivedAt });

test('a time past the year 9999, or before 0000, is no time; one within range is kept', () => {
  // Taken before the gateway bounded times to the years RFC 3339 writes: past the last date, past the year 9999, before 0000 in UTC.
  const events = [stored(1, { timestamp_unix_ms: 8_700_000_000_000_000 }), stored(2, { timestamp_unix_ms: 8_640_000_000_000_000 }), stored(3, { timestamp: '0000-01-01T00:00:00+01:00' }), stored(4, { timestamp_unix_ms: 1_780_000_000_000 })];
  const rows = eventRows(trace, events, 'doc');
  assert.equal(rows.map((r) => r.timestamp), [null, null, null, new Date(1_780_000_000_000).toISOString()]);
  // The storyline spans the events' times: the first's is when it was received.
  const doc = storylineOf(trace, events);
  assert.is(doc.started_at, receivedAt);
  assert.is(doc.finished_at, new Date(1_780_000_000_000).toISOString());
});

test.run();
