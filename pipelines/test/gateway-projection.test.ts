/**
 * The gateway's projection when batches fail, on a real event log and a real local dataset: the
 * sink of one trace fails every time (as a trace the store or the decoder cannot take would), and
 * another trace's sink fails once (as a store that was briefly away).
 * - a trace that cannot be projected holds back no other one: neither those in its batch nor those
 *   that go idle later;
 * - traces of a failed batch that fail no more are projected on a retry, apart from the bad one;
 * - the status counts the trace still retried, and `pending` includes it.
 */
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Logger, type LogSink } from '../../lib/log.js';
import { scratchDir } from '../../lib/testing/scratch.js';
import type { Row } from '../dataset/parquet.js';
import type { Relation } from '../dataset/relations.js';
import type { DatasetSink } from '../dataset/writer.js';
import { beginWrite } from '../import/import.js';
import { PriceList } from '../pricing/cost.js';
import { EventLog, type Trace } from '../serve/gateway/event-log.js';
import { Projection, projectedStatePath } from '../serve/gateway/projection.js';
import { eventually } from './helpers/gateway.js';

const home = scratchDir('gateway-projection-');
const dataset = join(home, 'ds');
const lines: string[] = [];
const sink: LogSink = { write: (chunk) => lines.push(chunk) };
const log = new Logger('info', sink);

/** Source paths (`<agent>/<session>`) whose `runs` rows make the append fail: `always`, or the number of times left. */
const failing = new Map<string, number | 'always'>();
/** Every append fails, as when the store is away. */
let storeDown = false;

/** The real writer, failing for the source paths in `failing` as a store or decoder fault would. */
async function beginAppend(signal: AbortSignal): Promise<DatasetSink> {
  if (storeDown) throw new Error('the store is away');
  const writer = await beginWrite(undefined, { path: dataset, mode: 'append', kind: 'storyline', purpose: 'projection test', signal, log });
  return {
    existingDocumentIds: () => writer.existingDocumentIds(),
    retireSources: (paths) => writer.retireSources(paths),
    add: async (relation: Relation, rows: readonly Row[]) => {
      for (const row of relation === 'runs' ? rows : []) {
        const path = String(row['source_path']);
        const left = failing.get(path);
        if (left === 'always' || (typeof left === 'number' && left > 0)) {
          if (typeof left === 'number') failing.set(path, left - 1);
          throw new Error(`the store refused ${path}`);
        }
      }
      await writer.add(relation, rows);
    },
    commit: () => writer.commit(),
    abort: () => writer.abort(),
  };
}

async function createDataset(): Promise<void> {
  const writer = await beginWrite(undefined, { path: dataset, mode: 'create', kind: 'storyline', purpose: 'projection test', log });
  await writer.commit();
}

const note = (seq: number, text: string) => ({ seq, source: 'sdk', kind: 'note', payload: { text } });

/** An event log in `<home>/<state>` and its projection into the dataset through `beginAppend`, retrying after `firstMs`..`maxMs`. */
async function gatewayState(state: string, firstMs: number, maxMs: number): Promise<{ events: EventLog; projection: Projection }> {
  const events = await EventLog.open(join(home, state, 'events'), log);
  const projection = new Projection(events, { idleMs: 50, statePath: projectedStatePath(join(home, state)), beginAppend, prices: new PriceList({}), log, retryFirstMs: firstMs, retryMaxMs: maxMs });
  return { events, projection };
}

test('a trace that cannot be projected holds back no other trace, in its batch or after it', async () => {
  await createDataset();
  const { events, projection } = await gatewayState('state', 100, 400);
  failing.set('a/poison', 'always');
  failing.set('a/flaky', 1);
  const append = (session: string) => events.append({ agentId: 'a', sessionId: session, partition: () => '', records: [note(0, `${session} says hello`), note(1, `${session} again`)] });
  // Four traces idle together: one batch, which the poisoned trace fails.
  const first = await Promise.all(['poison', 'b1', 'b2', 'flaky'].map((s) => append(s).then((r) => r.trace)));
  projection.start();
  try {
    const projectedAll = (traces: Trace[]) => () => {
      const missing = traces.filter((t) => projection.projectedEvents(t) !== t.events).map((t) => t.id);
      if (missing.length) throw new Error(`not projected: ${missing.join(', ')}`);
      return Promise.resolve();
    };
    await eventually(projectedAll(first.filter((t) => t.sessionId !== 'poison')), 'the poisoned trace\'s batch-mates', 20_000);
    // A trace that goes idle later still gets its own batch, while the poisoned one keeps failing.
    const later = (await append('later')).trace;
    await eventually(projectedAll([later]), 'a trace idle after the failure', 20_000);
    const poison = first.find((t) => t.sessionId === 'poison')!;
    assert.is(projection.projectedEvents(poison), 0, 'the poisoned trace is not in the dataset');
    const status = projection.status;
    assert.is(status.retrying, 1, JSON.stringify(status));
    assert.is(status.pending, 1, JSON.stringify(status));
    assert.ok(status.failures >= 2, JSON.stringify(status));
    assert.match(String(status.last_error), 'the store refused a/poison');
    assert.ok(lines.some((l) => /warn: gateway: projecting \d+ trace\(s\) failed; retrying them in/.test(l)), lines.join(''));

    // Once the fault is gone, the trace is projected on its next retry.
    failing.delete('a/poison');
    await eventually(projectedAll([poison]), 'the trace once its fault is gone', 20_000);
    assert.is(projection.status.retrying, 0);
    assert.is(projection.status.pending, 0);
  } finally {
    await projection.close();
    await events.close();
  }
});

test('after the store was away, the traces it failed are projected in one batch, not one each', async () => {
  const { events, projection } = await gatewayState('state-2', 50, 200);
  storeDown = true;
  const traces = await Promise.all(['s1', 's2', 's3', 's4', 's5', 's6'].map((session) => events.append({ agentId: 'down', sessionId: session, partition: () => '', records: [note(0, session)] }).then((r) => r.trace)));
  projection.start();
  try {
    // Failed batches after failed batches: their groups are split down to single traces meanwhile.
    await eventually(async () => {
      if (projection.status.failures < 8) throw new Error(`${projection.status.failures} failures`);
    }, 'the batches to fail while the store is away', 20_000);
    const before = projection.status.batches;
    storeDown = false;
    await eventually(async () => {
      const missing = traces.filter((t) => projection.projectedEvents(t) !== t.events);
      if (missing.length) throw new Error(`not projected: ${missing.map((t) => t.id).join(', ')}`);
    }, 'the traces once the store is back', 20_000);
    assert.ok(projection.status.batches - before <= 3, `${projection.status.batches - before} batches after the store came back`);
    assert.is(projection.status.retrying, 0);
  } finally {
    await projection.close();
    await events.close();
  }
});

test.run();
