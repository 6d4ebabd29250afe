/**
 * The event gateway of `trajstore serve` as a client meets it: a real server process, real HTTP.
 * Every error status with its `{error, message}` body (a table of bad requests: none gets a 5xx),
 * the 200 answer, idempotent retries (sequential and concurrent), the live trace endpoints,
 * projection into the dataset after the idle wait (seen by `query`, `find` and the read-only API,
 * and replaced, not doubled, when a trace gets more events), OTLP/HTTP JSON traces, split
 * templates (good ones, and bad ones refused before anything is opened), the flag rules, 429 when
 * the log's capacity is exhausted and 503 when the log cannot be written (a file size limit), an
 * OTLP export stored whole or not at all, the per-trace event limit, and /healthz answered while a
 * big trace is read back.
 */
import { existsSync, mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { rawRequest, requestWithHost } from '../../lib/testing/host-header.js';
import { startServeProcess, type ServeProcess } from '../../bench/lib/serve-process.js';
import { runTool, toolScript } from '../../lib/testing/run-tool.js';
import { eventually, queryRows, type Json } from './helpers/gateway.js';
import { sandbox } from './helpers/sandbox.js';
import { context, SpanStatusCode, trace } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';

const { home, env, run: trajstore, path } = sandbox('gateway-events-');
const dataset = path('live');
let server: ServeProcess;

interface Answer {
  status: number;
  body: Json;
  headers: Headers;
}

async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: typeof body === 'string' ? body : Buffer.isBuffer(body) ? new Uint8Array(body) : JSON.stringify(body) });
  return { status: response.status, body: (await response.json()) as Json, headers: response.headers };
}
const events = (body: unknown, headers?: Record<string, string>): Promise<Answer> => post(new URL('/v1/events', server.gatewayUrl).href, body, headers);
async function get(path: string, base = server.url): Promise<{ status: number; body: Json }> {
  const response = await fetch(new URL(path, base));
  return { status: response.status, body: (await response.json()) as Json };
}
/** A protobuf varint. */
function varint(n: number): Buffer {
  const out: number[] = [];
  for (; n >= 0x80; n = Math.floor(n / 0x80)) out.push((n % 0x80) | 0x80);
  out.push(n);
  return Buffer.from(out);
}
const record = (seq: number, extra: Json = {}): Json => ({ seq, source: 'sdk', kind: 'note', payload: { text: `event ${seq}` }, ...extra });
function assertGatewayError(r: Answer, status: number, code: string, what: string): void {
  assert.is(r.status, status, `${what}: ${JSON.stringify(r.body)}`);
  assert.equal(Object.keys(r.body).sort(), ['error', 'message'], what);
  assert.is(r.body.error, code, what);
  assert.type(r.body.message, 'string');
}
/** A minimal OTLP/JSON span (trace `ab12`, span `i`), at `i` µs past a fixed time. */
const otlpSpan = (i: number, attributes: Json[] = []): Json => ({ traceId: 'ab12', spanId: `s${i}`, name: 'step', startTimeUnixNano: String(1_780_000_000_000_000_000n + BigInt(i) * 1000n), attributes });
const otlpExport = (spans: Json[]): Json => ({ resourceSpans: [{ scopeSpans: [{ spans }] }] });

/** `serve` under a file size limit of `blocks` KiB (RLIMIT_FSIZE, SIGXFSZ ignored): a write past it fails with EFBIG. */
async function startSizeLimitedServe(ds: string, blocks: number): Promise<{ url: string; gatewayUrl: string; stop: () => Promise<void>; kill: () => void }> {
  const child = spawn('bash', ['-c', `trap '' XFSZ; ulimit -f ${blocks}; exec "$0" "$@"`, process.execPath, toolScript('trajstore'), 'serve', '--listen', '127.0.0.1:0', '--gateway', '127.0.0.1:0', '--gateway-dataset', ds, '--gateway-split-idle', '1h'], { env: { ...process.env, ...env }, cwd: home, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr.on('data', (c: Buffer) => (err += c.toString()));
  const kill = (): void => void (child.exitCode === null && child.kill('SIGKILL'));
  try {
    const [url, gatewayUrl] = await eventually(async () => {
      const serving = /^serving (\S+)$/m.exec(out);
      const gateway = /^gateway (\S+)$/m.exec(out);
      if (!serving || !gateway) throw new Error(`not listening yet: ${err}`);
      return [serving[1] as string, gateway[1] as string];
    }, 'the limited server');
    const stop = async (): Promise<void> => {
      if (child.exitCode !== null) return;
      child.kill('SIGTERM');
      await new Promise((resolve) => child.once('exit', resolve));
    };
    return { url: url as string, gatewayUrl: gatewayUrl as string, stop, kill };
  } catch (error) {
    kill();
    throw error;
  }
}
test.before(async () => {
  server = await startServeProcess(['serve', '--listen', '127.0.0.1:0', '--gateway', '127.0.0.1:0', '--gateway-dataset', dataset, '--gateway-split-idle', '300ms'], { env, cwd: home });
});

test.after(async () => {
  await server?.stop();
});

test('bad requests get the right 4xx and an {error, message} body, never a 5xx', async () => {
  const ok = { agent_id: 'agent', session_id: 'bad-input', records: [record(1)] };
  const cases: Array<[string, unknown, number, string, Record<string, string>?]> = [
    ['malformed JSON', '{"agent_id": "a", ', 400, 'invalid_json'],
    ['an empty body', '', 400, 'invalid_json'],
    ['a JSON array', '[]', 400, 'invalid_event'],
    ['a JSON string', '"x"', 400, 'invalid_event'],
    ['no agent_id', { session_id: 's', records: [] }, 400, 'invalid_identity'],
    ['agent_id a number', { ...ok, agent_id: 7 }, 400, 'invalid_identity'],
    ['session_id null', { ...ok, session_id: null }, 400, 'invalid_identity'],
    ['root_session_id a number', { ...ok, root_session_id: 1 }, 400, 'invalid_identity'],
    ['agent_id with a slash', { ...ok, agent_id: 'a/b' }, 400, 'invalid_identity'],
    ['session_id ..', { ...ok, session_id: '..' }, 400, 'invalid_identity'],
    ['session_id .', { ...ok, session_id: '.' }, 400, 'invalid_identity'],
    ['session_id empty', { ...ok, session_id: '' }, 400, 'invalid_identity'],
    ['agent_id with a backslash', { ...ok, agent_id: 'a\\b' }, 400, 'invalid_identity'],
    ['agent_id with a newline', { ...ok, agent_id: 'a\nb' }, 400, 'invalid_identity'],
    ['agent_id with a space at its end', { ...ok, agent_id: 'a ' }, 400, 'invalid_identity'],
    ['agent_id of 201 characters', { ...ok, agent_id: 'a'.repeat(201) }, 400, 'invalid_identity'],
    // Stored, it would be U+FFFD, and share its trace's path with another agent's.
    ['agent_id with a lone surrogate', { ...ok, agent_id: 'a\ud800' }, 400, 'invalid_identity'],
    ['session_id with a lone low surrogate', { ...ok, session_id: '\udc00x' }, 400, 'invalid_identity'],
    ['root_session_id with a slash', { ...ok, root_session_id: 'x/y' }, 400, 'invalid_identity'],
    ['a record whose session_id contradicts the body', { ...ok, records: [record(1, { session_id: 'other' })] }, 400, 'invalid_identity'],
    ['the user header with a slash', ok, 400, 'invalid_identity', { 'x-trajstore-user-id': 'a/b' }],
    ['an unknown top-level key', { ...ok, extra: 1 }, 400, 'invalid_event'],
    ['records not an array', { ...ok, records: {} }, 400, 'invalid_event'],
    // Past what a date can hold: accepted, it would have stopped its trace's projection for good.
    // Deeper than a stored document may nest: it could not be written back (JSON.stringify overflows the stack).
    ['a body that is not UTF-8', Buffer.from('{"agent_id":"a","session_id":"s","records":[{"seq":1,"source":"x","kind":"note","payload":"\xff"}]}', 'latin1'), 400, 'invalid_json'],
    ['a payload nested 5,000 deep', `{"agent_id":"a","session_id":"s","records":[{"seq":1,"source":"x","kind":"note","payload":${'['.repeat(5000)}${']'.repeat(5000)}}]}`, 400, 'invalid_json'],
    ['timestamp_unix_ms past the last date', { ...ok, records: [record(1, { timestamp_unix_ms: 8_700_000_000_000_000 })] }, 400, 'invalid_event'],
    ['no records', { agent_id: 'a', session_id: 's' }, 400, 'invalid_event'],
    ['a record that is not an object', { ...ok, records: [1] }, 400, 'invalid_event'],
    ['an unknown key in a record', { ...ok, records: [record(1, { colour: 'red' })] }, 400, 'invalid_event'],
    ['seq a string', { ...ok, records: [record(1, { seq: '1' })] }, 400, 'invalid_event'],
    ['seq negative', { ...ok, records: [record(1, { seq: -1 })] }, 400, 'invalid_event'],
    ['seq fractional', { ...ok, records: [record(1, { seq: 1.5 })] }, 400, 'invalid_event'],
    ['seq past 2^53', { ...ok, records: [record(1, { seq: 2 ** 53 })] }, 400, 'invalid_event'],
    ['no seq', { ...ok, records: [{ source: 'sdk', kind: 'note', payload: {} }] }, 400, 'invalid_event'],
    ['no payload', { ...ok, records: [{ seq: 1, source: 'sdk', kind: 'note' }] }, 400, 'invalid_event'],
    ['source empty', { ...ok, records: [record(1, { source: '' })] }, 400, 'invalid_event'],
    ['kind blank', { ...ok, records: [record(1, { kind: '  ' })] }, 400, 'invalid_event'],
    ['timestamp a number', { ...ok, records: [record(1, { timestamp: 5 })] }, 400, 'invalid_event'],
    // Stored times are compared as text: anything but RFC 3339 would sort and filter wrong.
    ['timestamp not a time', { ...ok, records: [record(1, { timestamp: 'not a time' })] }, 400, 'invalid_event'],
    ['timestamp without a zone', { ...ok, records: [record(1, { timestamp: '2026-05-02T08:00:03' })] }, 400, 'invalid_event'],
    ['timestamp a date only', { ...ok, records: [record(1, { timestamp: '2026-05-02' })] }, 400, 'invalid_event'],
    ['timestamp on a day that does not exist', { ...ok, records: [record(1, { timestamp: '2026-02-30T08:00:00Z' })] }, 400, 'invalid_event'],
    ['timestamp at hour 24', { ...ok, records: [record(1, { timestamp: '2026-05-02T24:00:00Z' })] }, 400, 'invalid_event'],
    ['timestamp in another shape Date.parse takes', { ...ok, records: [record(1, { timestamp: 'May 2, 2026 08:00 GMT' })] }, 400, 'invalid_event'],
    // Years RFC 3339 cannot write: stored as `+275760-...` or `-000001-...`, which sort before `2026-...` as text.
    ['timestamp_unix_ms past the year 9999', { ...ok, records: [record(1, { timestamp_unix_ms: 253_402_300_800_000 })] }, 400, 'invalid_event'],
    ['timestamp_unix_ms at the last date', { ...ok, records: [record(1, { timestamp_unix_ms: 8_640_000_000_000_000 })] }, 400, 'invalid_event'],
    ['timestamp before the year 0000 in UTC', { ...ok, records: [record(1, { timestamp: '0000-01-01T00:00:00+01:00' })] }, 400, 'invalid_event'],
    ['257 records', { ...ok, records: Array.from({ length: 257 }, (_, i) => record(i)) }, 413, 'too_many_records'],
    ['a body over 8 MiB', { ...ok, records: [record(1, { payload: 'x'.repeat(8 * 1024 * 1024) })] }, 413, 'body_too_large'],
  ];
  for (const [what, body, status, code, headers] of cases) assertGatewayError(await events(body, headers), status, code, what);
  const wrongType = await fetch(new URL('/v1/events', server.gatewayUrl), { method: 'POST', headers: { 'content-type': 'text/plain' }, body: JSON.stringify(ok) });
  const wrongTypeBody = (await wrongType.json()) as Json;
  assertGatewayError({ status: wrongType.status, body: wrongTypeBody, headers: wrongType.headers }, 415, 'unsupported_media_type', 'text/plain');
  assert.is(wrongTypeBody.message, 'Content-Type "text/plain" is not taken: send application/json (the OTLP paths also take application/x-protobuf)');
  const noType = await fetch(new URL('/v1/traces', server.gatewayUrl), { method: 'POST', body: new Uint8Array(Buffer.from(JSON.stringify(ok))) });
  assert.equal([noType.status, ((await noType.json()) as Json).message], [415, 'Content-Type "none" is not taken: send application/json (the OTLP paths also take application/x-protobuf)']);
  const noRoute = await fetch(new URL('/v1/nothing', server.gatewayUrl));
  assertGatewayError({ status: noRoute.status, body: (await noRoute.json()) as Json, headers: noRoute.headers }, 404, 'not_found', 'an unknown route');
  // Nothing of it was stored.
  assert.is((await get('/api/gateway/traces/agent/bad-input')).status, 404);
  assert.is((await get('/healthz', server.gatewayUrl)).body.status, 'ok');
});

test('a record\'s timestamp is RFC 3339 with a zone: others are refused naming the record, and nothing of the request is stored', async () => {
  const id = { agent_id: 'agent', session_id: 'timestamps' };
  const good = ['2026-05-02T08:00:03Z', '2026-05-02t08:00:03.123456z', '2026-05-02 10:00:03.5+02:00', '2024-02-29T23:59:59-11:30', '0000-01-01T00:00:00-01:00', '9999-12-31T23:59:59.999999Z'];
  const bad = await events({ ...id, records: [...good.map((timestamp, i) => record(i, { timestamp })), record(9, { timestamp: 'not a time' })] });
  assertGatewayError(bad, 400, 'invalid_event', 'a bad timestamp after good ones');
  assert.match(bad.body.message as string, /^\/records\/6\/timestamp: "not a time" is not an RFC 3339/);
  assert.is((await get('/api/gateway/traces/agent/timestamps')).status, 404);
  const outOfYears = await events({ ...id, records: [record(0, { timestamp: '9999-12-31T23:59:59-00:01' })] });
  assertGatewayError(outOfYears, 400, 'invalid_event', 'a timestamp past the year 9999 in UTC');
  assert.match(outOfYears.body.message as string, /^\/records\/0\/timestamp: "9999-12-31T23:59:59-00:01" is, in UTC, outside the years 0000 to 9999/);
  const taken = await events({ ...id, records: [...good.map((timestamp, i) => record(i, { timestamp })), record(9, { timestamp_unix_ms: 253_402_300_799_999 })] });
  assert.is(taken.status, 200, JSON.stringify(taken.body));
});

test('a request for another host name is refused 403 (DNS rebinding), and nothing it sent is stored', async () => {
  const body = { agent_id: 'rebind', session_id: 'rebound', records: [record(1)] };
  const refused = await requestWithHost(new URL('/v1/events', server.gatewayUrl).href, 'attacker.example:80', 'POST', body);
  assert.is(refused.status, 403);
  assert.equal(refused.body.error, 'forbidden');
  const local = await requestWithHost(new URL('/healthz', server.gatewayUrl).href, `localhost:${new URL(server.gatewayUrl!).port}`);
  assert.is(local.status, 200);
  assert.is((await get('/api/gateway/traces/rebind/rebound')).status, 404);
  // HTTP/1.1 requires Host: a request without one gets 400 in the gateway's shape.
  const hostless = await rawRequest(Number(new URL(server.gatewayUrl!).port), 'GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n');
  assert.is(hostless.status, 400, hostless.text);
  assert.match(hostless.text, '{"error":"bad_request","message":"the request has no Host header, which HTTP/1.1 requires"}');
});

test('a client that half-closes after its request (nc -N) gets its answer', async () => {
  const body = JSON.stringify({ agent_id: 'half', session_id: 'closed', records: [record(1)] });
  const answer = await rawRequest(Number(new URL(server.gatewayUrl!).port), `POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`, body, { halfClose: true });
  assert.is(answer.status, 200, answer.text);
  assert.match(answer.text, '"accepted_records":1');
});

test('a post from another site\'s page (an Origin not of this machine, or Sec-Fetch-Site cross-site) is refused 403, and nothing it sent is stored; this machine\'s pages and programs go through', async () => {
  const url = (path: string): string => new URL(path, server.gatewayUrl).href;
  const batch = (session: string) => ({ agent_id: 'csrf', session_id: session, records: [record(1)] });
  for (const [session, headers] of [
    ['other-origin', { origin: 'https://evil.example' }],
    ['lookalike-origin', { origin: 'http://127.0.0.1.evil.example' }],
    ['null-origin', { origin: 'null' }],
    ['cross-site', { 'sec-fetch-site': 'cross-site' }],
  ] as Array<[string, Record<string, string>]>) {
    const refused = await events(batch(session), headers);
    assert.is(refused.status, 403, `${session}: ${JSON.stringify(refused.body)}`);
    assert.is(refused.body.error, 'forbidden');
    assert.is((await get(`/api/gateway/traces/csrf/${session}`)).status, 404, `${session} stored nothing`);
  }
  const otlp = await post(url('/v1/traces'), { resourceSpans: [] }, { origin: 'https://evil.example' });
  assert.is(otlp.status, 403, 'OTLP too');
  assert.is((await events(batch('local-page'), { origin: `http://localhost:${new URL(server.gatewayUrl!).port}` })).status, 200);
  assert.is((await events(batch('program'))).status, 200);
});

test('every answer of the gateway listener, errors too, is never a page: nosniff, and a policy that runs nothing and allows no framing', async () => {
  const answers: Array<[string, Response]> = [
    ['healthz', await fetch(new URL('/healthz', server.gatewayUrl))],
    ['no route', await fetch(new URL('/%3Cscript%3Ewindow.x=1%3C/script%3E', server.gatewayUrl))],
    ['wrong type', await fetch(new URL('/v1/events', server.gatewayUrl), { method: 'POST', headers: { 'content-type': 'text/plain' }, body: '<script>' })],
    ['bad event', await fetch(new URL('/v1/events', server.gatewayUrl), { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"agent_id":"<script>"}' })],
    ['other site', await fetch(new URL('/v1/events', server.gatewayUrl), { method: 'POST', headers: { 'content-type': 'application/json', origin: 'https://evil.example' }, body: '{}' })],
  ];
  const hostless = await rawRequest(Number(new URL(server.gatewayUrl!).port), 'GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n');
  for (const [what, answer] of answers) {
    assert.is(answer.headers.get('x-content-type-options'), 'nosniff', what);
    assert.is(answer.headers.get('content-security-policy'), "default-src 'none'; frame-ancestors 'none'", what);
    assert.match(answer.headers.get('content-type') ?? '', /^application\/json/, what);
  }
  assert.match(hostless.text.toLowerCase(), 'x-content-type-options: nosniff', 'a request without Host');
});

test('a batch is acknowledged with the trace, and a retry stores nothing twice', async () => {
  const batch = { agent_id: 'agent', session_id: 'retry', records: [record(1), record(2), record(3)] };
  const first = await events(batch);
  assert.is(first.status, 200, JSON.stringify(first.body));
  assert.equal(Object.keys(first.body).sort(), ['accepted_records', 'agent_id', 'dataset', 'note', 'session_id', 'status', 'storage']);
  assert.equal({ ...first.body, note: '' }, { storage: 'agent/retry', agent_id: 'agent', session_id: 'retry', accepted_records: 3, dataset, status: 'ok', note: '' });
  const again = await events(batch);
  assert.is(again.status, 200);
  assert.match(again.body.note, /3 record\(s\) were stored before/);
  // Overlapping, and five identical retries at once.
  assert.is((await events({ ...batch, records: [record(3), record(4)] })).status, 200);
  const concurrent = await Promise.all(Array.from({ length: 5 }, () => events({ ...batch, records: [record(5), record(6)] })));
  assert.ok(concurrent.every((r) => r.status === 200));
  // The same seq from another source is another event.
  assert.is((await events({ ...batch, records: [record(1, { source: 'other' })] })).status, 200);
  const live = await get('/api/gateway/traces/agent/retry/events');
  assert.is(live.status, 200);
  assert.equal(live.body.events.map((e: Json) => `${e.source}:${e.seq}`), ['sdk:1', 'other:1', 'sdk:2', 'sdk:3', 'sdk:4', 'sdk:5', 'sdk:6']);
  assert.is(live.body.trace.events, 7);
});

test('live endpoints read a trace at once; projection writes it after the idle wait, and again (replacing it) after more events', async () => {
  const id = { agent_id: 'coder', session_id: 'live-1' };
  const call = (seq: number, extra: Json) => ({ seq, source: 'sdk', call_id: `c${seq}`, ...extra });
  const r = await events({
    ...id,
    records: [
      call(1, { kind: 'llm.request', payload: { model: 'm-1', user_content: 'count the lines of lighthouse.py' } }),
      call(2, { kind: 'llm.response', call_id: 'c1', payload: { model: 'm-1', assistant_content: 'I will count them.', tool_calls: [{ id: 'tc-1', name: 'bash', arguments: '{"cmd":"wc -l lighthouse.py"}' }], usage: { prompt_tokens: 100, completion_tokens: 12 } } }),
      call(3, { kind: 'llm.request', payload: { model: 'm-1', tool_results: [{ call_id: 'tc-1', content: '42 lighthouse.py' }] } }),
      call(4, { kind: 'llm.response', call_id: 'c3', payload: { model: 'm-1', assistant_content: 'It has 42 lines.', usage: { prompt_tokens: 130, completion_tokens: 6 } } }),
    ],
  });
  assert.is(r.status, 200, JSON.stringify(r.body));
  const storyline = (await get('/api/gateway/traces/coder/live-1/storyline')).body;
  assert.is(storyline.schema_version, 'storyline/v1');
  assert.equal(storyline.turns.map((t: Json) => t.src), ['user', 'agent', 'agent']);
  assert.is(storyline.turns[1].tool_calls[0].fn, 'bash');
  assert.equal(storyline.turns[1].tool_calls[0].args, { cmd: 'wc -l lighthouse.py' });
  assert.is(storyline.turns[1].observation.results[0].content, '42 lighthouse.py');
  assert.equal(storyline.turns[2].metrics, { prompt_tokens: 130, completion_tokens: 6 });
  const trajectory = (await get('/api/gateway/traces/coder/live-1/trajectory')).body;
  assert.match(trajectory.schema_version, /^ATIF-v1\./);
  assert.is(trajectory.steps.length, 3);
  const listed = (await get('/api/gateway/traces')).body;
  assert.ok(listed.traces.some((t: Json) => t.session_id === 'live-1' && t.events === 4));
  assert.is((await get('/api/gateway/traces/coder/nobody')).status, 404);
  assert.is((await get('/api/gateway/traces/coder/nobody/events')).body.error.code, 'not_found');

  // Projected after 300 ms idle: the dataset has the run, its steps and its events.
  await eventually(async () => {
    const rows = await queryRows(trajstore, dataset, "SELECT count(*) AS n FROM dataset.events WHERE session_id = 'live-1'");
    assert.is(rows[0]?.n, 4);
  }, 'projection of live-1');
  const [run] = await queryRows(trajstore, dataset, "SELECT document_id, source_path, source_format, step_count, tool_call_count, prompt_tokens FROM dataset.runs WHERE session_id = 'live-1'");
  assert.equal(run, { document_id: 'live-1', source_path: 'coder/live-1', source_format: 'gateway-events', step_count: 3, tool_call_count: 1, prompt_tokens: 230 });
  const found = await trajstore(['find', dataset, '--match', 'lighthouse', '--format', 'json']);
  assert.is(found.code, 0, found.stderr);
  assert.ok((JSON.parse(found.stdout) as Json).matches.some((m: Json) => m.session_id === 'live-1'));
  const runs = await eventually(async () => {
    const body = (await get('/api/mounts/gateway/runs')).body;
    assert.ok(body.runs.some((x: Json) => x.session_id === 'live-1'), JSON.stringify(body));
    return body;
  }, 'the API serving the new snapshot');
  assert.ok(runs.snapshot_id);

  // More events: the trace is projected again and replaces its rows.
  assert.is((await events({ ...id, records: [call(5, { kind: 'note', payload: { text: 'done' } })] })).status, 200);
  await eventually(async () => {
    const rows = await queryRows(trajstore, dataset, "SELECT (SELECT count(*) FROM dataset.events WHERE session_id = 'live-1') AS events, (SELECT count(*) FROM dataset.runs WHERE session_id = 'live-1') AS runs, (SELECT step_count FROM dataset.runs WHERE session_id = 'live-1') AS steps");
    assert.equal(rows[0], { events: 5, runs: 1, steps: 4 });
  }, 'projection of live-1 again');
  // The gateway counts the projected events once the batch is committed, just after its rows are readable.
  await eventually(async () => {
    const trace = (await get('/api/gateway/traces/coder/live-1')).body.trace;
    assert.is(trace.projected_events, 5);
  }, 'the gateway to count the second projection');
});

test('OTLP/HTTP JSON traces with GenAI spans become the same events; a retried export stores nothing twice', async () => {
  const ns = (ms: number): string => String(BigInt(1_780_000_000_000 + ms) * 1_000_000n);
  const kv = (key: string, value: unknown): Json => ({ key, value: typeof value === 'number' ? (Number.isInteger(value) ? { intValue: String(value) } : { doubleValue: value }) : { stringValue: String(value) } });
  const span = (spanId: string, parent: string, name: string, start: number, end: number, attributes: Json[]): Json => ({ traceId: '5b8efff798038103d269b633813fc60c', spanId, parentSpanId: parent, name, kind: 1, startTimeUnixNano: ns(start), endTimeUnixNano: ns(end), attributes, status: {} });
  const exportRequest = {
    resourceSpans: [
      {
        resource: { attributes: [kv('service.name', 'otel-agent')] },
        scopeSpans: [
          {
            scope: { name: 'test' },
            spans: [
              span('a000000000000001', '', 'invoke_agent Helper', 0, 100, [kv('gen_ai.operation.name', 'invoke_agent'), kv('gen_ai.agent.name', 'Helper'), kv('gen_ai.agent.id', 'helper-1'), kv('gen_ai.conversation.id', 'conv-9')]),
              span('a000000000000002', 'a000000000000001', 'chat gpt-x', 10, 40, [
                kv('gen_ai.operation.name', 'chat'),
                kv('gen_ai.request.model', 'gpt-x'),
                kv('gen_ai.response.model', 'gpt-x-2026'),
                kv('gen_ai.usage.input_tokens', 50),
                kv('gen_ai.usage.output_tokens', 7),
                kv('gen_ai.input.messages', JSON.stringify([{ role: 'user', parts: [{ type: 'text', content: 'what is the weather in Paris' }] }])),
                kv('gen_ai.output.messages', JSON.stringify([{ role: 'assistant', parts: [{ type: 'tool_call', id: 'call-w', name: 'get_weather', arguments: { city: 'Paris' } }], finish_reason: 'tool_call' }])),
              ]),
              span('a000000000000003', 'a000000000000001', 'execute_tool get_weather', 41, 45, [kv('gen_ai.operation.name', 'execute_tool'), kv('gen_ai.tool.name', 'get_weather'), kv('gen_ai.tool.call.id', 'call-w'), kv('gen_ai.tool.call.result', 'rainy, 12 C')]),
              span('a000000000000004', 'a000000000000001', 'chat gpt-x', 46, 90, [
                kv('gen_ai.operation.name', 'chat'),
                kv('gen_ai.request.model', 'gpt-x'),
                kv('gen_ai.usage.input_tokens', 70),
                kv('gen_ai.usage.output_tokens', 9),
                kv('gen_ai.output.messages', JSON.stringify([{ role: 'assistant', parts: [{ type: 'text', content: 'It is rainy in Paris.' }] }])),
              ]),
            ],
          },
        ],
      },
    ],
  };
  const first = await post(new URL('/v1/traces', server.gatewayUrl).href, exportRequest);
  assert.is(first.status, 200, JSON.stringify(first.body));
  assert.equal(first.body, {});
  // A retry, through Langfuse's path.
  assert.is((await post(new URL('/api/public/otel/v1/traces', server.gatewayUrl).href, exportRequest)).status, 200);
  const live = (await get('/api/gateway/traces/helper-1/conv-9/events')).body;
  assert.equal(live.events.map((e: Json) => e.kind), ['session.started', 'llm.request', 'llm.response', 'tool.execution', 'llm.request', 'llm.response', 'session.ended']);
  // The events OTLP made pass the checks of /v1/events (their timestamps are RFC 3339): sent again, they are known.
  const resent = await events({ agent_id: 'helper-1', session_id: 'conv-9', records: live.events.map(({ received_at: _at, ...r }: Json) => r) });
  assert.is(resent.status, 200, JSON.stringify(resent.body));
  assert.match(resent.body.note, /7 record\(s\) were stored before/);
  const doc = (await get('/api/gateway/traces/helper-1/conv-9/storyline')).body;
  assert.is(doc.agent.name, 'Helper');
  assert.equal(doc.turns.map((t: Json) => [t.src, t.msg]), [['user', 'what is the weather in Paris'], ['agent', ''], ['agent', 'It is rainy in Paris.']]);
  assert.equal(doc.turns[1].tool_calls, [{ tcid: 'call-w', fn: 'get_weather', args: { city: 'Paris' }, result: 'rainy, 12 C', duration_ms: 4 }]);
  assert.equal(doc.turns[1].observation.results, [{ source_call_id: 'call-w', content: 'rainy, 12 C' }]);
  assert.equal(doc.turns[1].metrics, { prompt_tokens: 50, completion_tokens: 7 });
  assert.is(doc.turns[1].model, 'gpt-x-2026');
  // Not OTLP JSON.
  assertGatewayError(await post(new URL('/v1/traces', server.gatewayUrl).href, { resourceSpans: {} }), 400, 'invalid_event', 'resourceSpans an object');
  assertGatewayError(await post(new URL('/v1/traces', server.gatewayUrl).href, { resourceSpans: [{ scopeSpans: [{ spans: [{ spanId: 'x' }] }] }] }), 400, 'invalid_event', 'a span without a traceId');
  // JSON text in an attribute nested deeper than a document may be is kept as the text it came as.
  const deepArguments = '['.repeat(5000) + ']'.repeat(5000);
  const deep = { resourceSpans: [{ scopeSpans: [{ spans: [{ traceId: 'ee', spanId: 'ff', name: 'execute_tool t', startTimeUnixNano: ns(1), endTimeUnixNano: ns(2), attributes: [kv('gen_ai.operation.name', 'execute_tool'), kv('gen_ai.conversation.id', 'deep-conv'), kv('gen_ai.agent.id', 'deep-agent'), kv('gen_ai.tool.call.arguments', deepArguments)] }] }] }] };
  assert.is((await post(new URL('/v1/traces', server.gatewayUrl).href, deep)).status, 200);
  const deepEvents = (await get('/api/gateway/traces/deep-agent/deep-conv/events')).body;
  assert.is(deepEvents.events[0].payload.arguments, deepArguments);
  // An attribute named __proto__ is data like any other: it must not lend the span the attributes it holds.
  const protoKey = { key: '__proto__', value: { kvlistValue: { values: [kv('gen_ai.operation.name', 'chat')] } } };
  const proto = { resourceSpans: [{ scopeSpans: [{ spans: [{ traceId: 'e1', spanId: 'f1', name: 'step', startTimeUnixNano: ns(1), endTimeUnixNano: ns(2), attributes: [kv('gen_ai.conversation.id', 'proto-conv'), kv('gen_ai.agent.id', 'proto-agent'), protoKey] }] }] }] };
  assert.is((await post(new URL('/v1/traces', server.gatewayUrl).href, proto)).status, 200);
  const protoEvents = (await get('/api/gateway/traces/proto-agent/proto-conv/events')).body.events as Json[];
  assert.equal(protoEvents.map((e) => e.kind), ['otel.span']);
  assert.equal(Object.keys(protoEvents[0]!.payload.span.attributes), ['gen_ai.conversation.id', 'gen_ai.agent.id', '__proto__']);
  assert.equal(protoEvents[0]!.payload.span.attributes.__proto__, { 'gen_ai.operation.name': 'chat' });
  // Times past a fixed64 (and past what a date can hold) are the client's error, not the server's.
  // 2^64-1 ns is a fixed64, but its microseconds (an event's seq) are past 2^53.
  for (const start of ['9'.repeat(40), 1e300, 18446744073709551616n.toString(), 18446744073709551615n.toString(), -5, 12.5]) {
    const farOff = { resourceSpans: [{ scopeSpans: [{ spans: [{ traceId: 'ab', spanId: 'cd', name: 'x', startTimeUnixNano: start }] }] }] };
    const answer = await post(new URL('/v1/traces', server.gatewayUrl).href, farOff);
    assertGatewayError(answer, 400, 'invalid_event', `startTimeUnixNano ${String(start).slice(0, 24)}`);
    assert.match(answer.body.message as string, /startTimeUnixNano: must be nanoseconds since the epoch/);
  }
});

test('an OTLP export holds at most 8,192 spans: more is 413 too_many_spans, and nothing of it is stored', async () => {
  const url = new URL('/v1/traces', server.gatewayUrl).href;
  const spans = (n: number, conversation: string): Json[] => Array.from({ length: n }, (_, i) => otlpSpan(i, [{ key: 'gen_ai.conversation.id', value: { stringValue: conversation } }]));
  const refused = await post(url, otlpExport(spans(8193, 'too-many')));
  assertGatewayError(refused, 413, 'too_many_spans', '8,193 spans');
  assert.match(refused.body.message as string, /at most 8192/);
  assert.is((await get('/api/gateway/traces/otel/too-many')).status, 404);
  const taken = await post(url, otlpExport(spans(8192, 'just-enough')));
  assert.is(taken.status, 200, JSON.stringify(taken.body));
  assert.is((await get('/api/gateway/traces/otel/just-enough')).body.trace.events, 8192);
});

test('OTLP/HTTP protobuf from the OpenTelemetry SDK’s own exporter becomes the same events; bodies that are not an ExportTraceServiceRequest get 400 naming the field', async () => {
  const provider = new TracerProvider({ resource: resourceFromAttributes({ 'service.name': 'proto-agent' }), spanProcessors: [new BatchSpanProcessor({ exporter: new OTLPTraceExporter({ url: new URL('/v1/traces', server.gatewayUrl).href }) })] });
  const tracer = provider.getTracer('gateway-test');
  // Spans a few milliseconds apart, as real ones are: events of one trace are ordered by time.
  const later = (): Promise<unknown> => new Promise((resolve) => setTimeout(resolve, 3));
  const agent = tracer.startSpan('invoke_agent Proto', { attributes: { 'gen_ai.operation.name': 'invoke_agent', 'gen_ai.agent.name': 'Proto', 'gen_ai.agent.id': 'proto-1', 'gen_ai.conversation.id': 'conv-proto' } });
  const inside = trace.setSpan(context.active(), agent);
  await later();
  const chat = tracer.startSpan('chat gpt-x', { attributes: { 'gen_ai.operation.name': 'chat', 'gen_ai.request.model': 'gpt-x', 'gen_ai.usage.input_tokens': 50, 'gen_ai.usage.output_tokens': 7, 'gen_ai.input.messages': JSON.stringify([{ role: 'user', parts: [{ type: 'text', content: 'weather in Oslo? é✓' }] }]) } }, inside);
  await later();
  chat.end();
  await later();
  const tool = tracer.startSpan('execute_tool get_weather', { attributes: { 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'get_weather', 'gen_ai.tool.call.id': 'call-o', 'gen_ai.tool.call.arguments': '{"city":"Oslo"}', 'gen_ai.tool.call.result': 'snow, -3 C', flags: [1, 2, 3] } }, inside);
  tool.setStatus({ code: SpanStatusCode.ERROR, message: 'rate limited' });
  await later();
  tool.end();
  await later();
  agent.end();
  await provider.forceFlush();
  await provider.shutdown();
  const live = (await get('/api/gateway/traces/proto-1/conv-proto/events')).body;
  assert.equal(live.events.map((e: Json) => e.kind), ['session.started', 'llm.request', 'llm.response', 'tool.execution', 'session.ended']);
  const byKind = (kind: string): Json => live.events.find((e: Json) => e.kind === kind).payload;
  assert.equal(byKind('llm.response').usage, { input_tokens: 50, output_tokens: 7 });
  assert.is(byKind('llm.request').model, 'gpt-x');
  const tooled = byKind('tool.execution');
  assert.equal([tooled.name, tooled.call_id, tooled.arguments, tooled.result, tooled.is_error], ['get_weather', 'call-o', { city: 'Oslo' }, 'snow, -3 C', true]);
  assert.equal(tooled.span.attributes.flags, [1, 2, 3]);
  assert.equal(tooled.span.status, { code: 2, message: 'rate limited' });
  assert.match(JSON.stringify(byKind('llm.request')), /weather in Oslo\? é✓/);
  // Bodies that are not an ExportTraceServiceRequest, and protobuf where only JSON is taken.
  const protobuf = (path: string, bytes: number[] | Buffer): Promise<Answer> =>
    fetch(new URL(path, server.gatewayUrl), { method: 'POST', headers: { 'content-type': 'application/x-protobuf' }, body: new Uint8Array(bytes) }).then(async (r) => ({ status: r.status, headers: r.headers, body: (await r.json()) as Json }));
  const nested = (depth: number): Buffer => {
    // An AnyValue that is an array holding the next, `depth` deep, as the value of attribute "k" of a span.
    let value = Buffer.from([0x0a, 0x01, 0x78]);
    for (let i = 0; i < depth; i++) value = Buffer.concat([Buffer.from([0x2a]), varint(Buffer.concat([Buffer.from([0x0a]), varint(value.length), value]).length), Buffer.from([0x0a]), varint(value.length), value]);
    const kv = Buffer.concat([Buffer.from([0x0a, 0x01, 0x6b, 0x12]), varint(value.length), value]);
    const span = Buffer.concat([Buffer.from([0x4a]), varint(kv.length), kv]);
    const scope = Buffer.concat([Buffer.from([0x12]), varint(span.length), span]);
    const rs = Buffer.concat([Buffer.from([0x12]), varint(scope.length), scope]);
    return Buffer.concat([Buffer.from([0x0a]), varint(rs.length), rs]);
  };
  const bad: Array<[number[] | Buffer, RegExp]> = [
    [[0x0a, 0x05, 0x01], /ExportTraceServiceRequest: a length of 5 runs past the end/],
    [[0x08, 0x01], /resource_spans has wire type 0, not 2/],
    [[0x0a, 0x04, 0x12, 0x02, 0x12, 0x05], /scope_spans\[0\].*runs past the end/],
    [[0x0a, 0x07, 0x12, 0x05, 0x12, 0x03, 0x2a, 0x01, 0xff], /spans\[0\]: name is not UTF-8/],
    [nested(40), /nested deeper than 32/],
    [[0x0f], /wire type 7/],
  ];
  for (const [bytes, reason] of bad) {
    const answer = await protobuf('/v1/traces', bytes);
    assertGatewayError(answer, 400, 'invalid_event', String(reason));
    assert.match(answer.body.message as string, reason);
  }
  assert.is((await protobuf('/v1/traces', nested(8))).status, 400, 'a well-formed span without ids is still refused as a span');
  assert.is((await fetch(new URL('/v1/events', server.gatewayUrl), { method: 'POST', headers: { 'content-type': 'application/x-protobuf' }, body: new Uint8Array([10, 0]) })).status, 415);
});

test('compressed bodies are read decoded: a gzip OTLP export (as the Collector sends by default) and gzip events; unknown or broken codings are refused', async () => {
  // The SDK's exporter compresses when told to by the environment, as a deployment configures it.
  process.env.OTEL_EXPORTER_OTLP_TRACES_COMPRESSION = 'gzip';
  const provider = new TracerProvider({ spanProcessors: [new BatchSpanProcessor({ exporter: new OTLPTraceExporter({ url: new URL('/api/public/otel/v1/traces', server.gatewayUrl).href }) })] });
  delete process.env.OTEL_EXPORTER_OTLP_TRACES_COMPRESSION;
  const tracer = provider.getTracer('gateway-test');
  const agent = tracer.startSpan('invoke_agent Zipped', { attributes: { 'gen_ai.operation.name': 'invoke_agent', 'gen_ai.agent.id': 'zipped-1', 'gen_ai.conversation.id': 'conv-zipped' } });
  await new Promise((resolve) => setTimeout(resolve, 3));
  tracer.startSpan('chat gpt-z', { attributes: { 'gen_ai.operation.name': 'chat', 'gen_ai.request.model': 'gpt-z' } }, trace.setSpan(context.active(), agent)).end();
  await new Promise((resolve) => setTimeout(resolve, 3));
  agent.end();
  await provider.forceFlush();
  await provider.shutdown();
  const live = (await get('/api/gateway/traces/zipped-1/conv-zipped/events')).body;
  assert.equal(live.events?.map((e: Json) => e.kind), ['session.started', 'llm.request', 'llm.response', 'session.ended'], JSON.stringify(live));

  const compressed = (encoding: string, body: Buffer): Promise<Answer> =>
    fetch(new URL('/v1/events', server.gatewayUrl), { method: 'POST', headers: { 'content-type': 'application/json', 'content-encoding': encoding }, body: new Uint8Array(body) }).then(async (r) => ({ status: r.status, headers: r.headers, body: (await r.json()) as Json }));
  const batch = JSON.stringify({ agent_id: 'zipped-2', session_id: 's', records: [record(1)] });
  const zipped = (await compressed('gzip', gzipSync(batch))).body;
  assert.equal([zipped.status, zipped.agent_id, zipped.accepted_records], ['ok', 'zipped-2', 1], JSON.stringify(zipped));
  assertGatewayError(await compressed('zstd', Buffer.from(batch)), 415, 'unsupported_media_type', 'an unknown coding');
  const broken = await compressed('gzip', Buffer.from(batch));
  assertGatewayError(broken, 400, 'invalid_json', 'plain JSON said to be gzip');
  assert.match(broken.body.message as string, 'the body is not valid gzip');
  const bomb = await compressed('gzip', gzipSync(Buffer.alloc(64 * 1024 * 1024, 0x20)));
  assertGatewayError(bomb, 413, 'body_too_large', 'a body that decodes past the limit');
  assert.match(bomb.body.message as string, 'decoded');
});

test('a live trace\'s events come in pages: total and offset say where a page is', async () => {
  const batch = (from: number, count: number) => events({ agent_id: 'paged', session_id: 's', records: Array.from({ length: count }, (_, i) => record(from + i)) });
  assert.is((await batch(0, 200)).status, 200);
  assert.is((await batch(200, 100)).status, 200);
  const whole = (await get('/api/gateway/traces/paged/s/events')).body;
  assert.equal([whole.total, whole.offset, whole.events.length], [300, 0, 300]);
  const page = (await get('/api/gateway/traces/paged/s/events?offset=250&limit=100')).body;
  assert.equal([page.total, page.offset, page.events.map((e: Json) => e.seq)], [300, 250, Array.from({ length: 50 }, (_, i) => 250 + i)]);
  for (const bad of ['limit=0', 'limit=10001', 'offset=-1', 'limit=1e400', 'colour=red']) assert.is((await get(`/api/gateway/traces/paged/s/events?${bad}`)).status, 400, bad);
});

test('identities as long as taken (200 bytes of UTF-8, any script) can be read back from the live API', async () => {
  const session = 'é'.repeat(50) + '漢'.repeat(20) + 's'.repeat(40);
  assert.is(Buffer.byteLength(session), 200);
  assert.is((await events({ agent_id: 'long-ids', session_id: session, records: [record(1)] })).status, 200);
  const live = await get(`/api/gateway/traces/long-ids/${encodeURIComponent(session)}/events`);
  assert.is(live.status, 200, JSON.stringify(live.body));
  assert.is(live.body.events.length, 1);
});

test('identities that would mislead or not fit a file name are refused naming the field; OTLP ids are made safe instead', async () => {
  const ok = { agent_id: 'agent', session_id: 'odd-ids', records: [record(1)] };
  const cases: Array<[string, Json, string, RegExp, Record<string, string>?]> = [
    ['a C1 control', { ...ok, agent_id: 'a\u0085b' }, 'agent_id', /U\+0085/],
    ['a bidi override', { ...ok, agent_id: 'invoice\u202etxt.exe' }, 'agent_id', /U\+202E/],
    ['a bidi isolate', { ...ok, session_id: 'a\u2066b\u2069' }, 'session_id', /U\+2066/],
    ['only a zero-width space', { ...ok, session_id: '\u200b' }, 'session_id', /no visible character/],
    ['only joiners and a BOM', { ...ok, root_session_id: '\u200d\u200c\ufeff\u2060' }, 'root_session_id', /no visible character/],
    // 200 CJK characters: 600 bytes, past what a file name may be.
    ['200 CJK characters', { ...ok, agent_id: '漢'.repeat(200) }, 'agent_id', /600 bytes of UTF-8 \(at most 200\)/],
    ['201 bytes', { ...ok, session_id: 'é'.repeat(100) + 's' }, 'session_id', /201 bytes/],
    ['a C1 control in the user header', ok, 'x-trajstore-user-id', /U\+0085/, { 'x-trajstore-user-id': 'al\u0085ice' }],
  ];
  for (const [what, body, field, reason, headers] of cases) {
    const answer = await events(body, headers);
    assertGatewayError(answer, 400, 'invalid_identity', what);
    assert.ok((answer.body.message as string).startsWith(`${field} `), `${what}: ${answer.body.message}`);
    assert.match(answer.body.message as string, reason, what);
  }
  assert.is((await get('/api/gateway/traces')).body.traces.filter((t: Json) => t.session_id === 'odd-ids').length, 0);
  // A zero-width character beside visible ones is a name like any other.
  assert.is((await events({ ...ok, session_id: 'a\u200db' })).status, 200);

  // OTLP ids are not refused but made safe: cut between characters to 200 bytes, controls and overrides as _.
  const span = { traceId: 'ab12', spanId: 'cd34', name: 'step', startTimeUnixNano: '1780000000000000000', attributes: [{ key: 'gen_ai.conversation.id', value: { stringValue: '漢'.repeat(200) } }, { key: 'gen_ai.agent.id', value: { stringValue: 'otel\u202e\u0085agent' } }] };
  assert.is((await post(new URL('/v1/traces', server.gatewayUrl).href, { resourceSpans: [{ scopeSpans: [{ spans: [span] }] }] })).status, 200);
  const stored = await get(`/api/gateway/traces/otel__agent/${encodeURIComponent('漢'.repeat(66))}`);
  assert.is(stored.status, 200, JSON.stringify(stored.body));
});

test('split templates: {user}, {date}, {hour}; a session stays in its first partition', async () => {
  const splitDataset = path('split');
  const split = await startServeProcess(['serve', '--listen', '127.0.0.1:0', '--gateway', '127.0.0.1:0', '--gateway-dataset', splitDataset, '--gateway-split', 'team-{user}/{date}/h{hour}', '--gateway-split-idle', '1h'], { env, cwd: home });
  try {
    const url = new URL('/v1/events', split.gatewayUrl).href;
    const now = new Date();
    const two = (n: number): string => String(n).padStart(2, '0');
    const day = `${now.getUTCFullYear()}-${two(now.getUTCMonth() + 1)}-${two(now.getUTCDate())}`;
    const alice = await post(url, { agent_id: 'a', session_id: 's1', records: [record(1)] }, { 'x-trajstore-user-id': 'alice' });
    assert.is(alice.status, 200, JSON.stringify(alice.body));
    assert.match(alice.body.storage, new RegExp(`^team-alice/${day}/h\\d\\d/a/s1$`));
    // The same session from another user stays where it began.
    const bob = await post(url, { agent_id: 'a', session_id: 's1', records: [record(2)] }, { 'x-trajstore-user-id': 'bob' });
    assert.is(bob.body.storage, alice.body.storage);
    const nobody = await post(url, { agent_id: 'a', session_id: 's2', records: [record(1)] });
    assert.match(nobody.body.storage, /^team-_unknown\//);
    // A subagent session (root_session_id) follows its root.
    const sub = await post(url, { agent_id: 'a', session_id: 's1-sub', root_session_id: 's1', records: [record(1)] }, { 'x-trajstore-user-id': 'carol' });
    assert.is(sub.body.storage, alice.body.storage.replace(/s1$/, 's1-sub'));
  } finally {
    await split.stop();
  }
});

test('bad split templates and gateway flags exit 2 before anything is opened or bound', async () => {
  const untouched = path('never-created');
  for (const template of ['{foo}', '{user', 'user}', '{user} x', '{user}//{date}', '../{user}', '', '{date}/..', '{USER}', '{user}\\x']) {
    const r = await trajstore(['serve', '--listen', '127.0.0.1:0', '--gateway', '127.0.0.1:0', '--gateway-dataset', untouched, '--gateway-split', template]);
    assert.is(r.code, 2, `${JSON.stringify(template)}: ${r.stderr}`);
    assert.match(r.stderr, /--gateway-split/);
  }
  for (const [args, message] of [
    [['--gateway', '127.0.0.1:0'], /--gateway-dataset/],
    [['--gateway-dataset', untouched], /needs --gateway ADDRESS or --gateway-config/],
    [['--gateway-split', '{user}'], /needs --gateway ADDRESS/],
    [['--gateway', '0.0.0.0:0', '--gateway-dataset', untouched], /--gateway .*loopback/],
    [['--gateway', '10.1.2.3:80', '--gateway-dataset', untouched], /loopback/],
    [['--gateway', '127.0.0.1:0', '--gateway-dataset', untouched, '--gateway-debug'], /--gateway-debug needs --gateway-config/],
    [['--gateway', '127.0.0.1:0', '--gateway-dataset', untouched, '--gateway-split-idle', 'soon'], /--gateway-split-idle/],
    [['--gateway', '127.0.0.1:0', '--gateway-dataset', 's3://bucket/prefix'], /--gateway-state/],
    [['--gateway', '127.0.0.1:0', '--gateway-dataset', dataset, `gateway=${dataset}`], /gateway/],
  ] as Array<[string[], RegExp]>) {
    const r = await trajstore(['serve', '--listen', '127.0.0.1:0', ...args]);
    assert.is(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message);
  }
  assert.not.ok(existsSync(untouched));
  // A place that holds something else is not made a dataset.
  mkdirSync(path('stranger'));
  writeFileSync(path('stranger', 'notes.txt'), 'mine');
  const stranger = await trajstore(['serve', '--listen', '127.0.0.1:0', '--gateway', '127.0.0.1:0', '--gateway-dataset', path('stranger')]);
  assert.is(stranger.code, 2, stranger.stderr);
  assert.match(stranger.stderr, /not a trajstore dataset/);
  assert.equal(readdirSync(path('stranger')), ['notes.txt']);
});

test('429 capacity_exhausted when more waits for the disk than the log may hold; every acknowledged event is stored once', async () => {
  const ds = path('capacity');
  const busy = await startServeProcess(['serve', '--listen', '127.0.0.1:0', '--gateway', '127.0.0.1:0', '--gateway-dataset', ds, '--gateway-split-idle', '1h'], { env: { ...env, TRAJSTORE_GATEWAY_MAX_PENDING_BYTES: '1' }, cwd: home });
  try {
    const url = new URL('/v1/events', busy.gatewayUrl).href;
    const send = (i: number) => post(url, { agent_id: 'a', session_id: 'busy', records: [record(i, { payload: 'x'.repeat(20_000) })] });
    let answers = await Promise.all(Array.from({ length: 40 }, (_, i) => send(i)));
    const refused = answers.filter((a) => a.status === 429);
    assert.ok(refused.length > 0, 'some were refused');
    for (const a of refused) {
      assertGatewayError(a, 429, 'capacity_exhausted', '429');
      assert.is(a.headers.get('retry-after'), '1');
    }
    assert.ok(answers.every((a) => a.status === 200 || a.status === 429));
    // The client retries what was refused, one at a time.
    for (let i = 0; i < 40; i++) if (answers[i]?.status === 429) assert.is((await send(i)).status, 200);
    answers = [];
    const live = (await get('/api/gateway/traces/a/busy/events', busy.url)).body;
    assert.equal(live.events.map((e: Json) => e.seq), Array.from({ length: 40 }, (_, i) => i));
  } finally {
    await busy.stop();
  }
  // The state inside the dataset does not keep drop from taking it.
  const dropped = await trajstore(['drop', ds, '--yes']);
  assert.is(dropped.code, 0, dropped.stderr);
  assert.not.ok(existsSync(ds));
});

test('a trace holds at most TRAJSTORE_GATEWAY_MAX_TRACE_EVENTS events: past it 413 trace_full naming the trace, and nothing of the request is stored', async () => {
  const capped = await startServeProcess(['serve', '--listen', '127.0.0.1:0', '--gateway', '127.0.0.1:0', '--gateway-dataset', path('capped'), '--gateway-split-idle', '1h'], { env: { ...env, TRAJSTORE_GATEWAY_MAX_TRACE_EVENTS: '1000' }, cwd: home });
  try {
    const url = new URL('/v1/events', capped.gatewayUrl).href;
    const batch = (from: number, count: number) => post(url, { agent_id: 'a', session_id: 'full', records: Array.from({ length: count }, (_, i) => record(from + i)) });
    for (let from = 0; from < 768; from += 256) assert.is((await batch(from, 256)).status, 200);
    const refused = await batch(768, 256);
    assertGatewayError(refused, 413, 'trace_full', '1,024 events');
    assert.match(refused.body.message as string, /^trace a\/full holds 768 events and may hold at most 1000/);
    assert.is((await get('/api/gateway/traces/a/full', capped.url)).body.trace.events, 768, 'nothing of the refused request is stored');
    // Up to the limit, and retries of stored events, are still taken; other traces too.
    assert.is((await batch(768, 232)).status, 200);
    assert.is((await batch(0, 256)).status, 200);
    assertGatewayError(await batch(1000, 1), 413, 'trace_full', 'the 1,001st event');
    const otlp = await post(new URL('/v1/traces', capped.gatewayUrl).href, otlpExport([otlpSpan(1, [{ key: 'gen_ai.agent.id', value: { stringValue: 'a' } }, { key: 'gen_ai.conversation.id', value: { stringValue: 'full' } }])]));
    assertGatewayError(otlp, 413, 'trace_full', 'an OTLP span for the full trace');
    assert.is((await post(url, { agent_id: 'a', session_id: 'next', records: [record(1)] })).status, 200);
    assert.is((await get('/api/gateway/traces/a/full', capped.url)).body.trace.events, 1000);
  } finally {
    await capped.stop();
  }
  // The limit is read like the others: a bad value exits 2.
  const bad = await runTool('trajstore', ['serve', '--listen', '127.0.0.1:0', '--gateway', '127.0.0.1:0', '--gateway-dataset', path('capped')], { env: { ...env, TRAJSTORE_GATEWAY_MAX_TRACE_EVENTS: 'lots' }, cwd: home });
  assert.is(bad.code, 2, bad.stderr);
  assert.match(bad.stderr, /TRAJSTORE_GATEWAY_MAX_TRACE_EVENTS/);
});

test('reading a big trace back does not hold up the gateway: /healthz is answered while a page of it is made', async () => {
  // 40 MB of events: reading them back takes a few hundred milliseconds.
  const payload = 'p'.repeat(20_000);
  for (let from = 0; from < 2000; from += 50) {
    assert.is((await events({ agent_id: 'big', session_id: 's', records: Array.from({ length: 50 }, (_, i) => record(from + i, { payload })) })).status, 200);
  }
  let pageAnswered = false;
  const page = get('/api/gateway/traces/big/s/events?limit=1').then((r) => ((pageAnswered = true), r));
  let answeredMeanwhile = 0;
  while (!pageAnswered) {
    const health = await Promise.race([get('/healthz', server.gatewayUrl), page]);
    if (!pageAnswered && health.body.status === 'ok') answeredMeanwhile += 1;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  const answer = await page;
  assert.equal([answer.status, answer.body.total, answer.body.events[0].seq], [200, 2000, 0]);
  assert.ok(answeredMeanwhile >= 3, `/healthz answered ${answeredMeanwhile} time(s) while the page was made`);
});

test('503 append_failed when the log cannot be written (a file size limit); the server lives on, acknowledged events stay', async () => {
  const ds = path('full');
  const limited = await startSizeLimitedServe(ds, 2048);
  try {
    const url = new URL('/v1/events', limited.gatewayUrl).href;
    const acknowledged: number[] = [];
    let failed: Answer | undefined;
    for (let i = 0; i < 40 && !failed; i++) {
      const r = await post(url, { agent_id: 'a', session_id: 'full', records: [record(i, { payload: 'y'.repeat(200_000) })] });
      if (r.status === 200) acknowledged.push(i);
      else failed = r;
    }
    assert.ok(failed, 'a write failed');
    assertGatewayError(failed as Answer, 503, 'append_failed', '503');
    assert.ok(acknowledged.length > 0);
    const health = await fetch(new URL('/healthz', limited.gatewayUrl));
    assert.is(health.status, 200);
    await limited.stop();
    const again = await startServeProcess(['serve', '--listen', '127.0.0.1:0', '--gateway', '127.0.0.1:0', '--gateway-dataset', ds, '--gateway-split-idle', '1h'], { env, cwd: home });
    try {
      const live = (await get('/api/gateway/traces/a/full/events', again.url)).body;
      assert.equal(live.events.map((e: Json) => e.seq), acknowledged);
    } finally {
      await again.stop();
    }
  } finally {
    limited.kill();
  }
});

test('an OTLP export whose write fails (503) stores nothing of itself, though it is written in many entries', async () => {
  const limited = await startSizeLimitedServe(path('full-otlp'), 2048);
  try {
    // 600 spans of 5 kB in one trace: about 3 MB of log, in entries of 256 records, past the 2 MiB limit.
    const spans = Array.from({ length: 600 }, (_, i) => otlpSpan(i, [{ key: 'gen_ai.conversation.id', value: { stringValue: 'cut' } }, { key: 'blob', value: { stringValue: 'z'.repeat(5000) } }]));
    const answer = await post(new URL('/v1/traces', limited.gatewayUrl).href, otlpExport(spans));
    assertGatewayError(answer, 503, 'append_failed', 'an export past the file size limit');
    assert.is((await get('/api/gateway/traces/otel/cut', limited.url)).status, 404, 'nothing of the export is stored');
    // A smaller export is taken afterwards: the failed write was cut off the log.
    assert.is((await post(new URL('/v1/traces', limited.gatewayUrl).href, otlpExport(spans.slice(0, 10)))).status, 200);
    assert.is((await get('/api/gateway/traces/otel/cut', limited.url)).body.trace.events, 10);
  } finally {
    await limited.stop();
  }
});

test('the gateway keeps its state in the dataset directory by default', async () => {
  assert.ok(statSync(join(dataset, 'gateway', 'events')).isDirectory());
  assert.ok(readdirSync(join(dataset, 'gateway', 'events')).some((n) => n.startsWith('segment-')));
});

test.run();
