/**
 * The capture gateway against hostile or broken peers, each case a real `trajstore serve
 * --gateway-config` and an upstream this test runs on 127.0.0.1: an upstream answering an invalid
 * status, a 101, nothing at all, or part of a stream and then nothing; request targets that would
 * reach another upstream path; requests that are not valid HTTP; another site's page posting text
 * or JSON; client keys that are JSON words; credentials echoed across the debug log's cut, in the
 * user's text and in the query; a stream far past the capture's bound, and one that never sends a
 * blank line; a request, an answer and a stream event nested 100,000 levels deep; a model name
 * past its bound; a call cut by SIGTERM; a session index of the wrong shape; an `agent_id` that
 * escapes its directory; a client that half-closes after its request.
 */
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { rawRequest } from '../../lib/testing/host-header.js';
import { runTool } from '../../lib/testing/run-tool.js';
import { startServeProcess, type ServeProcess } from '../../bench/lib/serve-process.js';
import { MAX_KEPT_BYTES } from '../serve/capture/response.js';
import { MARKDOWN_TURN_CHARS } from '../serve/capture/state.js';
import { eventually, type Json } from './helpers/gateway.js';
import { sandbox } from './helpers/sandbox.js';

const { home, env: baseEnv, path } = sandbox('gateway-capture-hostile-');
const ROUTE_KEY = 'rk-9f8e7d6c5b4a39281706';
const CLIENT_KEY = 'ck-5e4d3c2b1a09f8e7d6c5';
const QUERY_KEY = 'AIzaQueryKey0123456789';
const env = { ...baseEnv, ROUTE_KEY };
const AGENT = 'hostile';
/** JSON nested 100,000 levels deep. */
const DEEP = `${'['.repeat(100_000)}${']'.repeat(100_000)}`;

/** What the upstream saw: each request's path. */
const paths: string[] = [];
/** The headers the upstream got, for the models that ask to be seen (`hop-headers`). */
const seenHeaders: IncomingHttpHeaders[] = [];
/** Bytes of each streamed answer the upstream sent, by model. */
const streamedBytes = new Map<string, number>();
let upstream: Server;
let upstreamBase: string;
let server: ServeProcess;

const sse = (content: string): string => `data: ${JSON.stringify({ id: 's', object: 'chat.completion.chunk', model: 'm', choices: [{ index: 0, delta: { content } }] })}\n\n`;

/** Writes `pieces` pieces made by `piece`, minding back-pressure; the bytes sent. */
async function pour(res: ServerResponse, pieces: number, piece: (i: number) => string): Promise<number> {
  let sent = 0;
  for (let i = 0; i < pieces && !res.destroyed; i++) {
    const text = piece(i);
    sent += Buffer.byteLength(text);
    if (!res.write(text)) await new Promise((resolve) => res.once('drain', resolve));
  }
  return sent;
}

/** The answer to a JSON chat completion whose content is `content`. */
const completion = (content: string): Json => ({ id: 'c1', object: 'chat.completion', model: 'echo-long', choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }] });

/** An upstream whose behaviour is the request's model. */
function startUpstream(): Promise<string> {
  upstream = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      paths.push(req.url ?? '');
      const model = String((JSON.parse(Buffer.concat(parts).toString('utf8')) as Json).model);
      const raw: Record<string, string> = {
        'status-000': 'HTTP/1.1 000 Weird\r\nContent-Length: 2\r\n\r\n{}',
        'status-099': 'HTTP/1.1 099 Weird\r\nContent-Length: 2\r\n\r\n{}',
        'status-101': 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: foo\r\nConnection: upgrade\r\n\r\n',
      };
      if (raw[model] !== undefined) {
        req.socket.end(raw[model]);
        return;
      }
      if (model === 'hang') return;
      if (model === 'hang-after-headers' || model === 'drip') {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(sse('partial '));
        if (model === 'drip') {
          const timer = setInterval(() => (res.destroyed ? clearInterval(timer) : res.write(sse('more '))), 300);
        }
        return;
      }
      if (model === 'echo-long') {
        // The route's key echoed so that it spans the debug log's 2 KiB cut of the answer as the gateway writes it.
        const at = JSON.stringify(completion('')).indexOf('"content":"') + '"content":"'.length;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(completion(`${'x'.repeat(2048 - 10 - at)}${ROUTE_KEY} tail`)));
        return;
      }
      if (model === 'deep-answer' || model === 'deep-stream') {
        // Far deeper than any record can be written: a recursive walk of it runs out of stack.
        if (model === 'deep-answer') {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify(completion('deep')).replace(/}$/, `,"extra":${DEEP}}`));
        } else {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.end(`${sse('deep ')}data: {"choices":[],"usage":${DEEP.replace('[', '{"a":[').replace(/]$/, ']}')}}\n\n${sse('end')}data: [DONE]\n\n`);
        }
        return;
      }
      if (model === 'huge-stream' || model === 'no-blank-line') {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const huge = model === 'huge-stream';
        const text = 'y'.repeat(64 * 1024);
        // Past the bound by a few MiB; or 40 MiB of data lines that never end their event.
        const pieces = huge ? Math.ceil((MAX_KEPT_BYTES + 4 * 1024 * 1024) / text.length) : 40 * 16;
        void pour(res, pieces, () => (huge ? sse(text) : `data: ${text}\n`)).then((sent) => {
          res.end(huge ? 'data: [DONE]\n\n' : '\n');
          streamedBytes.set(model, sent + (huge ? 14 : 1));
        });
        return;
      }
      if (model === 'hop-headers') {
        seenHeaders.push(req.headers);
        res.writeHead(200, { 'content-type': 'application/json', connection: 'x-upstream-hop', 'x-upstream-hop': 'for the proxy only', 'x-upstream-end': 'for the client' });
        return res.end(JSON.stringify(completion(`hello from ${model}`)));
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(completion(`hello from ${model}`)));
    });
  });
  return new Promise((resolve) => upstream.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(upstream.address() as AddressInfo).port}`)));
}

function config(extra = ''): string {
  return `listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
agent_id = "${AGENT}"
${extra}
[[models]]
name = "*"
upstream = "${upstreamBase}/v1"
upstream_anthropic = "${upstreamBase}"
api_key_env = "ROUTE_KEY"
`;
}

/** A serve process with the gateway configured by `extra`; its traces are projected after `idle` of quiet. */
async function start(name: string, extra = '', idle = '1h'): Promise<ServeProcess> {
  writeFileSync(path(`${name}.toml`), config(extra));
  return startServeProcess(['--log-level', 'info', 'serve', '--listen', '127.0.0.1:0', '--gateway-config', path(`${name}.toml`), '--gateway-dataset', path(`${name}-ds`), '--gateway-state', path(`${name}-state`), '--gateway-split-idle', idle, '--gateway-stream-markdown', '--gateway-debug'], { env, cwd: home });
}

/** A call through the gateway `at`: JSON headers unless `headers` says otherwise. */
function call(at: ServeProcess, session: string, model: string, options: { path?: string; headers?: Record<string, string>; content?: string; stream?: boolean; signal?: AbortSignal; metadata?: string } = {}): Promise<Response> {
  const body = JSON.stringify({ model, max_tokens: 8, stream: options.stream ?? false, messages: [{ role: 'user', content: options.content ?? 'hi' }] });
  return fetch(new URL(options.path ?? '/v1/chat/completions', at.captureUrl), {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${CLIENT_KEY}`, 'x-trajstore-session-id': session, ...options.headers },
    // `metadata`: JSON text of a field the request carries as it is.
    body: options.metadata === undefined ? body : body.replace(/}$/, `,"metadata":${options.metadata}}`),
    ...(options.signal ? { signal: options.signal } : {}),
  });
}

async function events(at: ServeProcess, session: string, count: number, timeoutMs = 10_000): Promise<Json[]> {
  return eventually(async () => {
    const r = (await (await fetch(new URL(`/api/gateway/traces/${AGENT}/${session}/events`, at.url))).json()) as Json;
    assert.is(r.events?.length, count, JSON.stringify(r).slice(0, 300));
    return r.events as Json[];
  }, `${count} events of ${session}`, timeoutMs);
}

test.before(async () => {
  upstreamBase = await startUpstream();
  server = await start('main');
});

test.after(async () => {
  await server?.stop();
  await new Promise((resolve) => upstream?.close(resolve));
});

test('request targets: only the routed path (and its query) reaches the upstream, whatever the target says', async () => {
  const port = Number(new URL(server.captureUrl as string).port);
  const body = JSON.stringify({ model: 'plain', messages: [{ role: 'user', content: 'hi' }] });
  const head = (target: string): string => `POST ${target} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n`;
  const before = paths.length;
  for (const target of ['/v1/chat/completions#/../../fine_tuning/jobs', '/v1/chat/completions?x=1#/../../files', '/v1/chat/completions/../../x', '/%2e%2e/v1/chat/completions', '/v1/%2e%2e/v1/chat/completions', '/v1/chat%2fcompletions', '/v1/chat/complet%69ons', `http://127.0.0.1:${port}/v1/chat/completions`, '/v1/chat/completions;/../../files']) {
    const r = await rawRequest(port, head(target), body);
    assert.ok(r.status === 400 || r.status === 404, `${target}: ${r.text.slice(0, 300)}`);
    assert.match(r.text, /"type":"invalid_request_error"/, target);
  }
  assert.equal(paths.slice(before), [], 'nothing reached the upstream');
  const good = await rawRequest(port, head('/v1/chat/completions?api-version=2024-06-01'), body);
  assert.is(good.status, 200, good.text);
  const messages = await rawRequest(port, head('/chat/completions'), body);
  assert.is(messages.status, 200, messages.text);
  assert.equal(paths.slice(before), ['/v1/chat/completions?api-version=2024-06-01', '/v1/chat/completions']);
});

test('requests that are not valid HTTP (smuggling shapes, no or two Host headers, bad percent-encoding) get a 400 in the listener\'s error shape, and nothing goes upstream', async () => {
  const before = paths.length;
  const body = JSON.stringify({ model: 'plain', messages: [] });
  const post = (headers: string): string => `POST /v1/chat/completions HTTP/1.1\r\n${headers}Content-Type: application/json\r\nConnection: close\r\n\r\n`;
  const listeners = [
    // The proxy answers in OpenAI's shape (what its 404 uses), the admin listener as the event gateway.
    { url: server.captureUrl as string, shape: /^\{"error":\{"message":"[^"]+","type":"invalid_request_error","code":null\}\}$/ },
    { url: server.captureAdminUrl as string, shape: /^\{"error":"bad_request","message":"[^"]+"\}$/ },
  ];
  for (const { url, shape } of listeners) {
    const port = Number(new URL(url).port);
    const cases: Array<[string, string, RegExp]> = [
      ['Content-Length and Transfer-Encoding', post(`Host: 127.0.0.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n`) + `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`, /not valid HTTP/],
      ['two Content-Lengths', post(`Host: 127.0.0.1\r\nContent-Length: ${body.length}\r\nContent-Length: 4\r\n`) + body, /not valid HTTP/],
      ['no Host header', post(`Content-Length: ${body.length}\r\n`) + body, /no Host header/],
      ['two Host headers', post(`Host: 127.0.0.1\r\nHost: 127.0.0.1\r\nContent-Length: ${body.length}\r\n`) + body, /2 Host headers/],
      ['bad percent-encoding', 'GET /v1/%zz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n', /percent-encoding/],
    ];
    for (const [what, request, message] of cases) {
      const r = await rawRequest(port, request);
      assert.is(r.status, 400, `${url} ${what}: ${r.text}`);
      const answer = r.text.slice(r.text.indexOf('\r\n\r\n') + 4);
      assert.match(answer, shape, `${url} ${what}`);
      assert.match(answer, message, `${url} ${what}`);
    }
  }
  assert.is(paths.length, before, 'nothing reached the upstream');
});

test('headers the Connection header names are hop-by-hop (RFC 9110 7.6.1): dropped on the way up and on the way back, the others passed', async () => {
  const port = Number(new URL(server.captureUrl as string).port);
  const body = JSON.stringify({ model: 'hop-headers', messages: [{ role: 'user', content: 'hi' }] });
  const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nAuthorization: Bearer ${CLIENT_KEY}\r\nX-Client-Hop: for the gateway only\r\nX-Client-End: for the upstream\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close, X-Client-Hop\r\n\r\n`;
  const r = await rawRequest(port, head, body);
  assert.is(r.status, 200, r.text);
  const seen = seenHeaders.at(-1)!;
  assert.is(seen['x-client-hop'], undefined, 'a header the client\'s Connection names stops at the gateway');
  assert.is(seen['x-client-end'], 'for the upstream');
  const answerHead = r.text.slice(0, r.text.indexOf('\r\n\r\n')).toLowerCase();
  assert.not.match(answerHead, 'x-upstream-hop', 'a header the upstream\'s Connection names stops at the gateway');
  assert.match(answerHead, 'x-upstream-end: for the client');
});

test('another site\'s page cannot post: a body that is not JSON is 415, an Origin not of this machine or Sec-Fetch-Site cross-site is 403', async () => {
  const before = paths.length;
  const expect = async (r: Response, status: number, type: string): Promise<void> => {
    assert.is(r.status, status, await r.clone().text());
    assert.is(((await r.json()) as Json).error.type, type);
  };
  await expect(await call(server, 'web', 'plain', { headers: { 'content-type': 'text/plain;charset=UTF-8' } }), 415, 'invalid_request_error');
  await expect(await call(server, 'web', 'plain', { headers: { 'content-type': 'application/x-www-form-urlencoded' } }), 415, 'invalid_request_error');
  await expect(await call(server, 'web', 'plain', { path: '/v1/messages', headers: { 'content-type': 'text/plain' } }), 415, 'invalid_request_error');
  await expect(await call(server, 'web', 'plain', { headers: { origin: 'https://evil.example' } }), 403, 'permission_error');
  await expect(await call(server, 'web', 'plain', { headers: { origin: 'null' } }), 403, 'permission_error');
  await expect(await call(server, 'web', 'plain', { headers: { origin: 'http://127.0.0.1.evil.example' } }), 403, 'permission_error');
  await expect(await call(server, 'web', 'plain', { headers: { 'sec-fetch-site': 'cross-site' } }), 403, 'permission_error');
  assert.is(paths.length, before, 'nothing reached the upstream');
  // This machine's pages and programs: JSON with parameters, loopback origins.
  for (const headers of [{ 'content-type': 'application/json; charset=utf-8' }, { origin: 'http://localhost:5173', 'sec-fetch-site': 'same-origin' }, { origin: 'http://[::1]:8080' }, { origin: 'https://127.0.0.1' }] as Array<Record<string, string>>) {
    const r = await call(server, 'web', 'plain', { headers });
    assert.is(r.status, 200, JSON.stringify(headers));
  }
});

test('client keys that are JSON words or common words: every call is recorded, in the trace its session names', async () => {
  for (const key of ['false', 'role', 'user']) {
    const r = await call(server, `key-${key}`, 'plain', { headers: { authorization: `Bearer ${key}` }, content: `the ${key} of it` });
    assert.is(r.status, 200);
    const recorded = await events(server, `key-${key}`, 2, 5_000);
    assert.equal(recorded.map((e) => [e.kind, e.session_id, e.agent_id]), [['llm.request', `key-${key}`, AGENT], ['llm.response', `key-${key}`, AGENT]]);
    assert.is(recorded[0]?.payload.stream, false);
    assert.is(recorded[0]?.payload.user_content, 'the *** of it');
  }
});

test('no credential in the state files or the log: echoed across the debug log\'s cut, the client\'s own in its text, a key in the query', async () => {
  const r = await call(server, 'leaks', 'echo-long', { content: `my key is ${CLIENT_KEY}` });
  assert.is(r.status, 200);
  const q = await fetch(new URL(`/v1/chat/completions?key=${QUERY_KEY}&api-version=1`, server.captureUrl), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'plain', messages: [] }) });
  assert.is(q.status, 200);
  await events(server, 'leaks', 2);
  const capture = path('main-state', 'gateway', 'capture');
  const debug = await eventually(async () => {
    const text = readFileSync(join(capture, 'debug.log'), 'utf8');
    assert.match(text, /"session_id":"leaks"/);
    return text;
  }, 'the debug line');
  const markdown = readFileSync(join(capture, 'markdown', AGENT, 'leaks.md'), 'utf8');
  assert.match(markdown, /my key is \*\*\*/);
  for (const [name, text] of [['debug.log', debug], ['leaks.md', markdown], ['the log', server.stderr()]] as const) {
    assert.not.ok(text.includes(ROUTE_KEY.slice(0, 8)), `a piece of the route key in ${name}`);
    assert.not.ok(text.includes(CLIENT_KEY), `the client key in ${name}`);
    assert.not.ok(text.includes(QUERY_KEY), `the query key in ${name}`);
  }
  assert.match(server.stderr(), /\?key=\*\*\*&api-version=1/);
});

test('a stream past the capture\'s bound: the client gets every byte, the capture keeps the bound and says it was cut', async () => {
  const r = await call(server, 'huge', 'huge-stream', { stream: true });
  const got = (await r.arrayBuffer()).byteLength;
  assert.is(got, streamedBytes.get('huge-stream'));
  const [, answer] = (await events(server, 'huge', 2, 60_000)) as [Json, Json];
  assert.is(answer.kind, 'llm.response.stream');
  assert.is(answer.payload.truncated, true);
  assert.ok(answer.payload.assistant_content.length <= MAX_KEPT_BYTES);
  assert.ok(answer.payload.assistant_content.length > MAX_KEPT_BYTES / 2);
  const markdown = statSync(path('main-state', 'gateway', 'capture', 'markdown', AGENT, 'huge.md')).size;
  assert.ok(markdown < MARKDOWN_TURN_CHARS * 2, `${markdown} bytes of Markdown`);
});

test('a capture at the bound is written into the dataset, and the traces after it too', async () => {
  const projecting = await start('projecting', '', '300ms');
  try {
    await (await call(projecting, 'huge', 'huge-stream', { stream: true })).arrayBuffer();
    await (await call(projecting, 'small', 'small')).arrayBuffer();
    for (const session of ['huge', 'small']) {
      await eventually(async () => {
        const { trace } = (await (await fetch(new URL(`/api/gateway/traces/${AGENT}/${session}`, projecting.url))).json()) as { trace: Json };
        assert.is(trace.projected_events, 2, JSON.stringify(trace));
      }, `${session} projected`, 60_000);
    }
    assert.not.match(projecting.stderr(), /projecting .* failed/);
  } finally {
    await projecting.stop();
  }
});

test('a stream that never ends its event (no blank line) passes in linear time and is recorded', async () => {
  // Generous: linear reading takes a second or two; the quadratic one took half a minute.
  const r = await call(server, 'no-blank', 'no-blank-line', { stream: true, signal: AbortSignal.timeout(15_000) });
  assert.is((await r.arrayBuffer()).byteLength, streamedBytes.get('no-blank-line'));
  const [, answer] = (await events(server, 'no-blank', 2)) as [Json, Json];
  assert.equal([answer.kind, answer.payload.status, answer.payload.truncated], ['llm.response.stream', 200, true]);
});

test('bodies nested too deep to record: a request is a 400 (nothing goes upstream); an answer or a stream event reaches the client whole and is recorded without it', async () => {
  const before = paths.length;
  const deepRequest = await call(server, 'deep', 'plain', { metadata: DEEP });
  assert.is(deepRequest.status, 400);
  assert.match(((await deepRequest.json()) as Json).error.message, /deeper than 512 levels/);
  assert.is(paths.length, before, 'nothing reached the upstream');
  const deepAnswer = await call(server, 'deep', 'deep-answer');
  assert.is(deepAnswer.status, 200);
  assert.ok((await deepAnswer.text()).endsWith(`${']'.repeat(100)}}`));
  const deepStream = await call(server, 'deep', 'deep-stream', { stream: true });
  assert.match(await deepStream.text(), /\[DONE]/);
  const recorded = await events(server, 'deep', 4);
  assert.equal(
    recorded.map((e) => [e.kind, e.payload.status, e.payload.truncated]),
    [['llm.request', undefined, undefined], ['llm.response', 200, true], ['llm.request', undefined, undefined], ['llm.response.stream', 200, true]],
  );
  // The stream's events around the one too deep are read.
  assert.is(recorded[3]?.payload.assistant_content, 'deep end');
  assert.not.match(server.stderr(), /could not be recorded/);
});

test('upstream_timeout: an upstream silent before its answer is a 504, one silent mid-stream ends the stream; both recorded', async () => {
  const quick = await start('timeout', 'upstream_timeout = 1');
  try {
    const hang = await call(quick, 'silent', 'hang', { signal: AbortSignal.timeout(20_000) });
    assert.is(hang.status, 504);
    assert.is(((await hang.json()) as Json).error.type, 'upstream_timeout');
    const partial = await call(quick, 'silent', 'hang-after-headers', { stream: true, signal: AbortSignal.timeout(20_000) });
    assert.is(partial.status, 200);
    const text = await partial.text().catch((error: Error) => `cut: ${error.message}`);
    assert.not.match(text, /TimeoutError|aborted/, 'the stream ended before the client gave up');
    const recorded = (await events(quick, 'silent', 4)).filter((e) => e.kind !== 'llm.request');
    assert.equal(recorded.map((e) => [e.kind, e.payload.status, e.payload.error.type]), [['llm.response', 504, 'upstream_timeout'], ['llm.response.stream', 200, 'upstream_timeout']]);
  } finally {
    await quick.stop();
  }
  writeFileSync(path('bad-timeout.toml'), config('upstream_timeout = -1'));
  const bad = await runTool('trajstore', ['serve', '--listen', '127.0.0.1:0', '--gateway-config', path('bad-timeout.toml'), '--gateway-dataset', path('never')], { env, cwd: home });
  assert.is(bad.code, 2, bad.stderr);
  assert.match(bad.stderr, /bad-timeout\.toml:4: `upstream_timeout`/);
});

test('SIGTERM: a stream still running after the grace is cut and recorded before the event log closes', async () => {
  const once = await start('sigterm');
  const r = await call(once, 'cut', 'drip', { stream: true });
  const reader = (r.body as ReadableStream<Uint8Array>).getReader();
  await reader.read();
  assert.is(await once.stop(), 0);
  await reader.read().catch(() => undefined);
  assert.not.match(once.stderr(), /could not be recorded/);
  const again = await start('sigterm');
  try {
    const recorded = await events(again, 'cut', 2);
    assert.equal(recorded.map((e) => e.kind), ['llm.request', 'http.cancel']);
    assert.match(recorded[1]?.payload.reason, /gateway stopped/);
  } finally {
    await again.stop();
  }
});

test('a model name past 256 characters is a 400 (nothing goes upstream, nothing is recorded): each call would copy it into the log, the debug log and the session index', async () => {
  const before = paths.length;
  const long = await call(server, 'long-model', `m-${'x'.repeat(255)}`);
  assert.is(long.status, 400);
  assert.match(((await long.json()) as Json).error.message, /the model name is 257 characters; at most 256/);
  assert.is(paths.length, before, 'nothing reached the upstream');
  const longest = await call(server, 'long-model', `m${'x'.repeat(255)}`);
  assert.is(longest.status, 200);
  const recorded = await events(server, 'long-model', 2);
  assert.is(recorded[0]?.payload.model.length, 256);
});

test('a session index of the wrong shape: the entries that are sessions are kept, the rest dropped with a warning; /admin/sessions answers', async () => {
  const index = path('index-state', 'gateway', 'capture', 'sessions.json');
  mkdirSync(dirname(index), { recursive: true });
  const old = { agent_id: AGENT, session_id: 'old', calls: 2, errors: 0, models: ['m'], first_call_at: '2026-01-01T00:00:00.000Z', last_call_at: '2026-01-01T00:00:00.000Z' };
  writeFileSync(index, JSON.stringify({ sessions: [{ agent_id: 'a' }, null, { ...old, calls: 'two' }, old] }));
  const indexed = await start('index');
  try {
    assert.match(indexed.stderr(), /sessions\.json: 3 entries that are not sessions are dropped/);
    assert.is((await call(indexed, 'new', 'plain')).status, 200);
    await eventually(async () => {
      const r = await fetch(new URL('/admin/sessions', indexed.captureAdminUrl));
      assert.is(r.status, 200);
      assert.equal(((await r.json()) as Json).sessions.map((s: Json) => [s.session_id, s.calls]), [['new', 1], ['old', 2]]);
    }, 'the session index');
  } finally {
    await indexed.stop();
  }
  assert.equal((JSON.parse(readFileSync(index, 'utf8')) as Json).sessions.map((s: Json) => s.session_id), ['new', 'old']);
});

test('agent_id must be one path-safe segment: exit 2 naming the file, line and key', async () => {
  for (const id of ['../../escaped', 'team/bot', '..', 'a\\u0007b']) {
    writeFileSync(path('bad-agent.toml'), config().replace(`agent_id = "${AGENT}"`, `agent_id = "${id}"`));
    const r = await runTool('trajstore', ['serve', '--listen', '127.0.0.1:0', '--gateway-config', path('bad-agent.toml'), '--gateway-dataset', path('never')], { env, cwd: home });
    assert.is(r.code, 2, `${id}: ${r.stderr}`);
    assert.match(r.stderr, /bad-agent\.toml:3: `agent_id` must be one path-safe segment/);
  }
  assert.not.ok(existsSync(path('never')));
});

test('a client that half-closes after sending its request still gets its answer', async () => {
  const port = Number(new URL(server.captureUrl as string).port);
  const body = JSON.stringify({ model: 'plain', messages: [{ role: 'user', content: 'half' }] });
  const answer = await new Promise<string>((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.end(`POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nx-trajstore-session-id: half\r\n\r\n${body}`));
    let text = '';
    socket.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
    socket.on('error', reject);
    socket.on('close', () => resolve(text));
    socket.setTimeout(20_000, () => socket.destroy());
  });
  assert.match(answer, /^HTTP\/1\.1 200/);
  assert.match(answer, /hello from plain/);
  const recorded = await events(server, 'half', 2);
  assert.is(recorded[1]?.kind, 'llm.response');
});

test('an upstream answering a status outside 200-599, or 101, gets the client a 502 in its protocol, recorded; the server goes on', async () => {
  for (const model of ['status-000', 'status-099', 'status-101']) {
    const r = await call(server, 'bad-status', model, { signal: AbortSignal.timeout(20_000) });
    assert.is(r.status, 502, model);
    const body = (await r.json()) as Json;
    assert.is(body.error.type, 'upstream_invalid', model);
    assert.match(body.error.message, model === 'status-101' ? /101/ : /invalid status/);
  }
  const anthropic = await call(server, 'bad-status', 'status-000', { path: '/v1/messages', signal: AbortSignal.timeout(20_000) });
  assert.is(anthropic.status, 502);
  const body = (await anthropic.json()) as Json;
  assert.equal([body.type, body.error.type], ['error', 'api_error']);
  const recorded = (await events(server, 'bad-status', 8)).filter((e) => e.kind === 'llm.response');
  assert.equal(recorded.map((e) => [e.payload.status, e.payload.error.type]), Array(4).fill([502, 'upstream_invalid']));
  const status = (await (await fetch(new URL('/admin/status', server.captureAdminUrl))).json()) as Json;
  assert.ok(status.calls.upstream_errors >= 4);
  assert.is(status.calls.in_flight, 0);
});

test.run();
