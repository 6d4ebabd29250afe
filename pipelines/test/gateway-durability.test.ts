/**
 * What the gateway promises about durability and writers, against a real server process:
 * - `kill -9` right after acknowledged batches (clients sending all the while): after a restart
 *   every acknowledged event is there exactly once, in the live endpoints and, once projected, in
 *   the dataset; the clients' retries of everything (acknowledged or not) store nothing twice;
 * - a damaged `projected.json` (its state of what was projected) stops nothing: serve starts, warns,
 *   and projects again, once, the traces the log holds;
 * - projection holds the dataset's writer lock: while an `import --mode append` holds it,
 *   projection waits (and says so) and then writes; imports and projections running side by side
 *   all succeed and lose nothing.
 */
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServeProcess } from '../../bench/lib/serve-process.js';
import { runTool, toolScript } from '../../lib/testing/run-tool.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { S3TestServer } from '../../bench/lib/s3-server.js';
import { eventually, queryRows, type Json } from './helpers/gateway.js';
import { sandbox } from './helpers/sandbox.js';

const { home, env, run: trajstore, path } = sandbox('gateway-durability-');

const serveArgs = (ds: string, idle: string): string[] => ['serve', '--listen', '127.0.0.1:0', '--gateway', '127.0.0.1:0', '--gateway-dataset', ds, '--gateway-split-idle', idle];
const batchOf = (session: string, first: number, n: number): Json => ({
  agent_id: 'crash',
  session_id: session,
  records: Array.from({ length: n }, (_, i) => ({ seq: first + i, source: 'sdk', kind: 'note', payload: { text: `${session} event ${first + i}` } })),
});
async function postEvents(gatewayUrl: string, body: Json): Promise<number> {
  const response = await fetch(new URL('/v1/events', gatewayUrl), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  await response.arrayBuffer();
  return response.status;
}
async function getJson(base: string, path: string): Promise<Json> {
  const response = await fetch(new URL(path, base));
  return (await response.json()) as Json;
}
test('kill -9 right after acknowledged batches: after a restart every acknowledged event is there exactly once', async () => {
  const ds = path('crash');
  const SESSIONS = 6;
  const BATCH = 16;
  /** Per session: the seqs of acknowledged batches, and every batch sent (to retry). */
  const acknowledged = new Map<string, Set<number>>();
  const sent = new Map<string, Json[]>();
  for (let round = 0; round < 3; round++) {
    const server = await startServeProcess(serveArgs(ds, '1h'), { env, cwd: home });
    let killed = false;
    let acks = 0;
    const killAfter = 20 + round * 15;
    await Promise.all(
      Array.from({ length: SESSIONS }, async (_, c) => {
        const session = `s${c}`;
        const seen = acknowledged.get(session) ?? new Set<number>();
        acknowledged.set(session, seen);
        const batches = sent.get(session) ?? [];
        sent.set(session, batches);
        while (!killed) {
          const body = batchOf(session, batches.length * BATCH, BATCH);
          batches.push(body);
          let status: number;
          try {
            status = await postEvents(server.gatewayUrl as string, body);
          } catch {
            break; // the server is gone
          }
          if (status !== 200) continue;
          for (const r of body.records as Json[]) seen.add(r.seq);
          acks += 1;
          // Killed the moment an acknowledgement arrives, with other batches in their writes.
          if (acks === killAfter && !killed) {
            killed = true;
            server.child.kill('SIGKILL');
          }
        }
      }),
    );
    await new Promise((resolve) => (server.child.exitCode === null && server.child.signalCode === null ? server.child.once('exit', resolve) : resolve(undefined)));
  }
  const server = await startServeProcess(serveArgs(ds, '300ms'), { env, cwd: home });
  try {
    for (const [session, seqs] of acknowledged) {
      const live = await getJson(server.url, `/api/gateway/traces/crash/${session}/events`);
      const stored = (live.events as Json[]).map((e) => e.seq as number);
      assert.is(new Set(stored).size, stored.length, `${session}: no event twice`);
      for (const seq of seqs) assert.ok(stored.includes(seq), `${session}: acknowledged seq ${seq} is there`);
    }
    // The clients retry everything they sent: nothing is stored twice, everything is then there.
    for (const [session, batches] of sent) for (const body of batches) assert.is(await postEvents(server.gatewayUrl as string, body), 200, session);
    let total = 0;
    for (const [session, batches] of sent) {
      const live = await getJson(server.url, `/api/gateway/traces/crash/${session}/events`);
      assert.equal((live.events as Json[]).map((e) => e.seq), Array.from({ length: batches.length * BATCH }, (_, i) => i), session);
      total += batches.length * BATCH;
    }
    // Projected: the events relation holds each once.
    await eventually(async () => {
      const [row] = await queryRows(trajstore, ds, "SELECT count(*) AS n, count(DISTINCT session_id || '/' || source || '/' || seq) AS distinct_events FROM dataset.events");
      assert.equal(row, { n: total, distinct_events: total });
    }, 'projection after the crashes');
  } finally {
    await server.stop();
  }
});

test('a damaged projected.json does not keep serve from starting: it says so naming the file, and the traces it held are projected again, once', async () => {
  const ds = path('damaged-state');
  const first = await startServeProcess(serveArgs(ds, '200ms'), { env, cwd: home });
  try {
    for (const session of ['kept-a', 'kept-b']) assert.is(await postEvents(first.gatewayUrl as string, batchOf(session, 0, 4)), 200);
    await eventually(async () => assert.equal(await queryRows(trajstore, ds, 'SELECT count(*) AS n FROM dataset.events'), [{ n: 8 }]), 'the first projection');
  } finally {
    await first.stop();
  }
  const state = join(ds, 'gateway', 'projected.json');
  const damages = ['{"traces": {"crash/kept-a": 4', '{}', '{"traces": {"crash/kept-a": "four"}}'];
  for (const [round, damaged] of damages.entries()) {
    writeFileSync(state, damaged);
    const again = await startServeProcess(serveArgs(ds, '200ms'), { env, cwd: home });
    try {
      await eventually(async () => {
        assert.ok(again.stderr().includes(`${state}: `), again.stderr());
        assert.match(again.stderr(), /projected again/);
      }, `the warning for ${damaged}`);
      // One more event of a trace each time: a batch runs, and writes the file whole again.
      assert.is(await postEvents(again.gatewayUrl as string, batchOf('kept-b', 4 + round, 1)), 200);
      await eventually(async () => {
        const rows = await queryRows(trajstore, ds, 'SELECT session_id, count(*) AS n, count(DISTINCT seq) AS seqs FROM dataset.events GROUP BY session_id ORDER BY session_id');
        assert.equal(rows.map((r) => [r.session_id, r.n, r.seqs]), [['kept-a', 4, 4], ['kept-b', 5 + round, 5 + round]]);
      }, `projection after ${damaged}`);
    } finally {
      assert.is(await again.stop(), 0);
    }
    assert.type(JSON.parse(readFileSync(state, 'utf8')).traces, 'object');
  }
});

test('projection holds the writer lock: it waits for an import holding it, then writes; side by side nothing is lost', async () => {
  const ds = path('locked');
  const atif = join(SHARED_FIXTURES, 'persisting', 'atif');
  const created = await trajstore(['import', '-f', join(atif, 'dialogue_10.json'), '-t', ds]);
  assert.is(created.code, 0, created.stderr);
  const server = await startServeProcess(serveArgs(ds, '200ms'), { env, cwd: home });
  try {
    // An import that holds the lock until its input ends: it reads stdin, which stays open.
    const importer = spawn(process.execPath, [toolScript('trajstore'), 'import', '-f', '-', '-t', ds, '--mode', 'append', '-i', 'atif'], { env: { ...process.env, ...env }, cwd: home, stdio: ['pipe', 'pipe', 'pipe'] });
    let importErr = '';
    importer.stderr.on('data', (c: Buffer) => (importErr += c.toString()));
    const imported = new Promise<number | null>((resolve) => importer.once('exit', resolve));
    await eventually(async () => assert.match(readdirLock(ds), /owner-/), 'the import holding the lock');
    assert.is(await postEvents(server.gatewayUrl as string, batchOf('waits', 0, 3)), 200);
    await eventually(async () => assert.match(server.stderr(), /waiting for .*import --mode append/), 'projection waiting for the import');
    const before = await getJson(server.url, '/api/gateway/traces/crash/waits');
    assert.is(before.trace.projected_events, 0);
    importer.stdin.end(readFileSync(join(atif, 'sequential_tools_12.json')));
    assert.is(await imported, 0, importErr);
    await eventually(async () => {
      const [row] = await queryRows(trajstore, ds, "SELECT (SELECT count(*) FROM dataset.runs) AS runs, (SELECT count(*) FROM dataset.events WHERE session_id = 'waits') AS events");
      assert.equal(row, { runs: 3, events: 3 });
    }, 'projection after the import');

    // Side by side: imports and projections of several traces, in turns and at once.
    const imports = [];
    for (let i = 0; i < 4; i++) {
      assert.is(await postEvents(server.gatewayUrl as string, batchOf(`side-${i}`, 0, 5)), 200);
      imports.push(trajstore(['import', '-f', join(atif, 'unicode_zh_15.json'), '-t', ds, '--mode', 'append']));
      await new Promise((resolve) => setTimeout(resolve, 150));
    }
    for (const r of await Promise.all(imports)) assert.is(r.code, 0, r.stderr);
    await eventually(async () => {
      const [row] = await queryRows(trajstore, ds, "SELECT (SELECT count(*) FROM dataset.runs WHERE source_format = 'atif') AS imported, (SELECT count(*) FROM dataset.runs WHERE source_format = 'gateway-events') AS traces, (SELECT count(*) FROM dataset.events) AS events");
      assert.equal(row, { imported: 6, traces: 5, events: 23 });
    }, 'every import and every trace');
  } finally {
    await server.stop();
  }
});

test('an object-store dataset: the state is local (--gateway-state), projection publishes to the store', async () => {
  const s3 = await S3TestServer.start();
  try {
    await s3.createBucket('lake');
    const s3env = { ...env, ...s3.env };
    const server = await startServeProcess([...serveArgs('s3://lake/live', '200ms'), '--gateway-state', path('s3-state')], { env: s3env, cwd: home });
    try {
      assert.is(await postEvents(server.gatewayUrl as string, batchOf('remote', 0, 4)), 200);
      await eventually(async () => {
        const r = await runTool('trajstore', ['query', 's3://lake/live', '--sql', "SELECT count(*) AS n FROM dataset.events WHERE session_id = 'remote'", '--format', 'json'], { env: s3env, cwd: home });
        assert.is(r.code, 0, r.stderr);
        assert.equal(JSON.parse(r.stdout), [{ n: 4 }]);
      }, 'projection into the object store');
      const runs = await eventually(async () => {
        const body = await getJson(server.url, '/api/mounts/gateway/runs');
        assert.ok(body.runs?.some((r: Json) => r.session_id === 'remote'), JSON.stringify(body));
        return body;
      }, 'the API');
      assert.ok(runs.snapshot_id);
    } finally {
      await server.stop();
    }
  } finally {
    await s3.stop();
  }
});

/** The names in the dataset's lock directory (empty when it is not held). */
function readdirLock(ds: string): string {
  try {
    return readdirSync(join(ds, '..', '.locked.lock')).join(' ');
  } catch {
    return '';
  }
}

test.run();
