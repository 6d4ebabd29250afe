/**
 * Cancelling a statement by its ticket (search/sql/watchdog.ts, watchdog.c): `serve`'s event loop
 * stops the statement its SQL thread runs when the request's client goes away. A cancel reaches
 * the statement of its ticket from any thread of the process, and no other: not one that starts
 * after the cancelled one ended.
 */
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { DIST_ROOT } from '../../lib/testing/run-tool.js';
import { scratchDir } from '../../lib/testing/scratch.js';
import { QUERY_DEFAULTS } from '../search/limits.js';
import { runReadOnlySql, SqlCancelledError, type SqlOutcome } from '../search/sql/runner.js';
import { cancelSql, nextSqlTicket } from '../search/sql/watchdog.js';

const index = join(scratchDir('sql-cancel-'), 'index.sqlite');
new Database(index).exec('CREATE TABLE t (x)').close();

/** Runs until it is stopped. */
const ENDLESS = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c';
/** Runs for a few hundred milliseconds, then answers. */
const FINITE = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000) SELECT count(*) FROM c';

function run(sql: string, ticket: number, timeoutMs = 20_000): { outcome?: SqlOutcome; rows: unknown[][]; error?: unknown; ms: number } {
  const rows: unknown[][] = [];
  const started = Date.now();
  try {
    const outcome = runReadOnlySql({
      mounts: [{ name: 'dataset', path: index }],
      sql,
      params: [],
      maxRows: 10,
      maxBytes: 1024,
      maxMemoryBytes: QUERY_DEFAULTS.maxMemoryBytes,
      timeoutMs,
      ticket,
      onRow: (row) => rows.push(row),
    });
    return { outcome, rows, ms: Date.now() - started };
  } catch (error) {
    return { error, rows, ms: Date.now() - started };
  }
}

/** Cancels `ticket` from a thread of its own after `delayMs`: this thread is busy running the statement then. */
function cancelFromAnotherThread(ticket: number, delayMs: number): Worker {
  const watchdog = pathToFileURL(join(DIST_ROOT, 'pipelines', 'search', 'sql', 'watchdog.js')).href;
  return new Worker(`import(${JSON.stringify(watchdog)}).then((m) => setTimeout(() => m.cancelSql(${ticket}), ${delayMs}));`, { eval: true });
}

test('tickets are distinct', () => {
  const tickets = [nextSqlTicket(), nextSqlTicket(), nextSqlTicket()];
  assert.is(new Set(tickets).size, 3);
  assert.ok(tickets.every((t) => Number.isSafeInteger(t) && t > 0));
});

test('a cancel from another thread stops the running statement of its ticket at once', async () => {
  const ticket = nextSqlTicket();
  const canceller = cancelFromAnotherThread(ticket, 700);
  const r = run(ENDLESS, ticket);
  await canceller.terminate();
  assert.instance(r.error, SqlCancelledError);
  assert.ok(r.ms >= 600 && r.ms < 3000, `stopped after ${r.ms} ms`);
});

test('a cancel given before its statement starts stops it as soon as it starts', () => {
  const ticket = nextSqlTicket();
  cancelSql(ticket);
  const r = run(ENDLESS, ticket);
  assert.instance(r.error, SqlCancelledError);
  assert.ok(r.ms < 1000, `stopped after ${r.ms} ms`);
});

test('a cancel that comes after its statement ended does not reach the next statement', () => {
  const first = nextSqlTicket();
  const done = run('SELECT 1', first);
  assert.equal(done.rows, [[1n]]);
  cancelSql(first);
  const second = nextSqlTicket();
  const next = run(FINITE, second);
  assert.is(next.error, undefined, String(next.error));
  assert.equal(next.rows, [[3000000n]]);
  // A statement without a ticket (the command line's) cannot be cancelled at all.
  cancelSql(0);
  assert.equal(run(FINITE, 0).rows, [[3000000n]]);
});

test('a statement stopped by its timeout or cancelled leaves the next one of the thread alone', () => {
  const timedOut = run(ENDLESS, nextSqlTicket(), 200);
  assert.is((timedOut.error as Error | undefined)?.constructor.name, 'SqlTimeoutError');
  const ticket = nextSqlTicket();
  cancelSql(ticket);
  assert.instance(run(ENDLESS, ticket).error, SqlCancelledError);
  assert.equal(run('SELECT 2', nextSqlTicket()).rows, [[2n]]);
});

test.run();
