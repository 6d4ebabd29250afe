/**
 * The gateway's decoding of stored events (decode.ts) takes a log written before the gateway
 * bounded `timestamp_unix_ms`: a time past what a date can hold is no time (the received time
 * stands in), not an error that would stop the trace's projection and its storyline for good.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { eventRows, storylineOf } from '../serve/gateway/decode.js';
import type { StoredEvent, Trace } from '../serve/gateway/event-log.js';
import type { EventRecord } from '../serve/gateway/events.js';

const trace: Trace = { id: 'a/s', agentId: 'a', sessionId: 's', rootSessionId: undefined, partition: '', events: 2, archived: 0, bytes: 0, firstReceivedAt: undefined, lastReceivedAt: undefined, entries: [], seqs: new Map(), pending: new Map() };
const receivedAt = '2026-11-29T00:00:00.000Z';
const stored = (seq: number, extra: Partial<EventRecord>): StoredEvent => ({ record: { seq, source: 'sdk', kind: 'llm.request', payload: { model: 'm', input: { user_text: `question ${seq}` } }, ...extra } as EventRecord, receivedAt });

test('a timestamp_unix_ms past the last date is no time; one within range is kept', () => {
  const events = [stored(1, { timestamp_unix_ms: 8_700_000_000_000_000 }), stored(2, { timestamp_unix_ms: 1_780_000_000_000 })];
  const rows = eventRows(trace, events, 'doc');
  assert.equal(rows.map((r) => r.timestamp), [null, new Date(1_780_000_000_000).toISOString()]);
  // The storyline spans the events' times: the first's is when it was received.
  const doc = storylineOf(trace, events);
  assert.is(doc.started_at, receivedAt);
  assert.is(doc.finished_at, new Date(1_780_000_000_000).toISOString());
});

test.run();
