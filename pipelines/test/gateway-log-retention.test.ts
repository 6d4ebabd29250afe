/**
 * What the gateway's event log keeps of an append, on a real log: the trace it makes knows its
 * summary, its entries' places and its event keys, and nothing of the request that made it. A
 * resident gateway makes a trace per session for days, so a request held by its trace (its records
 * and their payloads, kilobytes each) is memory that grows with every trace ever seen. An append
 * that stores nothing keeps no trace at all.
 */
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Logger } from '../../lib/log.js';
import { scratchDir } from '../../lib/testing/scratch.js';
import { EventLog, TraceFullError } from '../serve/gateway/event-log.js';

setFlagsFromString('--expose-gc');
/** A full collection (a new context gets `gc` once the flag is set). */
const collect = runInNewContext('gc') as () => void;

const home = scratchDir('gateway-log-retention-');
const log = new Logger('error', { write: () => {} });

/** Appends ten records of a new trace; returns a weak reference to them, the only one outside the log. */
async function appendHeldOnlyByTheLog(events: EventLog): Promise<WeakRef<object>> {
  const records = Array.from({ length: 10 }, (_, seq) => ({ seq, source: 'sdk', kind: 'note', payload: { text: 'x'.repeat(1000) } }));
  await events.append({ agentId: 'a', sessionId: 's', partition: () => '', records });
  return new WeakRef(records);
}

test('a new trace does not hold the records of the append that made it', async () => {
  const events = await EventLog.open(join(home, 'events'), log);
  try {
    const held = await appendHeldOnlyByTheLog(events);
    // A turn of the event loop: nothing of the append is on a stack any more.
    await new Promise((resolve) => setTimeout(resolve, 10));
    collect();
    const trace = events.get({ agentId: 'a', sessionId: 's' });
    assert.is(trace?.events, 10);
    assert.is(held.deref(), undefined, 'the records of the first append are still reachable after it returned');
    assert.not.ok(trace && 'records' in trace, 'the trace has a `records` field');
  } finally {
    await events.close();
  }
});

test('an append that stores nothing (no records, or refused) leaves no trace behind: the next one places it anew', async () => {
  const events = await EventLog.open(join(home, 'nothing'), log, { maxTraceEvents: 2 });
  try {
    const record = (seq: number) => ({ seq, source: 'sdk', kind: 'note', payload: {} });
    // A client sending empty batches under new session ids: each made a trace that was kept for good.
    const empty = new WeakRef((await events.append({ agentId: 'a', sessionId: 'empty', partition: () => 'first', records: [] })).trace);
    await new Promise((resolve) => setTimeout(resolve, 10));
    collect();
    assert.is(empty.deref(), undefined, 'the trace of an append of no records is still reachable');
    const refused = await events.append({ agentId: 'a', sessionId: 'refused', partition: () => 'first', records: [record(1), record(2), record(3)] }).catch((error: Error) => error);
    assert.instance(refused, TraceFullError);
    for (const sessionId of ['empty', 'refused']) {
      const { trace } = await events.append({ agentId: 'a', sessionId, partition: () => 'second', records: [record(1)] });
      assert.equal([trace.partition, trace.events], ['second', 1], sessionId);
    }
  } finally {
    await events.close();
  }
});

test.run();
