/**
 * The LLM capture gateway of `trajstore serve --gateway-config` with the official `openai` client
 * (plain and streamed chat completions) and plain fetch (Anthropic messages), forwarding to an
 * upstream this test starts: the upstream sees the route's credential and never the client's, the
 * client gets exactly the bytes the upstream sent, a forward route rewrites the model, upstream
 * errors and redirects come back as they are, an unreachable upstream is a 502; the captured calls
 * are in the live endpoints at once and, once projected, in `find`, `query` and the read-only API;
 * no credential reaches the dataset, the state directory or the log; the admin listener, the
 * debug log and the Markdown sessions; SIGTERM records the calls that ended; configuration errors
 * exit 2 naming the key.
 */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import OpenAI from 'openai';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { rawRequest, requestWithHost } from '../../lib/testing/host-header.js';
import { startServeProcess, type ServeProcess } from '../../bench/lib/serve-process.js';
import { upstreamUrl } from '../serve/capture/proxy.js';
import { runTool } from '../../lib/testing/run-tool.js';
import { eventually, type Json } from './helpers/gateway.js';
import { sandbox } from './helpers/sandbox.js';

const { home, env: baseEnv, run: trajstore, path } = sandbox('gateway-capture-');
const ROUTE_KEY = 'route-secret-7c1f09';
const ANTHROPIC_KEY = 'anthropic-route-secret-2b8e44';
const CLIENT_KEY = 'client-secret-d41d8c';
const env = { ...baseEnv, ROUTE_KEY, ANTHROPIC_ROUTE_KEY: ANTHROPIC_KEY };
const dataset = path('captured');
const state = path('state');

interface Seen {
  path: string;
  headers: IncomingHttpHeaders;
  body: Json;
  /** The bytes the upstream wrote. */
  sent: Buffer;
}
const seen: Seen[] = [];
let upstream: Server;
let upstreamBase: string;
let server: ServeProcess;

/** An OpenAI and Anthropic upstream: answers by model, streams when asked, and keeps what it saw and sent. */
function startUpstream(): Promise<string> {
  upstream = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(parts).toString('utf8')) as Json;
      const record: Seen = { path: req.url ?? '', headers: req.headers, body, sent: Buffer.alloc(0) };
      seen.push(record);
      const out: Buffer[] = [];
      const write = (text: string): void => {
        out.push(Buffer.from(text));
        res.write(text);
      };
      const end = (): void => {
        res.end();
        record.sent = Buffer.concat(out);
      };
      const model = String(body.model);
      if (model.endsWith('-fail')) {
        res.writeHead(429, { 'content-type': 'application/json', 'x-upstream': 'yes' });
        write(JSON.stringify({ error: { message: `rate limited for ${req.headers.authorization ?? req.headers['x-api-key']}`, type: 'rate_limit_error' } }));
        return end();
      }
      if (model.endsWith('-html-error')) {
        // What a load balancer in front of an API answers: not JSON.
        res.writeHead(502, { 'content-type': 'text/html' });
        write(`<html><body>502 Bad Gateway (key ${req.headers.authorization ?? ''})</body></html>`);
        return end();
      }
      if (model.endsWith('-redirect')) {
        res.writeHead(307, { location: 'http://127.0.0.1:9/elsewhere', 'content-type': 'application/json' });
        write('{}');
        return end();
      }
      if (model.endsWith('-slow')) {
        // A chunk every 100 ms, for a client that leaves part-way.
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        let n = 0;
        const timer = setInterval(() => {
          if (res.destroyed || n === 20) {
            clearInterval(timer);
            if (!res.destroyed) end();
            return;
          }
          write(`data: ${JSON.stringify({ id: 'slow', object: 'chat.completion.chunk', model, choices: [{ index: 0, delta: { content: `w${n++} ` }, finish_reason: null }] })}\n\n`);
        }, 100);
        return;
      }
      const anthropic = req.url?.startsWith('/v1/messages') ?? false;
      const words = ['The', ' lighthouse', ' is', ' on', ' the', ' cliff.'];
      if (!body.stream) {
        res.writeHead(200, { 'content-type': 'application/json' });
        write(
          JSON.stringify(
            anthropic
              ? { id: 'msg_1', type: 'message', role: 'assistant', model, content: [{ type: 'text', text: words.join('') }], stop_reason: 'end_turn', usage: { input_tokens: 11, output_tokens: 6, cache_read_input_tokens: 4 } }
              : { id: 'cmpl-1', object: 'chat.completion', created: 1, model, choices: [{ index: 0, message: { role: 'assistant', content: words.join('') }, finish_reason: 'stop' }], usage: { prompt_tokens: 12, completion_tokens: 6, total_tokens: 18 } },
          ),
        );
        return end();
      }
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      if (anthropic) {
        write(`event: message_start\ndata: ${JSON.stringify({ type: 'message_start', message: { id: 'msg_2', type: 'message', role: 'assistant', model, content: [], usage: { input_tokens: 9, output_tokens: 1 } } })}\n\n`);
        write(`event: content_block_start\ndata: ${JSON.stringify({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } })}\n\n`);
        for (const w of words) write(`event: content_block_delta\ndata: ${JSON.stringify({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: w } })}\n\n`);
        write(`event: content_block_start\ndata: ${JSON.stringify({ type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: 'toolu_1', name: 'look', input: {} } })}\n\n`);
        write(`event: content_block_delta\ndata: ${JSON.stringify({ type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '{"at": "sea"}' } })}\n\n`);
        write(`event: message_delta\ndata: ${JSON.stringify({ type: 'message_delta', delta: { stop_reason: 'tool_use' }, usage: { output_tokens: 8 } })}\n\n`);
        write(`event: message_stop\ndata: {"type":"message_stop"}\n\n`);
        return end();
      }
      words.forEach((w, i) => write(`data: ${JSON.stringify({ id: 'cmpl-2', object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta: i === 0 ? { role: 'assistant', content: w } : { content: w }, finish_reason: null }] })}\n\n`));
      write(`data: ${JSON.stringify({ id: 'cmpl-2', object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], usage: { prompt_tokens: 15, completion_tokens: 6, total_tokens: 21 } })}\n\n`);
      write('data: [DONE]\n\n');
      end();
    });
  });
  return new Promise((resolve) => upstream.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(upstream.address() as AddressInfo).port}`)));
}

function config(extra = ''): string {
  return `listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
agent_id = "capture-test"
capture_level = "dialogue"
${extra}
[[models]]
name = "alias"
forward = "real-model"

[[models]]
name = "real-model"
upstream = "${upstreamBase}/v1"
api_key_env = "ROUTE_KEY"

[[models]]
name = "real-*"
upstream = "${upstreamBase}/v1"
upstream_anthropic = "${upstreamBase}"
api_key_env = "ROUTE_KEY"

[[models]]
name = "claude-*"
provider = "anthropic"
upstream = "${upstreamBase}"
api_key_env = "ANTHROPIC_ROUTE_KEY"

[[models]]
name = "down-*"
upstream = "http://127.0.0.1:1/v1"
`;
}

const client = (session: string): OpenAI => new OpenAI({ apiKey: CLIENT_KEY, baseURL: new URL('/v1', server.captureUrl).href, defaultHeaders: { 'x-trajstore-session-id': session }, maxRetries: 0 });
async function get(base: string, p: string): Promise<{ status: number; body: Json }> {
  const response = await fetch(new URL(p, base));
  return { status: response.status, body: (await response.json()) as Json };
}
const lastSeen = (): Seen => seen.at(-1) as Seen;

test.before(async () => {
  upstreamBase = await startUpstream();
  writeFileSync(path('capture.toml'), config());
  server = await startServeProcess(['--log-level', 'info', 'serve', '--listen', '127.0.0.1:0', '--gateway-config', path('capture.toml'), '--gateway-dataset', dataset, '--gateway-state', state, '--gateway-split-idle', '400ms', '--gateway-stream-markdown', '--gateway-debug'], { env, cwd: home });
});

test.after(async () => {
  await server?.stop();
  await new Promise((resolve) => upstream?.close(resolve));
});

test('another site\'s page (a Host that is not loopback) cannot spend the route credential or read the admin listener', async () => {
  const before = seen.length;
  const refused = await requestWithHost(new URL('/v1/chat/completions', server.captureUrl).href, 'attacker.example', 'POST', { model: 'real-model', messages: [{ role: 'user', content: 'rebound' }] });
  assert.is(refused.status, 403);
  assert.is(refused.body.error.type, 'permission_error');
  assert.is(seen.length, before, 'the upstream was never called');
  const admin = await requestWithHost(new URL('/admin/sessions', server.captureAdminUrl).href, 'attacker.example:9876');
  assert.is(admin.status, 403);
  assert.is(admin.body.error, 'forbidden');
});

test('every answer of the admin listener, errors too, is never a page: nosniff, and a policy that runs nothing and allows no framing', async () => {
  for (const path of ['/admin/status', '/admin/sessions', '/%3Cscript%3Ewindow.x=1%3C/script%3E']) {
    const answer = await fetch(new URL(path, server.captureAdminUrl));
    assert.is(answer.headers.get('x-content-type-options'), 'nosniff', path);
    assert.is(answer.headers.get('content-security-policy'), "default-src 'none'; frame-ancestors 'none'", path);
  }
  const refused = await rawRequest(Number(new URL(server.captureAdminUrl!).port), 'GET /admin/sessions HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n');
  assert.is(refused.status, 403);
  assert.match(refused.text.toLowerCase(), 'x-content-type-options: nosniff', 'the 403 too');
});

test('the upstream path: the base joined with the request path, an overlap taken once', () => {
  assert.is(upstreamUrl(new URL('http://h:1/v1'), '/v1/chat/completions').href, 'http://h:1/v1/chat/completions');
  assert.is(upstreamUrl(new URL('http://h:1/v1/'), '/v1/chat/completions?a=1&b=2').href, 'http://h:1/v1/chat/completions?a=1&b=2');
  assert.is(upstreamUrl(new URL('http://h:1/api/v1'), '/v1/messages').href, 'http://h:1/api/v1/messages');
  assert.is(upstreamUrl(new URL('http://h:1/openai'), '/v1/chat/completions').href, 'http://h:1/openai/v1/chat/completions');
  assert.is(upstreamUrl(new URL('http://h:1'), '/chat/completions').href, 'http://h:1/chat/completions');
});

test('openai client, plain: the answer comes through; the upstream sees the route credential, never the client one', async () => {
  const answer = await client('sess-1').chat.completions.create({ model: 'real-model', messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Where is the lighthouse?' }] });
  assert.is(answer.choices[0]?.message.content, 'The lighthouse is on the cliff.');
  assert.is(answer.usage?.prompt_tokens, 12);
  const upstreamSaw = lastSeen();
  assert.is(upstreamSaw.path, '/v1/chat/completions');
  assert.is(upstreamSaw.headers.authorization, `Bearer ${ROUTE_KEY}`);
  assert.not.ok(JSON.stringify(upstreamSaw.headers).includes(CLIENT_KEY));
  assert.is(upstreamSaw.headers['x-trajstore-session-id'], undefined);
  assert.is(upstreamSaw.body.model, 'real-model');
});

test('openai client, streamed: the chunks come through, and the bytes are the upstream\'s', async () => {
  const stream = await client('sess-1').chat.completions.create({ model: 'real-model', stream: true, messages: [{ role: 'user', content: 'And the harbour?' }] });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
  assert.is(text, 'The lighthouse is on the cliff.');
  // The same call with a plain client, byte for byte.
  const response = await fetch(new URL('/v1/chat/completions', server.captureUrl), { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${CLIENT_KEY}`, 'x-trajstore-session-id': 'sess-bytes' }, body: JSON.stringify({ model: 'real-model', stream: true, messages: [{ role: 'user', content: 'bytes' }] }) });
  const bytes = Buffer.from(await response.arrayBuffer());
  assert.is(response.headers.get('content-type'), 'text/event-stream');
  assert.ok(bytes.equals(lastSeen().sent), 'the client got exactly what the upstream sent');
});

test('a compressed request is read decoded, routed by its model and forwarded uncompressed; an unknown coding is 415', async () => {
  const call = (encoding: string, body: Buffer) =>
    fetch(new URL('/v1/chat/completions', server.captureUrl), { method: 'POST', headers: { 'content-type': 'application/json', 'content-encoding': encoding, authorization: `Bearer ${CLIENT_KEY}`, 'x-trajstore-session-id': 'sess-zipped' }, body: new Uint8Array(body) });
  const request = JSON.stringify({ model: 'alias', messages: [{ role: 'user', content: 'Compressed?' }] });
  const zipped = await call('gzip', gzipSync(request));
  assert.is(zipped.status, 200, await zipped.clone().text());
  assert.is(((await zipped.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]?.message.content, 'The lighthouse is on the cliff.');
  const upstreamSaw = lastSeen();
  assert.is(upstreamSaw.headers['content-encoding'], undefined);
  assert.equal([upstreamSaw.body.model, upstreamSaw.body.messages], ['real-model', [{ role: 'user', content: 'Compressed?' }]]);
  const unknown = await call('zstd', Buffer.from(request));
  assert.is(unknown.status, 415);
  assert.match(((await unknown.json()) as { error: { message: string } }).error.message, "Content-Encoding 'zstd' is not supported");
});

test('a forward route rewrites the model; the capture keeps both', async () => {
  const answer = await client('sess-2').chat.completions.create({ model: 'alias', messages: [{ role: 'user', content: 'Rewritten?' }] });
  assert.is(answer.choices[0]?.message.content, 'The lighthouse is on the cliff.');
  assert.is(lastSeen().body.model, 'real-model');
  const live = await eventually(async () => {
    const r = await get(server.url, '/api/gateway/traces/capture-test/sess-2/events');
    assert.is(r.body.events?.length, 2);
    return r.body.events as Json[];
  }, 'the captured call');
  const [request, response] = live as [Json, Json];
  assert.equal([request.kind, response.kind], ['llm.request', 'llm.response']);
  assert.is(request.call_id, response.call_id);
  assert.equal({ model: request.payload.model, sent: request.payload.model_sent, rewritten: request.payload.model_rewritten, user: request.payload.user_content }, { model: 'alias', sent: 'real-model', rewritten: true, user: 'Rewritten?' });
  assert.equal(response.payload.usage, { prompt_tokens: 12, completion_tokens: 6, total_tokens: 18 });
  assert.is(response.payload.status, 200);
  assert.ok(response.payload.timing.total_ms >= response.payload.timing.ttft_ms);
});

test('Anthropic messages by fetch, plain and streamed: x-api-key of the route, the answer as sent', async () => {
  const call = (stream: boolean) =>
    fetch(new URL('/v1/messages', server.captureUrl), {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': CLIENT_KEY, 'anthropic-version': '2023-06-01', 'x-trajstore-session-id': 'sess-3' },
      body: JSON.stringify({ model: 'claude-x', max_tokens: 64, stream, system: 'Be brief.', messages: [{ role: 'user', content: 'Is the lamp lit?' }] }),
    });
  const plain = await call(false);
  assert.is(plain.status, 200);
  assert.is(((await plain.json()) as Json).content[0].text, 'The lighthouse is on the cliff.');
  assert.is(lastSeen().path, '/v1/messages');
  assert.is(lastSeen().headers['x-api-key'], ANTHROPIC_KEY);
  assert.is(lastSeen().headers['anthropic-version'], '2023-06-01');
  assert.is(lastSeen().headers.authorization, undefined);
  const streamed = await call(true);
  const bytes = Buffer.from(await streamed.arrayBuffer());
  assert.ok(bytes.equals(lastSeen().sent));
  const events = await eventually(async () => {
    const r = await get(server.url, '/api/gateway/traces/capture-test/sess-3/events');
    assert.is(r.body.events?.length, 4);
    return r.body.events as Json[];
  }, 'the Anthropic calls');
  assert.equal(events.map((e) => e.kind), ['llm.request', 'llm.response', 'llm.request', 'llm.response.stream']);
  const stream = events[3] as Json;
  assert.is(stream.payload.assistant_content, 'The lighthouse is on the cliff.');
  assert.equal(stream.payload.tool_calls, [{ id: 'toolu_1', name: 'look', arguments: { at: 'sea' } }]);
  assert.equal(stream.payload.usage, { input_tokens: 9, output_tokens: 8 });
  assert.is(stream.payload.finish_reason, 'tool_use');
  const doc = (await get(server.url, '/api/gateway/traces/capture-test/sess-3/storyline')).body;
  assert.is(doc.prompt.system, 'Be brief.');
  assert.equal(doc.turns.map((t: Json) => t.src), ['user', 'agent', 'user', 'agent']);
});

test('upstream errors and redirects come back as they are and close the call; an unreachable upstream is a 502', async () => {
  const raw = (model: string) => fetch(new URL('/v1/chat/completions', server.captureUrl), { method: 'POST', redirect: 'manual', headers: { 'content-type': 'application/json', authorization: `Bearer ${CLIENT_KEY}`, 'x-trajstore-session-id': 'sess-4' }, body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }) });
  const failed = await raw('real-fail');
  assert.is(failed.status, 429);
  assert.is(failed.headers.get('x-upstream'), 'yes');
  assert.ok(Buffer.from(await failed.arrayBuffer()).equals(lastSeen().sent));
  const html = await raw('real-html-error');
  assert.is(html.status, 502);
  assert.ok(Buffer.from(await html.arrayBuffer()).equals(lastSeen().sent));
  const moved = await raw('real-redirect');
  assert.is(moved.status, 307);
  assert.is(moved.headers.get('location'), 'http://127.0.0.1:9/elsewhere');
  const down = await raw('down-1');
  assert.is(down.status, 502);
  assert.match(((await down.json()) as Json).error.message, /could not be reached/);
  const none = await raw('no-such-model');
  assert.is(none.status, 404);
  assert.match(((await none.json()) as Json).error.message, /no route/);
  const notJson = await fetch(new URL('/v1/chat/completions', server.captureUrl), { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{' });
  assert.is(notJson.status, 400);
  const events = await eventually(async () => {
    const r = await get(server.url, '/api/gateway/traces/capture-test/sess-4/events');
    assert.is(r.body.events?.length, 8);
    return r.body.events as Json[];
  }, 'the failed calls');
  assert.equal(events.filter((e) => e.kind !== 'llm.request').map((e) => e.payload.status), [429, 502, 307, 502]);
  // The upstream echoed the route's credential in its error: the capture has it scrubbed.
  assert.match(JSON.stringify(events[1]?.payload.error), /rate limited for Bearer \*\*\*/);
  // An error that is not JSON is kept as its text.
  assert.equal(events[3]?.payload.error, { type: 'upstream_error', body: '<html><body>502 Bad Gateway (key Bearer ***)</body></html>' });
});

test('captured calls show up in find, query and the read-only API after projection; no credential anywhere', async () => {
  await eventually(async () => {
    const r = await trajstore(['find', dataset, '--match', 'lighthouse', '--format', 'json']);
    assert.is(r.code, 0, r.stderr);
    const sessions = new Set((JSON.parse(r.stdout) as Json).matches.map((m: Json) => m.session_id));
    for (const s of ['sess-1', 'sess-2', 'sess-3']) assert.ok(sessions.has(s), `${s} in ${[...sessions].join(', ')}`);
  }, 'find after projection');
  const q = await trajstore(['query', dataset, '--sql', "SELECT session_id, step_count, prompt_tokens FROM dataset.runs WHERE agent_id = 'capture-test' AND session_id = 'sess-1'", '--format', 'json']);
  assert.is(q.code, 0, q.stderr);
  assert.equal(JSON.parse(q.stdout), [{ session_id: 'sess-1', step_count: 4, prompt_tokens: 27 }]);
  const runs = await eventually(async () => {
    const body = (await get(server.url, '/api/mounts/gateway/runs')).body;
    assert.ok(body.runs.some((r: Json) => r.session_id === 'sess-1'));
    return body;
  }, 'the API');
  const sess1 = runs.runs.find((r: Json) => r.session_id === 'sess-1');
  const steps = (await get(server.url, `/api/mounts/gateway/runs/${encodeURIComponent(sess1.document_id)}/steps`)).body;
  assert.equal(steps.steps.map((s: Json) => s.source), ['user', 'agent', 'user', 'agent']);

  // No credential in the dataset (SQL sees through compression), the state, or the log.
  for (const secret of [CLIENT_KEY, ROUTE_KEY, ANTHROPIC_KEY]) {
    const hits = await trajstore(['query', dataset, '--sql', `SELECT (SELECT count(*) FROM dataset.events WHERE record_json LIKE '%${secret}%') + (SELECT count(*) FROM dataset.steps WHERE message_json LIKE '%${secret}%' OR extra_json LIKE '%${secret}%') AS n`, '--format', 'json']);
    assert.equal(JSON.parse(hits.stdout), [{ n: 0 }], secret);
    assert.not.ok(server.stderr().includes(secret), `${secret} in the log`);
    for (const file of readdirSync(state, { recursive: true, withFileTypes: true }).filter((e) => e.isFile())) {
      // The server still writes its state: a temporary listed here may be renamed into place before it is read.
      const text = readIfThere(join(file.parentPath, file.name));
      assert.not.ok(text?.includes(secret), `${secret} in ${file.name}`);
    }
  }
});

function readIfThere(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

test('the admin listener, the debug log and the Markdown sessions in the state directory', async () => {
  const status = (await get(server.captureAdminUrl as string, '/admin/status')).body;
  assert.is(status.status, 'ok');
  assert.is(status.capture_level, 'dialogue');
  assert.ok(status.calls.total >= 8);
  assert.equal(status.routes.find((r: Json) => r.name === 'real-model').credential, '$ROUTE_KEY');
  assert.not.ok(JSON.stringify(status).includes(ROUTE_KEY));
  const sessions = await eventually(async () => {
    const body = (await get(server.captureAdminUrl as string, '/admin/sessions')).body;
    assert.ok(body.sessions.some((s: Json) => s.session_id === 'sess-4' && s.calls === 4 && s.errors === 3));
    return body.sessions as Json[];
  }, 'the session index');
  assert.ok(sessions.some((s) => s.session_id === 'sess-2' && s.models.includes('real-model')));
  const debug = readFileSync(join(state, 'gateway', 'capture', 'debug.log'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Json);
  assert.ok(debug.some((d) => d.session_id === 'sess-2' && d.model_requested === 'alias' && d.model_sent === 'real-model'));
  const markdown = readFileSync(join(state, 'gateway', 'capture', 'markdown', 'capture-test', 'sess-1.md'), 'utf8');
  assert.match(markdown, /Where is the lighthouse\?/);
  assert.match(markdown, /The lighthouse is on the cliff\./);
  // The index is written at most once a second after a change (state.ts): it may lag the admin listener.
  await eventually(async () => {
    const index = join(state, 'gateway', 'capture', 'sessions.json');
    assert.ok(existsSync(index) && JSON.parse(readFileSync(index, 'utf8')).sessions.length >= 4);
  }, 'the session index on disk');
});

test('a client that leaves part-way through a stream: the upstream call is cut and the capture says so', async () => {
  const abort = new AbortController();
  const response = await fetch(new URL('/v1/chat/completions', server.captureUrl), { method: 'POST', signal: abort.signal, headers: { 'content-type': 'application/json', 'x-trajstore-session-id': 'sess-gone' }, body: JSON.stringify({ model: 'real-slow', stream: true, messages: [{ role: 'user', content: 'tell me a long story' }] }) });
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
  await reader.read();
  abort.abort();
  await reader.read().catch(() => undefined);
  const events = await eventually(async () => {
    const r = await get(server.url, '/api/gateway/traces/capture-test/sess-gone/events');
    assert.is(r.body.events?.length, 2);
    return r.body.events as Json[];
  }, 'the cancelled call');
  assert.equal(events.map((e) => e.kind), ['llm.request', 'http.cancel']);
  assert.match(events[1]?.payload.reason, /client closed/);
  // The server goes on.
  const ok = await client('sess-gone').chat.completions.create({ model: 'real-model', messages: [{ role: 'user', content: 'short then' }] });
  assert.is(ok.choices[0]?.message.content, 'The lighthouse is on the cliff.');
});

test('capture levels: full keeps the parsed bodies (credential headers never), summary keeps no text', async () => {
  const levels: Json = {};
  for (const level of ['full', 'summary']) {
    writeFileSync(path(`${level}.toml`), config().replace('capture_level = "dialogue"', `capture_level = "${level}"`));
    const one = await startServeProcess(['serve', '--listen', '127.0.0.1:0', '--gateway-config', path(`${level}.toml`), '--gateway-dataset', path(`level-${level}`), '--gateway-split-idle', '1h'], { env, cwd: home });
    try {
      const c = new OpenAI({ apiKey: CLIENT_KEY, baseURL: new URL('/v1', one.captureUrl).href, defaultHeaders: { 'x-trajstore-session-id': 'lvl' }, maxRetries: 0 });
      await c.chat.completions.create({ model: 'real-model', messages: [{ role: 'user', content: 'What colour is the lamp?' }] });
      levels[level] = await eventually(async () => {
        const r = await get(one.url, '/api/gateway/traces/capture-test/lvl/events');
        assert.is(r.body.events?.length, 2);
        return r.body.events as Json[];
      }, level);
    } finally {
      await one.stop();
    }
  }
  const [fullRequest, fullResponse] = levels.full as [Json, Json];
  assert.equal(fullRequest.payload.http.request_body.messages, [{ role: 'user', content: 'What colour is the lamp?' }]);
  assert.is(fullResponse.payload.http.response_body.choices[0].message.content, 'The lighthouse is on the cliff.');
  assert.is(fullResponse.payload.http.headers.authorization, undefined);
  assert.not.ok(JSON.stringify(levels.full).includes(CLIENT_KEY) || JSON.stringify(levels.full).includes(ROUTE_KEY));
  const [summaryRequest, summaryResponse] = levels.summary as [Json, Json];
  assert.is(summaryRequest.payload.user_content, undefined);
  assert.is(summaryResponse.payload.assistant_content, undefined);
  assert.equal(summaryResponse.payload.usage, { prompt_tokens: 12, completion_tokens: 6, total_tokens: 18 });
  assert.not.ok(JSON.stringify(levels.summary).includes('lamp'));
});

test('SIGTERM: the calls that ended are recorded before the server exits', async () => {
  const ds = path('sigterm');
  const once = await startServeProcess(['serve', '--listen', '127.0.0.1:0', '--gateway-config', path('capture.toml'), '--gateway-dataset', ds, '--gateway-split-idle', '1h'], { env, cwd: home });
  const c = new OpenAI({ apiKey: CLIENT_KEY, baseURL: new URL('/v1', once.captureUrl).href, defaultHeaders: { 'x-trajstore-session-id': 'last-words' }, maxRetries: 0 });
  await c.chat.completions.create({ model: 'real-model', messages: [{ role: 'user', content: 'goodbye' }] });
  assert.is(await once.stop(), 0);
  const again = await startServeProcess(['serve', '--listen', '127.0.0.1:0', '--gateway-config', path('capture.toml'), '--gateway-dataset', ds, '--gateway-split-idle', '1h'], { env, cwd: home });
  try {
    const events = (await get(again.url, '/api/gateway/traces/capture-test/last-words/events')).body.events as Json[];
    assert.equal(events.map((e) => e.kind), ['llm.request', 'llm.response']);
  } finally {
    await again.stop();
  }
});

test('configuration errors exit 2 naming the file, line and key; a missing file exits 3', async () => {
  const attempt = async (text: string) => {
    writeFileSync(path('bad.toml'), text);
    return runTool('trajstore', ['serve', '--listen', '127.0.0.1:0', '--gateway-config', path('bad.toml'), '--gateway-dataset', path('never')], { env, cwd: home });
  };
  const good = config();
  const cases: Array<[string, RegExp]> = [
    [good.replace('capture_level = "dialogue"', 'capture_level = "dialogue"\ncolour = "red"'), /bad\.toml:5: unknown key `colour`/],
    [good.replace('api_key_env = "ANTHROPIC_ROUTE_KEY"', 'api_key_env = "ANTHROPIC_ROUTE_KEY"\nupstreem = "x"'), /models\[4\]: unknown key `upstreem`/],
    [good.replace('ANTHROPIC_ROUTE_KEY', 'NOT_SET_ANYWHERE'), /NOT_SET_ANYWHERE .*is not set/],
    [good.replace('capture_level = "dialogue"', 'capture_level = "everything"'), /capture_level/],
    [good.replace('listen = "127.0.0.1:0"', 'listen = "0.0.0.0:0"'), /listen .*loopback/],
    [good.replace('name = "real-*"', 'name = "real-model"'), /given twice/],
    [good.replace('forward = "real-model"', 'forward = "real-model"\nupstream = "http://127.0.0.1:1"'), /cannot be combined/],
    [good.replace('forward = "real-model"', 'forward = "real-*"'), /exact name/],
    [good.replace('forward = "real-model"', 'forward = "nothing"'), /names no route/],
    [`${good}\n[[models]]\nname = "x"\nforward = "alias"\n`, /no chains/],
    [good.replace('name = "down-*"', 'name = "do*wn"'), /only be the whole name, its start or its end/],
    [good.replace('upstream = "http://127.0.0.1:1/v1"', 'upstream = "ftp://127.0.0.1/v1"'), /http:\/\/ or https:\/\//],
    ['listen = "127.0.0.1:0"\n', /\[\[models\]\] route is required/],
    ['listen = \n', /invalid TOML/],
  ];
  for (const [text, message] of cases) {
    const r = await attempt(text);
    assert.is(r.code, 2, `${message}: ${r.stderr}`);
    assert.match(r.stderr, message);
    assert.not.ok(r.stderr.includes(ROUTE_KEY));
  }
  assert.not.ok(existsSync(path('never')));
  const missing = await trajstore(['serve', '--listen', '127.0.0.1:0', '--gateway-config', path('nope.toml'), '--gateway-dataset', path('never')]);
  assert.is(missing.code, 3, missing.stderr);
});

test.run();
