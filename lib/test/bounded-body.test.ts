/** boundedBody: bodies read whole and decoded up to a limit, on a real fastify server over real sockets. */
import { request } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import Fastify from 'fastify';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { boundedBody, contentCodings, jsonBody } from '../bounded-body.js';

const LIMITS = { maxBytes: 64 * 1024, drainBytes: 4 * 1024 * 1024 };

const app = Fastify({ logger: false, bodyLimit: LIMITS.drainBytes });
app.removeAllContentTypeParsers();
app.addContentTypeParser('application/json', boundedBody(LIMITS, jsonBody));
app.setErrorHandler((error: Error & { statusCode?: number }, _req, reply) => void reply.code(error.statusCode ?? 500).send({ message: error.message }));
app.post('/', async (req) => ({ got: req.body }));
await app.listen({ host: '127.0.0.1', port: 0 });
const port = (app.server.address() as AddressInfo).port;

interface Answer {
  status: number;
  body: { got?: unknown; message?: string };
}

/** One POST over node:http, the body sent in `pieces` writes; rejects if the connection fails before an answer. */
function post(body: Buffer | Buffer[], encoding?: string): Promise<Answer> {
  const pieces = Array.isArray(body) ? body : [body];
  const length = pieces.reduce((n, p) => n + p.length, 0);
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method: 'POST', path: '/', headers: { 'content-type': 'application/json', 'content-length': length, ...(encoding ? { 'content-encoding': encoding } : {}) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as Answer['body'] }));
    });
    req.on('error', reject);
    for (const piece of pieces) req.write(piece);
    req.end();
  });
}

const doc = { text: 'the harbor is quiet', n: [1, 2, 3] };
const json = Buffer.from(JSON.stringify(doc));

test('Content-Encoding: each known coding, stacked codings, identity and case', () => {
  assert.equal(contentCodings(undefined), []);
  assert.equal(contentCodings('identity'), []);
  assert.equal(contentCodings(' GZip , identity'), ['gzip']);
  assert.equal(contentCodings('deflate, br'), ['deflate', 'br']);
  // Names of an object's own machinery are codings like any other unknown one.
  for (const name of ['constructor', '__proto__', 'toString', 'hasOwnProperty']) assert.instance(contentCodings(name), Error, name);
  const many = contentCodings(Array(3000).fill('gzip').join(','));
  assert.instance(many, Error);
  assert.is((many as Error).message, 'Content-Encoding lists 3000 codings; at most 2 are undone');
  const unknown = contentCodings('gzip, zstd');
  assert.instance(unknown, Error);
  assert.is((unknown as Error & { statusCode: number }).statusCode, 415);
  assert.match((unknown as Error).message, "Content-Encoding 'zstd' is not supported");
});

test('a body in any known coding is read decoded', async () => {
  for (const [encoding, body] of [
    [undefined, json],
    ['identity', json],
    ['gzip', gzipSync(json)],
    ['x-gzip', gzipSync(json)],
    ['deflate', deflateSync(json)],
    ['br', brotliCompressSync(json)],
    // Applied in the order listed: deflate first, then gzip over it.
    ['deflate, gzip', gzipSync(deflateSync(json))],
  ] as const) {
    const answer = await post(body, encoding);
    assert.is(answer.status, 200, `${encoding}: ${answer.body.message}`);
    assert.equal(answer.body.got, doc, String(encoding));
  }
  // Sent in small pieces, a compressed body is still decoded whole.
  const gz = gzipSync(json);
  const answer = await post(Array.from({ length: gz.length }, (_, i) => gz.subarray(i, i + 1)), 'gzip');
  assert.equal(answer.body.got, doc);
});

test('refused bodies: unknown coding 415, broken or cut short 400, too large decoded 413, not JSON (or not UTF-8) 400', async () => {
  const zstd = await post(json, 'zstd');
  assert.is(zstd.status, 415);
  assert.match(zstd.body.message!, "Content-Encoding 'zstd' is not supported");
  const plainAsGzip = await post(json, 'gzip');
  assert.is(plainAsGzip.status, 400);
  assert.match(plainAsGzip.body.message!, 'the body is not valid gzip');
  const gz = gzipSync(json);
  const cut = await post(gz.subarray(0, gz.length - 6), 'gzip');
  assert.is(cut.status, 400);
  assert.match(cut.body.message!, 'the body is not valid gzip');
  const brokenBr = await post(Buffer.from('not brotli at all'), 'br');
  assert.equal([brokenBr.status, /not valid br/.test(brokenBr.body.message!)], [400, true]);
  const big = Buffer.from(JSON.stringify({ text: 'x'.repeat(LIMITS.maxBytes) }));
  const plainBig = await post(big);
  assert.equal([plainBig.status, plainBig.body.message], [413, `the body is larger than ${LIMITS.maxBytes} bytes`]);
  const gzBig = await post(gzipSync(big), 'gzip');
  assert.equal([gzBig.status, gzBig.body.message], [413, `the body is larger than ${LIMITS.maxBytes} bytes decoded`]);
  const notJson = await post(gzipSync('{"text": '), 'gzip');
  assert.equal([notJson.status, /the body is not valid JSON/.test(notJson.body.message!)], [400, true]);
  // JSON is UTF-8 (RFC 8259 §8.1): bytes that are not would be taken as U+FFFD, and stored as what was never sent.
  for (const bytes of [[0xff, 0xfe], [0xc3], [0xed, 0xa0, 0x80]]) {
    const notUtf8 = await post(Buffer.concat([Buffer.from('{"text": "a'), Buffer.from(bytes), Buffer.from('b"}')]));
    assert.equal([notUtf8.status, notUtf8.body.message], [400, 'the body is not valid JSON: it is not UTF-8'], JSON.stringify(bytes));
  }
});

test('a compression bomb costs no more than the limit: decoding stops once it is passed', async () => {
  // Gzip members concatenated are one gzip body: 128 members of 16 MiB of zeros, 2 GiB decoded from
  // 2 MB sent. Decoding all of it would take this process about 4 s of CPU here.
  const member = gzipSync(Buffer.alloc(16 * 1024 * 1024));
  const bomb = Array.from({ length: 128 }, () => member);
  const memoryBefore = process.memoryUsage().arrayBuffers;
  const cpuBefore = process.cpuUsage();
  const answer = await post(bomb, 'gzip');
  // A decoder left running after the answer would go on spending CPU: give it a second to show.
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const cpu = process.cpuUsage(cpuBefore);
  assert.is(answer.status, 413);
  assert.match(answer.body.message!, 'decoded');
  const grown = process.memoryUsage().arrayBuffers - memoryBefore;
  assert.ok(grown < 64 * 1024 * 1024, `${grown} bytes kept`);
  const seconds = (cpu.user + cpu.system) / 1e6;
  assert.ok(seconds < 0.5, `${seconds} s of CPU: the body was decoded past the limit`);
});

test('a refused body that is still being sent is read and dropped, so its sender gets the answer', async () => {
  // 3 MiB, under the drain limit, sent in 64 KiB writes: each refusal comes once it is all read.
  const pieces = Array.from({ length: 48 }, () => Buffer.alloc(64 * 1024, 0x20));
  for (const [encoding, status] of [
    ['zstd', 415],
    ['gzip', 400],
    [undefined, 413],
  ] as const) {
    const answer = await post(pieces, encoding);
    assert.is(answer.status, status, String(encoding));
  }
});

test('a body past the drain limit is answered at once, and its connection closed only after', async () => {
  // Chunked (no Content-Length, which fastify would refuse from the header): 8 MiB, past the 4 MiB drain limit.
  const status = await new Promise<number>((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method: 'POST', path: '/', headers: { 'content-type': 'application/json' } }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    const piece = Buffer.alloc(64 * 1024, 0x20);
    let left = 128;
    const write = (): void => {
      while (left > 0) {
        left--;
        if (!req.write(piece)) return void req.once('drain', write);
      }
      req.end();
    };
    write();
  });
  assert.is(status, 413);
});

test('a body not all sent in time is answered 408 and its connection closed', async () => {
  const slow = Fastify({ logger: false });
  slow.removeAllContentTypeParsers();
  slow.addContentTypeParser('application/json', boundedBody({ ...LIMITS, timeoutMs: 300 }, jsonBody));
  slow.setErrorHandler((error: Error & { statusCode?: number }, _req, reply) => void reply.code(error.statusCode ?? 500).send({ message: error.message }));
  slow.post('/', async (req) => ({ got: req.body }));
  await slow.listen({ host: '127.0.0.1', port: 0 });
  try {
    const socket = connect((slow.server.address() as AddressInfo).port, '127.0.0.1');
    socket.write('POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{"text": ');
    let text = '';
    socket.on('data', (chunk: Buffer) => (text += chunk.toString()));
    await new Promise((resolve) => socket.on('close', resolve));
    assert.match(text, /^HTTP\/1\.1 408 /);
    assert.match(text, 'the body was not all sent within 0.3 s');
  } finally {
    await slow.close();
  }
});

test.after(() => app.close());
test.run();
