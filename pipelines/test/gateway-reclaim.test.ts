/**
 * A resident gateway keeps what it must and no more, against a real server process: once a trace is
 * projected and idle, its events are in the dataset, so the log lets go of them:
 * - its in-memory entries are dropped and its log segments reclaimed (the state directory shrinks);
 * - the live endpoints still answer for it, from the dataset, and a retry of what it stored is
 *   still a duplicate;
 * - a late event projects it again whole (its earlier events read back from the dataset), once;
 * - a restart replays only what is not projected, and still knows every trace, its counts and its
 *   stored events.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServeProcess, type ServeProcess } from '../../bench/lib/serve-process.js';
import { eventually, queryRows, type Json } from './helpers/gateway.js';
import { sandbox } from './helpers/sandbox.js';

const { home, env, run: trajstore, path } = sandbox('gateway-reclaim-');
const ds = path('reclaim');
const serveArgs = ['serve', '--listen', '127.0.0.1:0', '--gateway', '127.0.0.1:0', '--gateway-dataset', ds, '--gateway-split-idle', '300ms'];
const TRACES = ['t0', 't1', 't2'];
const BATCHES = 5;
const BATCH = 20;

const batchOf = (session: string, first: number, n: number): Json => ({
  agent_id: 'keeper',
  session_id: session,
  records: Array.from({ length: n }, (_, i) => ({ seq: first + i, source: 'sdk', kind: 'note', payload: { text: `${session} event ${first + i}` } })),
});
async function post(server: ServeProcess, body: Json): Promise<Json> {
  const response = await fetch(new URL('/v1/events', server.gatewayUrl), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  assert.is(response.status, 200);
  return (await response.json()) as Json;
}
async function getJson(server: ServeProcess, path: string): Promise<Json> {
  const response = await fetch(new URL(path, server.url));
  assert.is(response.status, 200, path);
  return (await response.json()) as Json;
}
/** Bytes of the log's segment files. */
function segmentBytes(): number {
  const dir = join(ds, 'gateway', 'events');
  return readdirSync(dir)
    .filter((name) => name.startsWith('segment-'))
    .reduce((sum, name) => sum + statSync(join(dir, name)).size, 0);
}
async function allProjected(server: ServeProcess, events: Record<string, number>): Promise<void> {
  await eventually(async () => {
    for (const [session, n] of Object.entries(events)) {
      const trace = (await getJson(server, `/api/gateway/traces/keeper/${session}`)).trace;
      assert.equal([trace.events, trace.projected_events], [n, n], session);
    }
  }, 'projection of every trace');
}
async function liveSeqs(server: ServeProcess, session: string): Promise<number[]> {
  return ((await getJson(server, `/api/gateway/traces/keeper/${session}/events?limit=10000`)).events as Json[]).map((e) => e.seq as number);
}
const upTo = (n: number): number[] => Array.from({ length: n }, (_, i) => i);

test('projected idle traces leave the log and its memory; live reads, retries, late events and restarts still hold', async () => {
  let server = await startServeProcess(serveArgs, { env, cwd: home });
  try {
    for (let b = 0; b < BATCHES; b++) for (const session of TRACES) await post(server, batchOf(session, b * BATCH, BATCH));
    assert.ok(segmentBytes() > 0, 'the events are in the log');
    await allProjected(server, { t0: 100, t1: 100, t2: 100 });
    // Projected and idle: nothing of them is held in memory or in segments.
    await eventually(async () => {
      assert.equal((await getJson(server, '/api/gateway')).log.entries, 0);
      assert.is(segmentBytes(), 0, 'the segments are reclaimed');
    }, 'the log to let go of projected traces');
    // The live endpoints read them from the dataset.
    assert.equal(await liveSeqs(server, 't1'), upTo(100));
    const doc = await getJson(server, '/api/gateway/traces/keeper/t1/storyline');
    assert.is(doc.session, 't1');
    // A retry is still known.
    assert.match((await post(server, batchOf('t0', 40, BATCH))).note, /20 record\(s\) were stored before/);
    assert.equal(await liveSeqs(server, 't0'), upTo(100));

    // A late event: the trace is projected again, whole, and then let go of again.
    await post(server, batchOf('t0', 100, 1));
    assert.equal(await liveSeqs(server, 't0'), upTo(101), 'the dataset\'s events and the log\'s together');
    await allProjected(server, { t0: 101 });
    const [row] = await queryRows(trajstore, ds, "SELECT count(*) AS events, count(DISTINCT seq) AS seqs, (SELECT count(*) FROM dataset.runs WHERE session_id = 't0') AS runs FROM dataset.events WHERE session_id = 't0'");
    assert.equal(row, { events: 101, seqs: 101, runs: 1 });
    await eventually(async () => {
      assert.equal((await getJson(server, '/api/gateway')).log.entries, 0);
      assert.is(segmentBytes(), 0);
    }, 'the log to let go of the trace again');
    // An unprojected trace stays in the log across the restart.
    await post(server, batchOf('fresh', 0, 3));
  } finally {
    await server.stop();
  }

  server = await startServeProcess(serveArgs, { env, cwd: home });
  try {
    // Only the unprojected trace was replayed: one entry.
    assert.equal((await getJson(server, '/api/gateway')).log.entries, 1);
    const listed = (await getJson(server, '/api/gateway/traces')).traces as Json[];
    assert.equal(listed.map((t) => `${t.session_id}:${t.events}`).sort(), ['fresh:3', 't0:101', 't1:100', 't2:100']);
    assert.equal(await liveSeqs(server, 't2'), upTo(100));
    assert.match((await post(server, batchOf('t2', 0, BATCH))).note, /20 record\(s\) were stored before/);
    await allProjected(server, { fresh: 3, t0: 101, t1: 100, t2: 100 });
    await eventually(async () => assert.is(segmentBytes(), 0), 'the last trace reclaimed');
    const [row] = await queryRows(trajstore, ds, 'SELECT count(*) AS n FROM dataset.events');
    assert.equal(row, { n: 304 });
    // The projection's state file names no trace let go of before the last batch: settled.log stands for them.
    const projected = JSON.parse(readFileSync(join(ds, 'gateway', 'projected.json'), 'utf8')) as { traces: Record<string, number> };
    assert.equal(Object.keys(projected.traces), ['keeper/fresh']);
  } finally {
    await server.stop();
  }
});

test.run();
