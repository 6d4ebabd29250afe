/**
 * The load generator's HTTP/1.1 client: the response parser gives the same result however the
 * bytes are cut, rejects broken framing, and the pool reuses, drops and times out real
 * connections to raw TCP servers that answer exactly the bytes each test scripts.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool } from '../../lib/testing/run-tool.js';
import { MAX_RESPONSE_BYTES, sendChatRequest, type Endpoint, type RequestResult } from '../loadgen/client.js';
import { FramingError, Http1Pool, ResponseParser, type Exchange, type FailureKind } from '../loadgen/http1.js';
import { SseParser } from '../loadgen/sse.js';

interface Parsed {
  status: number;
  contentType: string;
  body: string;
  ends: number;
  keepAlive: boolean;
  /** Bytes of the input the parser used. */
  used: number;
}

/**
 * Feeds a piece the way a connection does: through one read buffer, overwritten after each read,
 * so anything the parser kept without copying would be garbage by the next piece.
 */
const scratch = Buffer.alloc(128 * 1024);
function feed(piece: Buffer, use: (view: Buffer) => number): number {
  piece.copy(scratch);
  const used = use(scratch.subarray(0, piece.length));
  scratch.fill(0x58, 0, piece.length);
  return used;
}

/** Feeds the response in the given pieces; returns what the handler saw. */
function parse(pieces: Buffer[], closeAtEnd = false): Parsed {
  const seen = { status: 0, contentType: '', body: [] as Buffer[], ends: 0 };
  const parser = new ResponseParser();
  parser.reset({
    head: (status, contentType) => {
      assert.is(seen.status, 0, 'head is called once');
      seen.status = status;
      seen.contentType = contentType;
    },
    body: (chunk) => void seen.body.push(Buffer.from(chunk)),
    end: () => void seen.ends++,
  });
  let used = 0;
  for (const piece of pieces) used += feed(piece, (view) => parser.execute(view, 0));
  if (closeAtEnd) assert.ok(parser.close(0), 'the close completes the response');
  return { status: seen.status, contentType: seen.contentType, body: Buffer.concat(seen.body).toString(), ends: seen.ends, keepAlive: parser.keepAlive, used };
}

/** Every way of cutting the bytes in two, and one byte at a time, must parse like the whole. */
function everySplit(raw: string, expected: Omit<Parsed, 'used'>, closeAtEnd = false): void {
  const bytes = Buffer.from(raw);
  const whole = parse([bytes], closeAtEnd);
  assert.equal(whole, { ...expected, used: bytes.length });
  for (let i = 0; i <= bytes.length; i++) {
    assert.equal(parse([bytes.subarray(0, i), bytes.subarray(i)], closeAtEnd), whole, `split at byte ${i}`);
  }
  assert.equal(
    parse([...bytes].map((b) => Buffer.from([b])), closeAtEnd),
    whole,
    'one byte at a time',
  );
}

test('Content-Length body, split at every byte boundary', () => {
  everySplit('HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 14\r\nX-Other: ü\r\n\r\n{"a":"héllo"}', {
    status: 200,
    contentType: 'application/json',
    body: '{"a":"héllo"}',
    ends: 1,
    keepAlive: true,
  });
});

test('chunked body with chunk extensions and trailers, split at every byte boundary', () => {
  const raw =
    'HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n' +
    '5;name=value\r\ndata:\r\n' +
    'A ; ext="quoted;value" ; other\r\n {"x":1}\n\n\r\n' +
    '1\r\n\n\r\n' +
    '0;last\r\nServer-Timing: total;dur=12\r\nX-Trailer: yes\r\n\r\n';
  everySplit(raw, { status: 200, contentType: 'text/event-stream', body: 'data: {"x":1}\n\n\n', ends: 1, keepAlive: true });
});

test('bare LF line endings, an interim 103 response, upper-case hex and a reason-less status line', () => {
  const raw = 'HTTP/1.1 103 Early Hints\nLink: </x>\n\nHTTP/1.1 429\nTransfer-Encoding: chunked\n\nB\nrate limit!\n0\n\n';
  everySplit(raw, { status: 429, contentType: '', body: 'rate limit!', ends: 1, keepAlive: true });
});

test('a body delimited by the connection closing, and Connection: close', () => {
  everySplit('HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"until":"close"}', { status: 200, contentType: 'application/json', body: '{"until":"close"}', ends: 1, keepAlive: false }, true);
  everySplit('HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok', { status: 200, contentType: '', body: 'ok', ends: 1, keepAlive: false });
  everySplit('HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok', { status: 200, contentType: '', body: 'ok', ends: 1, keepAlive: false });
  everySplit('HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\nok', { status: 200, contentType: '', body: 'ok', ends: 1, keepAlive: true });
});

test('no body: 204, and Content-Length 0; bytes after the response are left unused', () => {
  const raw = Buffer.from('HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\n');
  const parsed = parse([raw]);
  assert.is(parsed.ends, 1);
  assert.is(parsed.status, 204);
  assert.is(parsed.used, raw.indexOf('HTTP/1.1 200'));
  assert.is(parse([Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n')]).ends, 1);
});

test('Transfer-Encoding overrides Content-Length, and such a connection is not reused', () => {
  const raw = 'HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n';
  everySplit(raw, { status: 200, contentType: '', body: 'ab', ends: 1, keepAlive: false });
});

test('a response cut short is not complete', () => {
  for (const raw of ['', 'HTTP/1.1 200 OK\r\nContent-Le', 'HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n']) {
    const parser = new ResponseParser();
    let ends = 0;
    parser.reset({ head: () => undefined, body: () => undefined, end: () => void ends++ });
    parser.execute(Buffer.from(raw), 0);
    assert.not.ok(parser.close(0), JSON.stringify(raw));
    assert.is(ends, 0);
    assert.is(parser.started, raw.length > 0);
  }
});

test('bad framing throws FramingError, wherever the bytes are cut', () => {
  const bad: Array<[string, RegExp]> = [
    ['HTTP/2 200 OK\r\n\r\n', /not an HTTP\/1.x status line/],
    ['ICY 200 OK\r\n\r\n', /not an HTTP\/1.x status line/],
    ['HTTP/1.1 2x0 OK\r\n\r\n', /not an HTTP\/1.x status line/],
    ['HTTP/1.1 2000 OK\r\n\r\n', /not an HTTP\/1.x status line/],
    ['HTTP/1.1 101 Switching Protocols\r\n\r\n', /unexpected status 101/],
    ['HTTP/1.1 200 OK\r\nno colon here\r\n\r\n', /malformed header line/],
    ['HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok', /malformed header line/],
    ['HTTP/1.1 200 OK\r\nX-A: 1\r\n  folded\r\n\r\n', /malformed header line/],
    ['HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n', /invalid Content-Length/],
    ['HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok', /invalid Content-Length/],
    ['HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\nok', /invalid Content-Length/],
    ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n', /invalid chunk-size line/],
    ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n', /invalid chunk-size line/],
    ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5 x\r\nabcde\r\n', /invalid chunk-size line/],
    ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000\r\n', /invalid chunk-size line/],
    ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcdef\r\n0\r\n\r\n', /longer than its declared size/],
    [`HTTP/1.1 200 OK\r\nX-Big: ${'x'.repeat(70_000)}\r\n\r\n`, /over 65536 bytes/],
  ];
  for (const [raw, message] of bad) {
    const bytes = Buffer.from(raw);
    const cuts = bytes.length > 1000 ? [0, 1, 500, bytes.length] : Array.from({ length: bytes.length + 1 }, (_, i) => i);
    for (const i of cuts) {
      const parser = new ResponseParser();
      parser.reset({ head: () => undefined, body: () => undefined, end: () => assert.unreachable(`${JSON.stringify(raw.slice(0, 60))} completed`) });
      try {
        parser.execute(bytes.subarray(0, i), 0);
        parser.execute(bytes.subarray(i), 0);
        assert.unreachable(`${JSON.stringify(raw.slice(0, 60))} split at ${i} was accepted`);
      } catch (error) {
        assert.instance(error, FramingError, String(error));
        assert.match((error as Error).message, message);
      }
    }
  }
});

test('SSE over bytes: a UTF-8 character split between chunks arrives whole', () => {
  const bytes = Buffer.from('data: {"content":"日本"}\r\n\r\n: comment\n\ndata: é\n\n');
  for (let i = 0; i <= bytes.length; i++) {
    const events: string[] = [];
    const parser = new SseParser((data) => events.push(data));
    feed(bytes.subarray(0, i), (view) => (parser.push(view), 0));
    feed(bytes.subarray(i), (view) => (parser.push(view), 0));
    assert.equal(events, ['{"content":"日本"}', 'é'], `split at byte ${i}`);
  }
});

test('SSE over bytes: a long line arriving in many reads costs time in proportion to its length', () => {
  // 15 MiB of one data line in 16 KiB reads: copying what came so far on every read would move ~7 GB.
  const piece = Buffer.alloc(16 * 1024, 0x61);
  const pieces = (15 * 1024 * 1024) / piece.length;
  let received = 0;
  const parser = new SseParser((data) => void (received = data.length), MAX_RESPONSE_BYTES);
  const before = process.cpuUsage();
  parser.push('data: ');
  for (let i = 0; i < pieces; i++) feed(piece, (view) => (parser.push(view), 0));
  parser.push('\n\n');
  const cpu = process.cpuUsage(before);
  assert.is(received, pieces * piece.length, 'the line arrives whole');
  const ms = (cpu.user + cpu.system) / 1000;
  assert.ok(ms < 500, `parsing took ${ms.toFixed(0)} ms of CPU`);
});

/** A raw TCP server: `respond` sees each request (head and body, as bytes) and the socket, and answers by hand. */
async function rawServer(respond: (request: string, socket: net.Socket, index: number) => void): Promise<{ url: URL; connections: () => number; requests: string[]; close: () => Promise<void> }> {
  const requests: string[] = [];
  let connections = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    connections++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    let pending = '';
    socket.on('data', (chunk: Buffer) => {
      pending += chunk.toString('latin1');
      for (;;) {
        const headEnd = pending.indexOf('\r\n\r\n');
        if (headEnd < 0) return;
        const length = Number(/\r\ncontent-length: (\d+)\r\n/i.exec(pending.slice(0, headEnd + 2))?.[1] ?? 0);
        if (pending.length < headEnd + 4 + length) return;
        const request = pending.slice(0, headEnd + 4 + length);
        pending = pending.slice(request.length);
        requests.push(request);
        respond(request, socket, requests.length - 1);
      }
    });
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: new URL(`http://127.0.0.1:${port}/v1/chat/completions`),
    connections: () => connections,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

interface Outcome {
  status: number;
  body: string;
  failure: { kind: FailureKind; detail: string } | undefined;
}

/** One request through the pool, as a promise of what the exchange heard. */
function exchange(pool: Http1Pool, body: string): Promise<Outcome> {
  return new Promise((resolve) => {
    const outcome: Outcome = { status: 0, body: '', failure: undefined };
    const handler: Exchange = {
      sent: () => undefined,
      head: (status) => void (outcome.status = status),
      body: (chunk) => void (outcome.body += chunk.toString()),
      end: () => resolve(outcome),
      fail: (kind, detail) => resolve({ ...outcome, failure: { kind, detail } }),
    };
    pool.send(pool.requestFor(body), handler);
  });
}

const JSON_OK = (body: string): string => `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;

test('the request is serialised once per body, with Host, Content-Length and the given headers', async () => {
  const server = await rawServer((_, socket) => socket.write(JSON_OK('{}')));
  const pool = new Http1Pool({ url: new URL(`${server.url.href}?x=1`), maxConnections: 1, timeoutMs: 0 }, { 'content-type': 'application/json', authorization: 'Bearer k' });
  try {
    const body = '{"prompt":"héllo"}';
    assert.is(pool.requestFor(body), pool.requestFor(body), 'the same Buffer each time');
    await exchange(pool, body);
    assert.is(
      server.requests[0],
      Buffer.from(`POST /v1/chat/completions?x=1 HTTP/1.1\r\nhost: ${server.url.host}\r\nconnection: keep-alive\r\ncontent-type: application/json\r\nauthorization: Bearer k\r\ncontent-length: 19\r\n\r\n${body}`).toString('latin1'),
    );
    assert.throws(() => new Http1Pool({ url: server.url, maxConnections: 1, timeoutMs: 0 }, { authorization: 'Bearer k\r\nX-Forged: 1' }), /authorization header value contains a line break/);
    const forged = await runTool('actorctl', ['bench', 'm', '--url', server.url.origin, '--num-requests', '1'], { env: { OPENAI_API_KEY: 'sk-forge\r\nX-Forged: 1' } });
    assert.is(forged.code, 2, forged.stderr);
    assert.match(forged.stderr, 'the API key (--api-key or $OPENAI_API_KEY) contains a line break or NUL');
    assert.not.match(forged.stderr, 'sk-forge');
    assert.is(server.requests.length, 1, 'nothing was sent with it');
  } finally {
    pool.destroy();
    await server.close();
  }
});

test('keep-alive: sequential requests share one connection; Connection: close and extra bytes make a new one', async () => {
  const server = await rawServer((request, socket, i) => {
    if (request.includes('"close"')) socket.write('HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok');
    else if (request.includes('"extra"')) socket.write(`${JSON_OK('{}')}HTTP/1.1 200 OK\r\n`);
    else socket.write(JSON_OK(`{"n":${i}}`));
  });
  const pool = new Http1Pool({ url: server.url, maxConnections: 4, timeoutMs: 0 }, {});
  try {
    for (let i = 0; i < 5; i++) assert.equal(await exchange(pool, '{}'), { status: 200, body: `{"n":${i}}`, failure: undefined });
    assert.is(server.connections(), 1);
    assert.is((await exchange(pool, '"close"')).body, 'ok');
    assert.is((await exchange(pool, '{}')).body, '{"n":6}');
    assert.is(server.connections(), 2);
    assert.is((await exchange(pool, '"extra"')).body, '{}', 'the response itself is fine');
    assert.is((await exchange(pool, '{}')).failure, undefined);
    assert.is(server.connections(), 3, 'a connection out of step is not reused');
    // Four at once open four connections; a fifth waits for one of them.
    const many = await Promise.all(Array.from({ length: 5 }, () => exchange(pool, '{}')));
    assert.ok(many.every((o) => o.status === 200 && o.failure === undefined));
    assert.is(server.connections(), 6);
  } finally {
    pool.destroy();
    await server.close();
  }
});

test('failures are classified: malformed framing, reset mid-body, closed before responding, refused, timeout', async () => {
  const server = await rawServer((request, socket) => {
    if (request.includes('"badchunk"')) socket.write('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nnope\r\n');
    else if (request.includes('"reset"')) socket.write('HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc', () => socket.resetAndDestroy());
    else if (request.includes('"hangup"')) socket.end();
    else if (request.includes('"stall"')) socket.write('HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab');
    else socket.write(JSON_OK('{}'));
  });
  const pool = new Http1Pool({ url: server.url, maxConnections: 8, timeoutMs: 500 }, {});
  try {
    const bad = await exchange(pool, '"badchunk"');
    assert.is(bad.failure?.kind, 'malformed');
    assert.match(bad.failure?.detail ?? '', 'the HTTP response is malformed: an invalid chunk-size line: "nope"');
    assert.is((await exchange(pool, '"reset"')).failure?.kind, 'connection_reset');
    const hangup = await exchange(pool, '"hangup"');
    assert.equal(hangup.failure, { kind: 'connection_reset', detail: 'the server closed the connection before responding' });
    const started = Date.now();
    const stall = await exchange(pool, '"stall"');
    assert.equal(stall.failure, { kind: 'timeout', detail: 'no complete response within 500 ms' });
    assert.ok(Date.now() - started >= 490, 'not before the timeout');
    assert.is(stall.body, 'ab');
    assert.is((await exchange(pool, '{}')).failure, undefined, 'the pool still works');
  } finally {
    pool.destroy();
    await server.close();
  }
  const refused = new Http1Pool({ url: server.url, maxConnections: 1, timeoutMs: 0 }, {});
  assert.is((await exchange(refused, '{}')).failure?.kind, 'connection_refused');
  refused.destroy();
});

test('the timeout counts from each request\'s own send on a reused connection; cancelling drops the connection', async () => {
  let closedByClient = 0;
  const watched = new WeakSet<net.Socket>();
  const server = await rawServer((request, socket) => {
    if (!watched.has(socket)) socket.once('close', () => closedByClient++);
    watched.add(socket);
    if (request.includes('"slow"')) setTimeout(() => socket.write(JSON_OK('{"slow":1}')), 250);
    else if (!request.includes('"never"')) socket.write(JSON_OK('{}'));
  });
  const pool = new Http1Pool({ url: server.url, maxConnections: 1, timeoutMs: 400 }, {});
  try {
    assert.is((await exchange(pool, '{}')).failure, undefined);
    await new Promise((resolve) => setTimeout(resolve, 300));
    // Armed at the first send, the timer would fire 100 ms into this one.
    assert.equal(await exchange(pool, '"slow"'), { status: 200, body: '{"slow":1}', failure: undefined });
    assert.is(server.connections(), 1);
    const inFlight = new Set<() => void>();
    const pending = sendChatRequest({ pool, stream: true }, '"never"', inFlight);
    assert.is(inFlight.size, 1);
    for (const cancel of inFlight) cancel();
    const cancelled = await pending;
    assert.is(cancelled.error, 'cancelled');
    assert.is(inFlight.size, 0);
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.is(closedByClient, 1, 'the cancelled request\'s connection was closed');
  } finally {
    pool.destroy();
    await server.close();
  }
});

test('sendChatRequest: broken framing is malformed_stream when streaming, malformed_response when not', async () => {
  const sse = (events: string): string => `HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n${Buffer.byteLength(events).toString(16)}\r\n${events}\r\n`;
  const server = await rawServer((request, socket) => {
    if (request.includes('"plain"')) {
      // Two reads into the one read buffer: the first half must have been copied.
      const body = JSON.stringify({ choices: [{ message: { content: 'ä'.repeat(3000) } }] });
      socket.write(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body.slice(0, 1001)}`);
      setTimeout(() => socket.write(body.slice(1001)), 50);
    } else if (request.includes('"ok"')) socket.write(`${sse('data: {"choices":[{"delta":{"content":"hé"}}]}\n\ndata: {"choices":[{"delta":{"content":"llo"}}]}\n\ndata: [DONE]\n\n')}0\r\n\r\n`);
    else socket.write(`${sse('data: {"choices":[{"delta":{"content":"x"}}]}\n\n')}QQ\r\n`);
  });
  const endpoint = (stream: boolean): Endpoint => ({ pool: new Http1Pool({ url: server.url, maxConnections: 2, timeoutMs: 0 }, {}), stream });
  const streaming = endpoint(true);
  const plain = endpoint(false);
  try {
    const ok: RequestResult = await sendChatRequest(streaming, '"ok"', new Set());
    assert.is(ok.error, undefined, ok.errorDetail);
    assert.is(ok.text, 'héllo');
    assert.is(ok.chunks, 2);
    assert.ok(ok.ttftMs !== undefined && ok.ttftMs > 0 && ok.ttftMs <= ok.e2eMs);
    const broken = await sendChatRequest(streaming, '"broken"', new Set());
    assert.is(broken.error, 'malformed_stream');
    assert.match(broken.errorDetail ?? '', 'invalid chunk-size line: "QQ"');
    assert.is((await sendChatRequest(plain, '"broken"', new Set())).error, 'malformed_response');
    const whole = await sendChatRequest(plain, '"plain"', new Set());
    assert.is(whole.error, undefined, whole.errorDetail);
    assert.is(whole.text, 'ä'.repeat(3000));
  } finally {
    streaming.pool.destroy();
    plain.pool.destroy();
    await server.close();
  }
});

test('sendChatRequest: a body that is JSON but not a chunk object, or usage that is not a count, is malformed or ignored, never a crash', async () => {
  const sse = (events: string): string => `HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: ${Buffer.byteLength(events)}\r\n\r\n${events}`;
  const server = await rawServer((request, socket) => {
    const event = /"event":(.*)\}$/.exec(request)?.[1];
    if (event !== undefined) socket.write(sse(`data: ${event}\n\ndata: [DONE]\n\n`));
    else if (request.includes('"plain-null"')) socket.write(JSON_OK('null'));
    else socket.write(sse('data: {"choices":[{"delta":{"content":"a"}}],"usage":{"prompt_tokens":-5,"completion_tokens":1e308}}\n\ndata: {"usage":{"prompt_tokens":2.5}}\n\ndata: [DONE]\n\n'));
  });
  const streaming: Endpoint = { pool: new Http1Pool({ url: server.url, maxConnections: 2, timeoutMs: 2000 }, {}), stream: true };
  const plain: Endpoint = { pool: new Http1Pool({ url: server.url, maxConnections: 2, timeoutMs: 2000 }, {}), stream: false };
  try {
    for (const event of ['null', '5', '"text"', '[1]']) {
      const r = await sendChatRequest(streaming, JSON.stringify({ event: 0 }).replace('0', event), new Set());
      assert.is(r.error, 'malformed_stream', `data: ${event}`);
      assert.match(r.errorDetail ?? '', `an event is not a JSON object: ${event}`);
    }
    const nullBody = await sendChatRequest(plain, '"plain-null"', new Set());
    assert.is(nullBody.error, 'malformed_response');
    assert.match(nullBody.errorDetail ?? '', 'no choices[0].message.content');
    const odd = await sendChatRequest(streaming, '"odd-usage"', new Set());
    assert.is(odd.error, undefined, odd.errorDetail);
    assert.equal(odd.usage, { promptTokens: undefined, completionTokens: undefined }, 'negative, fractional and infinite counts are no counts');
  } finally {
    streaming.pool.destroy();
    plain.pool.destroy();
    await server.close();
  }
});

test('sendChatRequest: a whole body or one event past MAX_RESPONSE_BYTES fails at once as malformed, holding no more of it', async () => {
  const over = MAX_RESPONSE_BYTES + 1024 * 1024;
  const chunk = Buffer.alloc(1024 * 1024, 0x61);
  const pour = (socket: net.Socket, head: string, piece: Buffer): void => {
    socket.write(head);
    let sent = 0;
    const go = (): void => {
      while (sent < over && !socket.destroyed) {
        sent += piece.length;
        if (!socket.write(piece)) return void socket.once('drain', go);
      }
    };
    go();
  };
  const server = await rawServer((request, socket) => {
    const sseHead = 'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n';
    // Never finished: only the limit can end these requests before the timeout.
    if (request.includes('"json"')) pour(socket, `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${over * 2}\r\n\r\n`, chunk);
    else if (request.includes('"line"')) pour(socket, `${sseHead}data: `, chunk);
    else pour(socket, sseHead, Buffer.from(`data: ${'b'.repeat(64 * 1024)}\n`));
  });
  const endpoint = (stream: boolean): Endpoint => ({ pool: new Http1Pool({ url: server.url, maxConnections: 1, timeoutMs: 30_000 }, {}), stream });
  const streaming = endpoint(true);
  const plain = endpoint(false);
  try {
    const json = await sendChatRequest(plain, '"json"', new Set());
    assert.is(json.error, 'malformed_response');
    assert.match(json.errorDetail ?? '', `over ${MAX_RESPONSE_BYTES} bytes`);
    for (const kind of ['line', 'lines']) {
      const r = await sendChatRequest(streaming, `"${kind}"`, new Set());
      assert.is(r.error, 'malformed_stream', kind);
      assert.match(r.errorDetail ?? '', `over ${MAX_RESPONSE_BYTES} bytes`, kind);
      assert.ok(r.e2eMs < 10_000, `${kind}: ended by the limit, not the timeout (${r.e2eMs} ms)`);
    }
  } finally {
    streaming.pool.destroy();
    plain.pool.destroy();
    await server.close();
  }
});

test('sendChatRequest: an error status whose body never ends is counted by its status once enough of the body is kept, not as a timeout', async () => {
  const server = await rawServer((_request, socket) => {
    socket.write('HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n');
    const piece = '<p>busy</p>'.repeat(1000);
    const pour = setInterval(() => (socket.destroyed ? clearInterval(pour) : socket.write(`${piece.length.toString(16)}\r\n${piece}\r\n`)), 5);
  });
  const streaming: Endpoint = { pool: new Http1Pool({ url: server.url, maxConnections: 1, timeoutMs: 5000 }, {}), stream: true };
  try {
    const r = await sendChatRequest(streaming, '"busy"', new Set());
    assert.is(r.error, 'http_503', r.errorDetail);
    assert.match(r.errorDetail ?? '', /^HTTP 503: <p>busy<\/p>/);
    assert.ok(r.e2eMs < 4000, `ended by the kept body's limit, not the timeout (${r.e2eMs} ms)`);
  } finally {
    streaming.pool.destroy();
    await server.close();
  }
});

test('sendChatRequest: a redirect names where it points, and a stream of the wrong Content-Type names the type', async () => {
  const server = await rawServer((request, socket) => {
    if (request.includes('"moved"')) socket.write('HTTP/1.1 301 Moved Permanently\r\nLocation: https://api.example.test/v1/chat/completions\r\nContent-Length: 0\r\n\r\n');
    else socket.write('HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 14\r\n\r\ndata: [DONE]\n\n');
  });
  const streaming: Endpoint = { pool: new Http1Pool({ url: server.url, maxConnections: 1, timeoutMs: 5000 }, {}), stream: true };
  try {
    const moved = await sendChatRequest(streaming, '"moved"', new Set());
    assert.is(moved.error, 'http_301');
    assert.is(moved.errorDetail, 'HTTP 301 (Location: https://api.example.test/v1/chat/completions): ');
    const plain = await sendChatRequest(streaming, '"plain"', new Set());
    assert.is(plain.error, 'malformed_response');
    assert.match(plain.errorDetail ?? '', 'the response is not JSON (Content-Type: text/plain; a stream is text/event-stream): data: [DONE]');
  } finally {
    streaming.pool.destroy();
    await server.close();
  }
});

test('sendChatRequest: a stream is complete at `data: [DONE]`; a body that never ends after it costs its connection, not the request', async () => {
  const events = 'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n';
  const server = await rawServer((request, socket) => {
    socket.write(`HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n${Buffer.byteLength(events).toString(16)}\r\n${events}\r\n`);
    // A well-behaved server ends the body a moment later (kept alive); a hanging one never does.
    if (request.includes('"ends"')) setTimeout(() => socket.write('0\r\n\r\n'), 20);
  });
  const streaming: Endpoint = { pool: new Http1Pool({ url: server.url, maxConnections: 1, timeoutMs: 20_000 }, {}), stream: true };
  try {
    for (let i = 0; i < 2; i++) {
      const r = await sendChatRequest(streaming, '"ends"', new Set());
      assert.is(r.error, undefined, r.errorDetail);
    }
    assert.is(server.connections(), 1, 'a body ending just after [DONE] keeps its connection');
    const hanging = await sendChatRequest(streaming, '"hangs"', new Set());
    assert.is(hanging.error, undefined, hanging.errorDetail);
    assert.is(hanging.text, 'hi');
    assert.ok(hanging.e2eMs < 1000, `timed to [DONE], not to the timeout (${hanging.e2eMs} ms)`);
    const t0 = Date.now();
    const next = await sendChatRequest(streaming, '"ends"', new Set());
    assert.is(next.error, undefined, next.errorDetail);
    assert.ok(Date.now() - t0 < 5000, `the next request waited ${Date.now() - t0} ms for the hanging connection`);
    // Its wait for a free connection is the client's, not the server's: it is timed from its own send.
    assert.ok(next.e2eMs < 500, `the next request was timed from before its wait for a connection (${next.e2eMs} ms)`);
    assert.is(server.connections(), 2, 'the hanging connection was dropped for a new one');
  } finally {
    streaming.pool.destroy();
    await server.close();
  }
});

test('https: the certificate is verified, then requests go over TLS on kept-alive connections', async () => {
  // A throwaway self-signed certificate for localhost, made here rather than shipped.
  const dir = mkdtempSync(join(tmpdir(), 'http1-tls-'));
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1', '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')], { stdio: 'ignore' });
  const cert = readFileSync(join(dir, 'cert.pem'));
  let connections = 0;
  const server = tls.createServer({ key: readFileSync(join(dir, 'key.pem')), cert }, (socket) => {
    connections++;
    socket.on('data', () => socket.write(JSON_OK('{"tls":true}')));
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(`https://localhost:${(server.address() as net.AddressInfo).port}/v1/chat/completions`);
  const trusted = new Http1Pool({ url, maxConnections: 1, timeoutMs: 0, tls: { ca: cert } }, {});
  const untrusted = new Http1Pool({ url, maxConnections: 1, timeoutMs: 0 }, {});
  try {
    for (let i = 0; i < 3; i++) assert.equal(await exchange(trusted, '{}'), { status: 200, body: '{"tls":true}', failure: undefined });
    assert.is(connections, 1);
    const refused = await exchange(untrusted, '{}');
    assert.is(refused.failure?.kind, 'connection_error');
    assert.match(refused.failure?.detail ?? '', /self.signed/i);
  } finally {
    trusted.destroy();
    untrusted.destroy();
    await new Promise((resolve) => server.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
