/**
 * `trajstore serve` as a user runs it: a real server process, a real HTTP client. Over a dataset
 * imported with `trajstore import` (a Claude Code session with its subagent, and the ATIF fixtures),
 * each route's answers are checked against what the command line says of the same dataset
 * (`query`, `find`, `stats`), and each route's errors by status and shape. Also: listeners are
 * loopback only (refused before any dataset is opened), the dataset is never written, new
 * snapshots are served without a restart, the control listener, and request tracing by --log-level.
 */
import { cpSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startServeProcess, type ServeProcess } from '../../bench/lib/serve-process.js';
import { toHttpError } from '../serve/errors.js';
import { writeBigRun } from './helpers/big-run.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { requestWithHost } from '../../lib/testing/host-header.js';
import { sandbox } from './helpers/sandbox.js';

const { home, env, run: trajstore } = sandbox('serve-api-');
const dataset = join(home, 'ds');
const PARENT = 'a9a20bd4-fdf9-4885-8fa1-01d41970c171';
const CHILD = `${PARENT}.agent-a4c1e9f27b3d5e601`;
let server: ServeProcess;

type Json = Record<string, any>;
async function get(path: string, base = server.url): Promise<{ status: number; body: Json }> {
  const response = await fetch(new URL(path, base));
  return { status: response.status, body: (await response.json()) as Json };
}
async function post(path: string, body: unknown, base = server.url): Promise<{ status: number; body: Json }> {
  const response = await fetch(new URL(path, base), { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });
  return { status: response.status, body: (await response.json()) as Json };
}
/** The error shape every failure has. */
function assertError(r: { status: number; body: Json }, status: number, code: string, message?: RegExp): void {
  assert.is(r.status, status, JSON.stringify(r.body));
  assert.equal(Object.keys(r.body), ['error']);
  assert.is(r.body.error.status, status);
  assert.is(r.body.error.code, code);
  assert.type(r.body.error.message, 'string');
  if (message) assert.match(r.body.error.message, message);
}
/** Rows of a `trajstore query` over the dataset, as objects. */
async function cliQuery(sql: string): Promise<Json[]> {
  const r = await trajstore(['query', dataset, '--sql', sql, '--format', 'json']);
  assert.is(r.code, 0, r.stderr);
  return JSON.parse(r.stdout) as Json[];
}
/** Every file of the dataset with its size and modification time. */
function snapshotOfFiles(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => {
      const path = join(e.parentPath, e.name);
      const s = statSync(path);
      return `${path} ${s.size} ${s.mtimeMs}`;
    })
    .sort();
}

test.before(async () => {
  const cc = await trajstore(['import', '-f', join(SHARED_FIXTURES, 'synthetic', 'claude-code', 'projects', '-home-dev-www-atlas-docs'), '-t', dataset, '-i', 'agentb-code']);
  assert.is(cc.code, 0, cc.stderr);
  const atif = await trajstore(['import', '-f', join(SHARED_FIXTURES, 'persisting', 'atif'), '-t', dataset, '--mode', 'append']);
  assert.is(atif.code, 0, atif.stderr);
  // A stale index: the server must rebuild it elsewhere, not in the dataset.
  rmSync(join(dataset, 'index.sqlite'));
  server = await startServeProcess(['--log-level', 'info', 'serve', dataset, '--listen', '127.0.0.1:0', '--control', '127.0.0.1:0'], { env, cwd: home });
});

test.after(async () => {
  await server?.stop();
});

test('listeners must be loopback: anything else exits 2 before a dataset is opened', async () => {
  const missing = join(home, 'no-such-dataset');
  for (const args of [
    ['--listen', '0.0.0.0:0'],
    ['--listen', '192.168.1.10:8080'],
    ['--listen', '[::]:0'],
    ['--listen', 'example.com:80'],
    ['--listen', '127.0.0.1:0', '--control', '0.0.0.0:0'],
    ['--listen', '127.0.0.1:0', '--control', '10.0.0.1:9000'],
    ['--listen', '127.0.0.1:99999'],
  ]) {
    const r = await trajstore(['serve', missing, ...args]);
    assert.is(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /--(listen|control)/);
  }
  // The same missing dataset on a loopback address gets as far as opening it: not found.
  const loopback = await trajstore(['serve', missing, '--listen', '127.0.0.1:0']);
  assert.is(loopback.code, 3, loopback.stderr);
});

test('a request for another host name is refused (DNS rebinding): 403 on the API and the control listener', async () => {
  for (const base of [server.url, server.controlUrl!]) {
    for (const host of ['attacker.example', 'attacker.example:80', `localhost.attacker.example:${new URL(base).port}`]) {
      assertError(await requestWithHost(new URL('/api/mounts', base).href, host), 403, 'forbidden', /not a loopback name/);
    }
    for (const host of [`127.0.0.1:${new URL(base).port}`, `localhost:${new URL(base).port}`]) {
      assert.is.not((await requestWithHost(new URL('/api/mounts', base).href, host)).status, 403, host);
    }
  }
  // The web interface too: a rebound page must not even load.
  assertError(await requestWithHost(server.url, 'attacker.example'), 403, 'forbidden');
});

test('every API answer, errors too, is never a page: nosniff, and a policy that runs nothing and allows no framing', async () => {
  // A 404 quotes the path it was asked for: opened as a page, it must not run what the path holds.
  for (const path of ['/api/mounts', '/api/mounts/default/runs?limit=1', `/api/mounts/default/runs/${encodeURIComponent('<img src=x onerror=alert(1)>')}`, '/<svg onload=alert(1)>']) {
    for (const base of [server.url, server.controlUrl!]) {
      const response = await fetch(new URL(path, base));
      assert.is(response.headers.get('x-content-type-options'), 'nosniff', path);
      assert.is(response.headers.get('content-security-policy'), "default-src 'none'; frame-ancestors 'none'", path);
      assert.match(response.headers.get('content-type') ?? '', /^application\/json/, path);
    }
  }
  // The page keeps its own policy, which lets it run its script.
  assert.match((await fetch(server.url)).headers.get('content-security-policy') ?? '', "default-src 'self'");
});

test('a POST from another site\'s page is refused (CSRF): 403 on the API and the control listener; the page\'s own and a command-line client\'s go through', async () => {
  // A page may send a body-less POST anywhere without asking (no preflight); the browser says whose page it is.
  const reload = (headers: Record<string, string>) => fetch(new URL('/control/reload', server.controlUrl), { method: 'POST', headers });
  const query = (headers: Record<string, string>) => fetch(new URL('/api/mounts/default/query', server.url), { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ sql: 'SELECT 1' }) });
  for (const headers of [{ origin: 'http://attacker.example' }, { origin: 'null' }, { 'sec-fetch-site': 'cross-site' }, { 'sec-fetch-site': 'same-site', origin: 'http://localhost:3000' }] as Array<Record<string, string>>) {
    for (const send of [reload, query]) {
      const r = await send(headers);
      assertError({ status: r.status, body: (await r.json()) as Json }, 403, 'forbidden', /another site/);
    }
  }
  const own = new URL(server.url).origin;
  for (const headers of [{}, { origin: own, 'sec-fetch-site': 'same-origin' }] as Array<Record<string, string>>) {
    assert.is((await query(headers)).status, 200, JSON.stringify(headers));
  }
  // Reading stays open to links from anywhere: only what a request changes or runs is guarded.
  assert.is((await fetch(new URL('/api/mounts', server.url), { headers: { 'sec-fetch-site': 'cross-site' } })).status, 200);
});

test('mount rules: one bare dataset, NAME=DATASET for several, --control needs default, catalog reserved, --catalog-config conflicts', async () => {
  const two = await trajstore(['serve', dataset, dataset, '--listen', '127.0.0.1:0']);
  assert.is(two.code, 2);
  assert.match(two.stderr, /NAME=DATASET/);
  const noDefault = await trajstore(['serve', `a=${dataset}`, `b=${dataset}`, '--listen', '127.0.0.1:0', '--control', '127.0.0.1:0']);
  assert.is(noDefault.code, 2);
  assert.match(noDefault.stderr, /--control needs a mount named default/);
  const reserved = await trajstore(['serve', `catalog=${dataset}`, `default=${dataset}`, '--listen', '127.0.0.1:0']);
  assert.is(reserved.code, 2);
  assert.match(reserved.stderr, /reserved/);
  const twice = await trajstore(['serve', `a=${dataset}`, `a=${dataset}`, '--listen', '127.0.0.1:0']);
  assert.is(twice.code, 2);
  const catalogConfig = await trajstore(['serve', '--catalog-config', join(home, 'acl.toml'), dataset, '--listen', '127.0.0.1:0']);
  assert.is(catalogConfig.code, 2);
  assert.match(catalogConfig.stderr, /cannot be combined/);
  // A bare `catalog` is a path.
  const cwd = join(home, 'catalog-cwd');
  mkdirSync(cwd);
  cpSync(dataset, join(cwd, 'catalog'), { recursive: true });
  const named = await startServeProcess(['serve', 'catalog', '--listen', '127.0.0.1:0'], { env, cwd });
  try {
    const mounts = (await get('/api/mounts', named.url)).body.mounts as Json[];
    assert.equal(mounts.map((m) => m.name), ['default']);
    assert.match(mounts[0]?.dataset_uri, /catalog-cwd\/catalog$/);
  } finally {
    await named.stop();
  }
});

test('--catalog-config: the directory file\'s local libraries are the mounts, and its directory service answers beside the API', async () => {
  const acl = join(home, 'served-acl.toml');
  const manage = (args: string[]) => trajstore(['serve', 'catalog', ...args.slice(0, args[0] === 'dataset' ? 2 : 1), '--catalog-config', acl, ...args.slice(args[0] === 'dataset' ? 2 : 1)]);
  assert.is((await manage(['dataset', 'add', 'prod', '--uri', dataset])).code, 0);
  assert.is((await manage(['dataset', 'add', 'team-lab', '--uri', dataset])).code, 0);
  const issued = await manage(['issue', 'alice']);
  assert.is(issued.code, 0, issued.stderr);
  const access = /access_key +(\S+)/.exec(issued.stdout)?.[1] as string;
  const secret = /secret_key +(\S+)/.exec(issued.stdout)?.[1] as string;
  assert.is((await manage(['grant', 'alice', 'prod'])).code, 0);
  const served = await startServeProcess(['serve', '--catalog-config', acl, '--listen', '127.0.0.1:0'], { env, cwd: home });
  try {
    // `team-lab` is not a mount name: the directory service still has it, the API does not.
    assert.equal(((await get('/api/mounts', served.url)).body.mounts as Json[]).map((m) => m.name), ['prod']);
    assert.match(served.stderr(), /library "team-lab" is not mounted/);
    const anonymous = await fetch(new URL('/catalog/v1/datasets', served.url));
    assert.is(anonymous.status, 401);
    const granted = await fetch(new URL('/catalog/v1/datasets', served.url), { headers: { authorization: `Basic ${Buffer.from(`${access}:${secret}`).toString('base64')}` } });
    assert.is(granted.status, 200);
    assert.match(await granted.text(), /"prod"/);
  } finally {
    await served.stop();
  }
});

test('GET /api/mounts and /api/mounts/:mount: the mounts, their snapshot and health', async () => {
  const { status, body } = await get('/api/mounts');
  assert.is(status, 200);
  assert.is(body.mounts.length, 1);
  const [counts] = await cliQuery('SELECT (SELECT count(*) FROM dataset.runs) AS runs, (SELECT count(*) FROM dataset.steps) AS steps');
  assert.is(body.mounts[0].rows.runs, counts?.runs);
  assert.is(body.mounts[0].rows.steps, counts?.steps);
  const health = await get('/api/mounts/default');
  assert.is(health.status, 200);
  assert.is(health.body.snapshot_id, body.mounts[0].snapshot_id);
  assert.is(health.body.index_rebuilt, true, 'the deleted index was rebuilt to answer');
  assert.not.match(health.body.index_path, dataset, 'the rebuilt index is outside the dataset');
  assertError(await get('/api/mounts/nope'), 404, 'not_found', /no mount named "nope"/);
});

test('GET /api/mounts/:mount/runs: filters match SQL over the same runs; cursor pages cover every run once, in order', async () => {
  /** Every page of a listing, followed by cursor, `limit` runs at a time. */
  const pages = async (params: string, limit: number): Promise<string[]> => {
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: { status: number; body: Json } = await get(`/api/mounts/default/runs?${params}&limit=${limit}${cursor ? `&cursor=${cursor}` : ''}`);
      assert.is(page.status, 200, JSON.stringify(page.body));
      assert.ok(page.body.runs.length <= limit);
      seen.push(...page.body.runs.map((r: Json) => r.document_id));
      cursor = page.body.next_cursor;
    } while (cursor);
    return seen;
  };
  const all = await cliQuery("SELECT document_id FROM dataset.runs ORDER BY ifnull(started_at, '') DESC, rowid DESC");
  assert.equal(await pages('', 2), all.map((r) => r.document_id), 'ties on started_at are ordered by rowid');
  for (const [params, order] of <Array<[string, string]>>[
    ['sort=started_at&order=asc', "ifnull(started_at, '') ASC, rowid ASC"],
    ['sort=cost_usd&order=asc', 'ifnull(cost_usd, -1) ASC, rowid ASC'],
    ['sort=step_count&order=desc&agent=pchronicle-fixture-agent', 'step_count DESC, rowid DESC'],
  ]) {
    const where = params.includes('agent=') ? "WHERE agent_name = 'pchronicle-fixture-agent'" : '';
    const expected = (await cliQuery(`SELECT document_id FROM dataset.runs ${where} ORDER BY ${order}`)).map((r) => r.document_id);
    for (const limit of [1, 3, 500]) assert.equal(await pages(params, limit), expected, `${params} by ${limit}`);
  }

  const cases: Array<[string, string]> = [
    ['model=claude-opus-4-6', "agent_model_name = 'claude-opus-4-6'"],
    ['agent=pchronicle-fixture-agent', "agent_name = 'pchronicle-fixture-agent'"],
    ['since=2026-06-01&until=2026-07-01', "started_at >= '2026-06-01' AND started_at < '2026-07-01'"],
    [`source=${PARENT}`, `source_path LIKE '${PARENT}/%'`],
    ['min_cost=0.05', 'cost_usd >= 0.05'],
    ['max_cost=0.05', 'cost_usd <= 0.05'],
  ];
  for (const [params, where] of cases) {
    const expected = await cliQuery(`SELECT document_id FROM dataset.runs WHERE ${where} ORDER BY cost_usd DESC, rowid DESC`);
    const { status, body } = await get(`/api/mounts/default/runs?${params}&sort=cost_usd&order=desc`);
    assert.is(status, 200);
    assert.ok(expected.length > 0 && expected.length < all.length, `${params} selects some runs`);
    assert.equal(body.runs.map((r: Json) => r.document_id), expected.map((r) => r.document_id), params);
  }
  const bySteps = await get('/api/mounts/default/runs?sort=step_count&order=asc');
  const steps = bySteps.body.runs.map((r: Json) => r.step_count as number);
  assert.equal(steps, [...steps].sort((a, b) => a - b));

  assertError(await get('/api/mounts/default/runs?limit=0'), 400, 'bad_request', /limit/);
  assertError(await get('/api/mounts/default/runs?limit=501'), 400, 'bad_request');
  // Numbers are decimal: JavaScript's own reading would take 1e400 as Infinity (past every maximum), 0x10 as 16.
  for (const [path, value] of [['runs?limit', '1e400'], ['runs?limit', '0x10'], ['runs?limit', '%205'], ['runs?min_cost', 'Infinity'], ['find?match=the&timeout_ms', '1e400'], ['find?match=the&max_results', '1e400']]) {
    assertError(await get(`/api/mounts/default/${path}=${value}`), 400, 'bad_request', /must be a decimal number/);
  }
  assert.is((await get('/api/mounts/default/runs?limit=2&min_cost=0.5')).status, 200);
  assertError(await get('/api/mounts/default/runs?sort=name'), 400, 'bad_request', /^invalid request: querystring\/sort must be one of: started_at, cost_usd, step_count, tool_call_count$/);
  assertError(await get('/api/mounts/default/runs?colour=red'), 400, 'bad_request', /^invalid request: unknown query parameter 'colour'$/);
  assertError(await get('/api/mounts/default/runs?min_cost=cheap'), 400, 'bad_request');
  assertError(await get('/api/mounts/default/runs?cursor=not-a-cursor'), 422, 'invalid_input', /cursor/);
  const dateCursor = Buffer.from(JSON.stringify(['zzz', 1])).toString('base64url');
  assertError(await get(`/api/mounts/default/runs?sort=cost_usd&cursor=${dateCursor}`), 422, 'invalid_input', /same sort/);
  assertError(await get('/api/mounts/nope/runs'), 404, 'not_found');
});

test('GET /api/mounts/:mount/runs/:document_id and /steps: the run, its parent and subagents, its steps with tool calls', async () => {
  const parent = await get(`/api/mounts/default/runs/${PARENT}`);
  assert.is(parent.status, 200);
  assert.is(parent.body.run.document_id, PARENT);
  assert.is(parent.body.run.parent, null);
  assert.equal(parent.body.run.children.map((c: Json) => c.document_id), [CHILD]);
  const child = await get(`/api/mounts/default/runs/${encodeURIComponent(CHILD)}`);
  assert.is(child.body.run.parent.document_id, PARENT);
  const spawning = child.body.run.parent_tool_call_id as string;

  const [{ n } = {}] = await cliQuery(`SELECT count(*) AS n FROM dataset.steps WHERE document_id = '${PARENT}'`);
  const pages: Json[] = [];
  for (let offset = 0; offset < Number(n); offset += 3) {
    const page = await get(`/api/mounts/default/runs/${PARENT}/steps?offset=${offset}&limit=3`);
    assert.is(page.status, 200);
    assert.is(page.body.total, n);
    pages.push(...page.body.steps);
  }
  assert.equal(pages.map((s) => s.turn_ordinal), Array.from({ length: Number(n) }, (_, i) => i));
  const calls = await cliQuery(`SELECT turn_ordinal, tool_call_id, function_name FROM dataset.tool_calls WHERE document_id = '${PARENT}' ORDER BY turn_ordinal, call_index`);
  assert.equal(
    pages.flatMap((s) => s.tool_calls.map((c: Json) => ({ turn_ordinal: s.turn_ordinal, tool_call_id: c.tool_call_id, function_name: c.function_name }))),
    calls,
  );
  assert.ok(pages.some((s) => s.tool_calls.some((c: Json) => c.tool_call_id === spawning)), 'the spawning call is among the parent\'s');
  const task = pages.flatMap((s) => s.tool_calls).find((c: Json) => c.function_name === 'Task');
  assert.type(task.arguments, 'object', 'arguments are parsed JSON');

  assertError(await get('/api/mounts/default/runs/no-such-run'), 404, 'not_found', /no-such-run/);
  assertError(await get('/api/mounts/default/runs/no-such-run/steps'), 404, 'not_found');
  assertError(await get(`/api/mounts/default/runs/${PARENT}/steps?offset=-1`), 400, 'bad_request');
  assertError(await get(`/api/mounts/default/runs/${PARENT}/steps?limit=100000`), 400, 'bad_request');
});

test('runs whose document id no path can carry (".", "..", 5,000 characters) are read with the id in the query: GET /api/mounts/:mount/run and /run/steps', async () => {
  const src = join(home, 'unpathable');
  mkdirSync(src, { recursive: true });
  const ids = ['.', '..', 'x'.repeat(5000)];
  ids.forEach((id, i) => writeFileSync(join(src, `${i}.json`), JSON.stringify({ schema_version: 'ATIF-v1.6', session_id: `s${i}`, trajectory_id: id, agent: { name: 'a', version: '1' }, steps: [{ step_id: 1, source: 'user', message: `hello ${i}` }] })));
  const ds = join(home, 'unpathable-ds');
  const imported = await trajstore(['import', '-f', src, '-t', ds]);
  assert.is(imported.code, 0, imported.stderr);
  const served = await startServeProcess(['serve', ds, '--listen', '127.0.0.1:0'], { env, cwd: home });
  try {
    // A URL resolves "." and ".." away (so does every browser), and a path segment holds at most 4,096 characters.
    assertError(await get(`/api/mounts/default/runs/${ids[2]}`, served.url), 414, 'uri_too_long');
    for (const [i, id] of ids.entries()) {
      const q = `document_id=${encodeURIComponent(id)}`;
      const one = await get(`/api/mounts/default/run?${q}`, served.url);
      assert.is(one.status, 200, JSON.stringify(one.body).slice(0, 200));
      assert.is(one.body.run.document_id, id);
      const steps = await get(`/api/mounts/default/run/steps?${q}&offset=0&limit=10`, served.url);
      assert.is(steps.status, 200, JSON.stringify(steps.body).slice(0, 200));
      assert.equal(steps.body.steps.map((s: Json) => s.message_text), [`hello ${i}`]);
    }
    assertError(await get('/api/mounts/default/run?document_id=nothing', served.url), 404, 'not_found', /nothing/);
    assertError(await get('/api/mounts/default/run', served.url), 400, 'bad_request', /document_id/);
    assertError(await get('/api/mounts/default/run/steps?document_id=.&offset=-1', served.url), 400, 'bad_request');
  } finally {
    await served.stop();
  }
});

test('a page of steps is bounded in bytes: big tool outputs come a few steps at a time, next_offset says where to go on', async () => {
  const atif = join(home, 'big.atif.json');
  writeBigRun(atif, 'big', 12, 1024 * 1024);
  const ds = join(home, 'big-ds');
  assert.is((await trajstore(['import', '-f', atif, '-t', ds])).code, 0);
  const big = await startServeProcess(['serve', ds, '--listen', '127.0.0.1:0'], { env, cwd: home });
  try {
    const MAX_PAGE_BYTES = 8 * 1024 * 1024;
    const seen: number[] = [];
    let offset: number | null = 0;
    while (offset !== null) {
      const response = await fetch(new URL(`/api/mounts/default/runs/big/steps?offset=${offset}`, big.url));
      const text = await response.text();
      assert.is(response.status, 200, text.slice(0, 300));
      // The default limit (100) covers the run; the byte budget cuts the page short.
      assert.ok(Buffer.byteLength(text) <= MAX_PAGE_BYTES + 4096, `a page of ${Buffer.byteLength(text)} bytes`);
      const page = JSON.parse(text) as Json;
      assert.ok(page.steps.length > 0);
      seen.push(...page.steps.map((s: Json) => s.turn_ordinal as number));
      assert.is(page.next_offset, offset + page.steps.length < 12 ? offset + page.steps.length : null);
      offset = page.next_offset as number | null;
    }
    assert.equal(seen, Array.from({ length: 12 }, (_, i) => i), 'every step once, in order');
    assert.ok(seen.length > 3, 'more than one page');
    // A step larger than the budget asked for still comes, alone.
    const one = await get('/api/mounts/default/runs/big/steps?offset=4&max_bytes=1024', big.url);
    assert.equal([one.body.steps.length, one.body.steps[0].turn_ordinal, one.body.next_offset], [1, 4, 5]);
    assert.is(one.body.steps[0].tool_calls[0].result.length, 1024 * 1024, 'a step comes whole');
    assertError(await get(`/api/mounts/default/runs/big/steps?max_bytes=${MAX_PAGE_BYTES + 1}`, big.url), 400, 'bad_request', /max_bytes/);
  } finally {
    await big.stop();
  }
});

test('a page of runs is bounded in bytes: runs with huge ids come a few at a time, next_cursor goes on from the last one', async () => {
  // 40 chat logs, each a run whose conversation id (its session, run and document id) is 512 KiB.
  const src = join(home, 'long-ids');
  mkdirSync(src, { recursive: true });
  const ids = Array.from({ length: 40 }, (_, i) => `${String(i).padStart(2, '0')}-${'x'.repeat(512 * 1024)}`);
  ids.forEach((id, i) => writeFileSync(join(src, `${i}.jsonl`), `${JSON.stringify({ conversation_id: id, model: 'm', messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }] })}\n`));
  const ds = join(home, 'long-ids-ds');
  const imported = await trajstore(['import', '-f', src, '-t', ds]);
  assert.is(imported.code, 0, imported.stderr);
  const served = await startServeProcess(['serve', ds, '--listen', '127.0.0.1:0'], { env, cwd: home });
  try {
    const MAX_PAGE_BYTES = 8 * 1024 * 1024;
    const seen: string[] = [];
    let cursor: string | null | undefined;
    let pages = 0;
    while (cursor !== null) {
      const response = await fetch(new URL(`/api/mounts/default/runs?sort=started_at&order=asc&limit=500${cursor ? `&cursor=${cursor}` : ''}`, served.url));
      const text = await response.text();
      assert.is(response.status, 200, text.slice(0, 300));
      // Each run is about 2 MiB of JSON (three ids and the source path): 500 of them would be 1 GB.
      assert.ok(Buffer.byteLength(text) <= MAX_PAGE_BYTES + 2 * 1024 * 1024, `a page of ${Buffer.byteLength(text)} bytes`);
      const page = JSON.parse(text) as Json;
      assert.ok(page.runs.length > 0, 'every page has a run');
      seen.push(...page.runs.map((run: Json) => run.session_id as string));
      cursor = page.next_cursor as string | null;
      pages++;
    }
    assert.is(seen.length, ids.length, 'every run once');
    assert.equal(new Set(seen), new Set(ids));
    assert.ok(pages > 5, `${pages} pages`);
    // A run larger than the budget asked for still comes, alone, and the next page goes on after it.
    const first = await get('/api/mounts/default/runs?sort=step_count&max_bytes=1024', served.url);
    assert.is(first.body.runs.length, 1);
    const second = await get(`/api/mounts/default/runs?sort=step_count&max_bytes=1024&cursor=${first.body.next_cursor}`, served.url);
    assert.is(second.body.runs.length, 1);
    assert.is.not(second.body.runs[0].document_id, first.body.runs[0].document_id);
    assertError(await get(`/api/mounts/default/runs?max_bytes=${MAX_PAGE_BYTES + 1}`, served.url), 400, 'bad_request', /max_bytes/);
  } finally {
    await served.stop();
  }
});

test('GET /api/mounts/:mount/find: the command line\'s document exactly, plus the terms to highlight', async () => {
  for (const [params, args] of [
    ['match=link', ['--match', 'link']],
    ['match=%23user(docs)&match=audit', ['--match', '#user(docs)', '--match', 'audit']],
    [`session_id=${PARENT}&step_id=2`, ['--session-id', PARENT, '--step-id', '2']],
    ['match=%E5%BE%AE%E6%9C%8D%E5%8A%A1', ['--match', '微服务']],
  ] as Array<[string, string[]]>) {
    const cli = await trajstore(['find', dataset, ...args, '--format', 'json']);
    assert.is(cli.code, 0, cli.stderr);
    const { status, body } = await get(`/api/mounts/default/find?${params}`);
    assert.is(status, 200);
    const { highlight, ...doc } = body;
    assert.equal(doc, JSON.parse(cli.stdout), params);
    assert.ok(Array.isArray(highlight));
  }
  const highlighted = await get('/api/mounts/default/find?match=link%20OR%20%22broken%20links%22');
  assert.equal(highlighted.body.highlight, ['link', 'broken links']);
  const few = await get('/api/mounts/default/find?match=the&max_results=1');
  assert.is(few.body.matches.length, 1);
  assert.is(few.body.truncated, true);

  // Named as the API's parameter, not the command line's flag.
  assertError(await get('/api/mounts/default/find?match=((('), 422, 'invalid_input', /^invalid match expression at column 4: /);
  assertError(await get('/api/mounts/default/find?match=a&match=('), 422, 'invalid_input', /^invalid match #2 expression at column 2: /);
  assertError(await get('/api/mounts/default/find'), 422, 'invalid_input', /needs match/);
  assertError(await get(`/api/mounts/default/find?match=x&session_id=${PARENT}`), 422, 'invalid_input', /only one/);
  assertError(await get('/api/mounts/default/find?run_id=r&step_id=1'), 422, 'invalid_input', /session_id/);
  assertError(await get('/api/mounts/default/find?match=x&max_results=100000'), 400, 'bad_request');
  assertError(await get('/api/mounts/default/find?match=x&timeout_ms=600000'), 400, 'bad_request');
  assertError(await get('/api/mounts/nope/find?match=x'), 404, 'not_found');
});

test('POST /api/mounts/:mount/query: read-only SQL with the command line\'s limits', async () => {
  const sql = 'SELECT document_id, step_count FROM dataset.runs ORDER BY document_id';
  const ok = await post('/api/mounts/default/query', { sql });
  assert.is(ok.status, 200);
  assert.equal(ok.body.columns, ['document_id', 'step_count']);
  assert.equal(ok.body.rows, (await cliQuery(sql)).map((r) => [r.document_id, r.step_count]));
  assert.is(ok.body.truncated, null);
  const cut = await post('/api/mounts/default/query', { sql, max_output_rows: 2 });
  assert.is(cut.body.rows.length, 2);
  assert.is(cut.body.truncated, 'rows');
  const slow = await post('/api/mounts/default/query', { sql: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c', timeout_ms: 200 });
  assert.is(slow.status, 200);
  assert.is(slow.body.truncated, 'timeout');

  assertError(await post('/api/mounts/default/query', { sql: 'DELETE FROM runs_stored' }), 422, 'invalid_input', /read-only/);
  assertError(await post('/api/mounts/default/query', { sql: "ATTACH 'x.db' AS x" }), 422, 'invalid_input');
  assertError(await post('/api/mounts/default/query', { sql: 'SELEC 1' }), 422, 'invalid_input', /SQL error/);
  assertError(await post('/api/mounts/default/query', { sql: '   ' }), 422, 'invalid_input', /empty/);
  assertError(await post('/api/mounts/default/query', { sql: 'SELECT 1', limit: 1 }), 400, 'bad_request', /^invalid request: unknown body field 'limit'$/);
  assertError(await post('/api/mounts/default/query', { sql: 'SELECT 1', max_output_rows: 10_000_000 }), 400, 'bad_request');
  assertError(await post('/api/mounts/default/query', {}), 400, 'bad_request');
  assertError(await post('/api/mounts/default/query', '{"sql": '), 400, 'bad_request');
  assertError(await post('/api/mounts/default/query', { sql: `SELECT '${'x'.repeat(2 * 1024 * 1024)}'` }), 413, 'payload_too_large');
  assertError(await post('/api/mounts/nope/query', { sql: 'SELECT 1' }), 404, 'not_found');
  // A body is JSON, read decoded when compressed; anything else is 415.
  const send = (headers: Record<string, string>, body: Uint8Array<ArrayBuffer> | string) => fetch(new URL('/api/mounts/default/query', server.url), { method: 'POST', headers, body }).then(async (r) => ({ status: r.status, body: (await r.json()) as Json }));
  const zipped = await send({ 'content-type': 'application/json', 'content-encoding': 'gzip' }, new Uint8Array(gzipSync(JSON.stringify({ sql: 'SELECT 41 + 1 AS n' }))));
  assert.equal([zipped.status, zipped.body.rows], [200, [[42]]], JSON.stringify(zipped.body));
  assertError(await send({ 'content-type': 'text/plain' }, JSON.stringify({ sql: 'SELECT 1' })), 415, 'bad_request', /^Content-Type "text\/plain" is not taken: send the body as application\/json$/);
  assertError(await send({}, new Uint8Array(Buffer.from(JSON.stringify({ sql: 'SELECT 1' })))), 415, 'bad_request', /^Content-Type "none" is not taken/);
  assertError(await send({ 'content-type': 'application/json', 'content-encoding': 'zstd' }, JSON.stringify({ sql: 'SELECT 1' })), 415, 'bad_request', /Content-Encoding 'zstd'/);
});

test('GET /api/mounts/:mount/stats/:report: the command line\'s reports, and the usage timeline', async () => {
  for (const report of ['overview', 'agents', 'models', 'tools']) {
    const cli = await trajstore(['stats', report, dataset, '--format', 'json']);
    assert.is(cli.code, 0, cli.stderr);
    const { status, body } = await get(`/api/mounts/default/stats/${report}`);
    assert.is(status, 200);
    assert.equal(body.rows, JSON.parse(cli.stdout), report);
  }
  const timeline = await get('/api/mounts/default/stats/timeline');
  const expected = await cliQuery("SELECT substr(timestamp, 1, 10) AS day, count(*) AS steps FROM dataset.steps WHERE source = 'agent' AND response_id IS NULL GROUP BY 1");
  assert.ok(timeline.body.rows.length > 0);
  const days = new Set(timeline.body.rows.map((r: Json) => r.day));
  for (const row of expected) assert.ok(days.has(row.day), `day ${row.day}`);
  assertError(await get('/api/mounts/default/stats/bogus'), 400, 'bad_request', /report/);
  assertError(await get('/api/mounts/nope/stats/tools'), 404, 'not_found');
});

test('unknown routes and internal errors keep the error shape; a 500 tells nothing of the inside', async () => {
  assertError(await get('/api/nothing'), 404, 'not_found', /no route GET \/api\/nothing/);
  assertError(await post('/api/mounts', {}), 404, 'not_found');
  const internal = toHttpError(new Error('secret path /var/x'));
  assert.is(internal.body.error.status, 500);
  assert.is(internal.internal, true);
  assert.not.match(internal.body.error.message, 'secret');
  const page = await fetch(server.url);
  assert.is(page.status, 200);
  assert.match(await page.text(), '<script type="module" src="assets/app.js">');
  assertError(await get('/assets/nothing.js'), 404, 'not_found');
  // Failures before any route runs have the same shape.
  assertError(await get('/api/mounts/%E0%A4%A'), 400, 'bad_request', /percent-encoding/);
  assertError(await get(`/api/mounts/default/runs/${'d'.repeat(300)}`), 404, 'not_found');
  assertError(await get(`/api/mounts/default/runs/${'d'.repeat(5000)}`), 414, 'uri_too_long');
  const raw = async (request: string): Promise<{ status: number; body: Json }> => {
    const { hostname, port } = new URL(server.url);
    const socket = connect(Number(port), hostname);
    socket.end(request);
    let text = '';
    for await (const chunk of socket) text += String(chunk);
    const [head = '', body = ''] = text.split('\r\n\r\n');
    return { status: Number(/^HTTP\/1\.1 (\d+)/.exec(head)?.[1]), body: JSON.parse(body) as Json };
  };
  assertError(await raw('GET /api/mounts HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n'), 400, 'bad_request', /not valid HTTP/);
  assertError(await raw(`GET /api/mounts HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ${'x'.repeat(20_000)}\r\n\r\n`), 431, 'headers_too_large');
  assertError(await raw('GET /api/mounts HTTP/1.1\r\nConnection: close\r\n\r\n'), 400, 'bad_request', /no Host header, which HTTP\/1\.1 requires/);
});

test('a new snapshot is served without a restart; the dataset is never written; the control listener reports and reloads', async () => {
  const before = (await get('/api/mounts')).body.mounts[0];
  const files = snapshotOfFiles(dataset);
  const again = await trajstore(['import', '-f', join(SHARED_FIXTURES, 'persisting', 'atif', 'dialogue_10.json'), '-t', dataset, '--mode', 'append']);
  assert.is(again.code, 0, again.stderr);
  const after = (await get('/api/mounts')).body.mounts[0];
  assert.is.not(after.snapshot_id, before.snapshot_id);
  assert.is(after.rows.runs, before.rows.runs + 1);
  const filesAfterImport = snapshotOfFiles(dataset);
  // Everything the server does from here on reads only.
  for (const path of ['/api/mounts/default', '/api/mounts/default/runs', `/api/mounts/default/runs/${PARENT}/steps`, '/api/mounts/default/find?match=link', '/api/mounts/default/stats/overview']) {
    assert.is((await get(path)).status, 200, path);
  }
  assert.equal(snapshotOfFiles(dataset), filesAfterImport);
  assert.is.not(files.length, 0);

  const status = await get('/control/status', server.controlUrl);
  assert.is(status.status, 200);
  assert.equal(status.body.mounts.map((m: Json) => [m.name, m.snapshot_id]), [['default', after.snapshot_id]]);
  assert.ok(status.body.requests > 10);
  const reload = await post('/control/reload', {}, server.controlUrl);
  assert.is(reload.status, 200);
  assert.is(reload.body.reloaded, true);
  assertError(await get('/api/mounts', server.controlUrl), 404, 'not_found');
  assertError(await get('/control/status'), 404, 'not_found');
});

test('requests are traced to stderr at --log-level info, and not at the default level; --open without a browser prints the URL', async () => {
  assert.match(server.stderr(), /info: GET \/api\/mounts 200 [\d.]+ms/);
  assert.match(server.stderr(), /info: GET \/api\/mounts\/nope 404/);
  // --open without a display to open a browser on says where to go instead.
  const quiet = await startServeProcess(['serve', dataset, '--listen', '127.0.0.1:0', '--open'], { env: { ...env, DISPLAY: '', WAYLAND_DISPLAY: '' }, cwd: home });
  await get('/api/mounts', quiet.url);
  assert.is(await quiet.stop(), 0);
  assert.not.match(quiet.stderr(), /GET/);
  assert.match(quiet.stderr(), `no browser to open here; open ${quiet.url}`);
});

test('SIGTERM: a request whose body never ends does not keep the server up', async () => {
  const stuck = await startServeProcess(['serve', dataset, '--listen', '127.0.0.1:0'], { env, cwd: home });
  const { hostname, port } = new URL(stuck.url);
  const socket = connect(Number(port), hostname);
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
  socket.on('error', () => {});
  // 50 bytes promised, 5 sent.
  socket.write(`POST /api/mounts/default/query HTTP/1.1\r\nHost: ${hostname}:${port}\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{"sql`);
  await new Promise((resolve) => setTimeout(resolve, 200));
  const started = Date.now();
  assert.is(await stuck.stop(), 0);
  // It waits for requests under way, 10 s at most, then closes their connections.
  assert.ok(Date.now() - started < 20_000, `exited after ${Date.now() - started} ms`);
  await closed;
});

test.run();
