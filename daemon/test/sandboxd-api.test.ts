/**
 * The lifecycle API's edges against the real daemon (test supervisor): authentication and request
 * ids, token scoping on the data plane, and a table of bad requests that must each get the right
 * 4xx (or 501), never a 5xx, and leave nothing half-written.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, request as httpRequest, type IncomingMessage } from 'node:http';
import { connect } from 'node:net';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Logger } from '../../lib/log.js';
import { cgroup2Mount, makeFixture, type Fixture } from './supervisor/fixture.js';
import type { RunningDaemon } from '../index.js';

const mount = cgroup2Mount();
let fixture: Fixture;
let daemon: RunningDaemon;
const sandboxes: { id: string; token: string; execdToken: string }[] = [];

const GOOD = { image: { uri: 'test' }, entrypoint: ['sleep', 'infinity'], resourceLimits: { cpu: '500m', memory: '512Mi' } };

async function call(method: string, path: string, options: { body?: unknown; raw?: string; headers?: Record<string, string>; key?: string | null } = {}) {
  const headers: Record<string, string> = { ...(options.key === null ? {} : { 'SVC-API-KEY': options.key ?? fixture.apiKey }), ...options.headers };
  let body: string | undefined = options.raw;
  if (options.body !== undefined) {
    body = JSON.stringify(options.body);
    headers['content-type'] = 'application/json';
  }
  const res = await fetch(`${daemon.url}${path}`, { method, headers, ...(body === undefined ? {} : { body }) });
  const text = await res.text();
  let json: Record<string, unknown> | undefined;
  try {
    json = JSON.parse(text) as Record<string, unknown>;
  } catch {
    // a data-plane stream, not an error body
  }
  return { status: res.status, headers: res.headers, text, json };
}

/** One request written byte for byte (fetch would merge repeated headers and normalise paths). */
function rawHttp(head: string): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const socket = connect(Number(new URL(daemon.url).port), '127.0.0.1', () => socket.write(head));
    let text = '';
    socket.on('data', (d) => (text += d.toString()));
    socket.on('end', () => resolve(text));
    socket.on('error', reject);
  });
}

async function create(): Promise<(typeof sandboxes)[number]> {
  const created = await call('POST', '/v1/sandboxes', { body: GOOD });
  assert.is(created.status, 202, created.text);
  const id = created.json!.id as string;
  const endpoint = await call('GET', `/v1/sandboxes/${id}/endpoints/44772`);
  const headers = endpoint.json!.headers as Record<string, string>;
  return { id, token: headers['X-SVC-SANDBOX-TOKEN']!, execdToken: headers['X-EXECD-ACCESS-TOKEN']! };
}

if ('skip' in mount) {
  test('SKIP: sandboxd API', () => console.log(`SKIP: sandboxd-api: ${mount.skip}`));
} else {
  test.before(async () => {
    fixture = makeFixture(mount.path);
    daemon = await fixture.start();
    sandboxes.push(await create(), await create());
  });
  test.after(async () => {
    for (const s of sandboxes) await call('DELETE', `/v1/sandboxes/${s.id}`);
    await daemon?.close();
    await fixture?.cleanup();
  });

  test('authentication: missing, wrong, repeated keys are 401; every response has X-Request-ID', async () => {
    for (const key of [null, 'x'.repeat(64)]) {
      const res = await call('GET', '/v1/sandboxes', { key });
      assert.is(res.status, 401, res.text);
      assert.is(res.json!.code, 'UNAUTHORIZED');
      assert.match(res.headers.get('x-request-id') ?? '', /^[0-9a-f-]{36}$/);
    }
    // The OpenSandbox SDKs send the key given as api_key (or $OPEN_SANDBOX_API_KEY) as OPEN-SANDBOX-API-KEY: told how to send it here.
    const sdkKey = { key: null, headers: { 'OPEN-SANDBOX-API-KEY': fixture.apiKey } };
    const lifecycle = await call('GET', '/v1/sandboxes', sdkKey);
    assert.is(lifecycle.status, 401);
    assert.match(String(lifecycle.json!.message), /the SVC-API-KEY header is required; this request has OPEN-SANDBOX-API-KEY, which is not read here: send the key as SVC-API-KEY \(the SDKs' ConnectionConfig headers\)/);
    const proxied = await call('GET', `/v1/sandboxes/${sandboxes[0]!.id}/proxy/44772/ping`, sdkKey);
    assert.is(proxied.status, 401);
    assert.match(String(proxied.json!.message), /this request has OPEN-SANDBOX-API-KEY, which is not read here: send the key as SVC-API-KEY/);
    // A repeated key goes raw: fetch would merge the two into one value.
    const twice = await rawHttp(`GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nSVC-API-KEY: ${fixture.apiKey}\r\nSVC-API-KEY: ${fixture.apiKey}\r\nConnection: close\r\n\r\n`);
    assert.match(twice, /^HTTP\/1\.1 401 /);
    assert.match(twice, /"message":"the SVC-API-KEY header must be sent once, not 2 times"/);
    for (const path of ['/v1/sandboxes', '/v1/nowhere', `/v1/sandboxes/${sandboxes[0]!.id}`, '/v1/sandboxes/sb-none', '/v1/sandboxes/%ff']) {
      const res = await call('GET', path);
      assert.match(res.headers.get('x-request-id') ?? '', /^[0-9a-f-]{36}$/, path);
    }
    // Also on what fails before any route: a request that is not valid HTTP.
    const malformed = await rawHttp('GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n');
    assert.match(malformed, /^HTTP\/1\.1 400 /);
    assert.match(malformed, /x-request-id: [0-9a-f-]{36}/i);
    assert.match(malformed, /"code":"INVALID_REQUEST"/);
    // HTTP/1.1 requires Host: a request without it (the proxy's paths too) gets the same shape, not Node's empty 400.
    for (const path of ['/v1/sandboxes', `/v1/sandboxes/${sandboxes[0]!.id}/proxy/44772/`]) {
      const hostless = await rawHttp(`GET ${path} HTTP/1.1\r\nSVC-API-KEY: ${fixture.apiKey}\r\nConnection: close\r\n\r\n`);
      assert.match(hostless, /^HTTP\/1\.1 400 /, path);
      assert.match(hostless, /"code":"INVALID_REQUEST","message":"the request has no Host header, which HTTP\/1\.1 requires"/, path);
      // Two Host headers are refused too (RFC 9112): Node's `headers` keep only the first.
      const twoHosts = await rawHttp(`GET ${path} HTTP/1.1\r\nHost: a\r\nHost: b\r\nSVC-API-KEY: ${fixture.apiKey}\r\nConnection: close\r\n\r\n`);
      assert.match(twoHosts, /^HTTP\/1\.1 400 /, path);
      assert.match(twoHosts, /"code":"INVALID_REQUEST","message":"the request has 2 Host headers; it may have one"/, path);
    }
    // The key never appears in an answer.
    const listed = await call('GET', '/v1/sandboxes');
    assert.not.match(listed.text, fixture.apiKey);
    assert.not.match(listed.text, sandboxes[0]!.token);
  });

  test('token scoping: a sandbox token reaches only its own sandbox and never the lifecycle API', async () => {
    const [a, b] = sandboxes as [(typeof sandboxes)[number], (typeof sandboxes)[number]];
    const ping = (id: string, headers: Record<string, string>) => call('GET', `/v1/sandboxes/${id}/proxy/44772/ping`, { key: null, headers });
    assert.is((await ping(a.id, { 'X-SVC-SANDBOX-TOKEN': a.token })).status, 200);
    assert.is((await ping(b.id, { 'X-SVC-SANDBOX-TOKEN': a.token })).status, 401);
    assert.is((await ping(a.id, {})).status, 401);
    assert.is((await ping(a.id, { 'SVC-API-KEY': fixture.apiKey })).status, 200);
    assert.is((await call('GET', '/v1/sandboxes', { key: null, headers: { 'X-SVC-SANDBOX-TOKEN': a.token } })).status, 401);
    assert.is((await call('DELETE', `/v1/sandboxes/${a.id}`, { key: null, headers: { 'X-SVC-SANDBOX-TOKEN': a.token } })).status, 401);
    // The guest service's own token passes through the proxy; control credentials do not reach it.
    const run = await call('POST', `/v1/sandboxes/${a.id}/proxy/44772/command`, {
      key: null,
      headers: { 'X-SVC-SANDBOX-TOKEN': a.token, 'X-EXECD-ACCESS-TOKEN': a.execdToken, 'content-type': 'application/json' },
      raw: JSON.stringify({ command: 'echo proxied' }),
    });
    assert.is(run.status, 200, run.text);
    assert.match(run.text, 'proxied');
    const noServiceToken = await call('POST', `/v1/sandboxes/${a.id}/proxy/44772/command`, { key: null, headers: { 'X-SVC-SANDBOX-TOKEN': a.token, 'content-type': 'application/json' }, raw: '{"command":"true"}' });
    assert.is(noServiceToken.status, 401);
    assert.is((await ping(a.id + 'x', { 'SVC-API-KEY': fixture.apiKey })).status, 404);
    assert.is((await call('GET', `/v1/sandboxes/${a.id}/proxy/8080/`, { key: null, headers: { 'X-SVC-SANDBOX-TOKEN': a.token } })).status, 501);
    // fetch would normalise these paths away, so they go raw.
    for (const path of ['a/../ping', './ping', '%2e%2e/ping', 'a//ping']) {
      const answer = await rawHttp(`GET /v1/sandboxes/${a.id}/proxy/44772/${path} HTTP/1.1\r\nHost: x\r\nX-SVC-SANDBOX-TOKEN: ${a.token}\r\nConnection: close\r\n\r\n`);
      assert.match(answer, /^HTTP\/1\.1 400 /, path);
      // Without credentials the answer is 401, whatever else is wrong.
      const anonymous = await rawHttp(`GET /v1/sandboxes/${a.id}/proxy/44772/${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
      assert.match(anonymous, /^HTTP\/1\.1 401 /, path);
    }
    for (const port of ['0', '65536', '99999']) assert.is((await call('GET', `/v1/sandboxes/${a.id}/proxy/${port}/ping`, { key: null, headers: { 'X-SVC-SANDBOX-TOKEN': a.token } })).status, 400, port);
  });

  test('downloads through the proxy: large ones byte for byte (the raw path), small ones parsed, on one kept-alive connection; a client that leaves mid-way does not hurt', async () => {
    const a = sandboxes[0]!;
    const files = { large: join(fixture.root, 'large.bin'), small: join(fixture.root, 'small.bin') };
    // Not sparse, not repeating on a power of two: a byte out of place changes the hash.
    writeFileSync(files.large, Buffer.from(Array.from({ length: 5 * 1024 * 1024 + 7 }, (_, i) => (i * 7919) % 251)));
    writeFileSync(files.small, 'small answer');
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const get = (file: string, init: { signal?: AbortSignal } = {}) =>
      new Promise<IncomingMessage>((resolve, reject) => {
        const req = httpRequest(`${daemon.url}/v1/sandboxes/${a.id}/proxy/44772/files/download?path=${encodeURIComponent(file)}`, { agent, headers: { 'X-SVC-SANDBOX-TOKEN': a.token, 'X-EXECD-ACCESS-TOKEN': a.execdToken }, ...init }, resolve);
        req.on('error', reject);
        req.end();
      });
    const digest = async (res: IncomingMessage): Promise<string> => {
      const hash = createHash('sha256');
      for await (const chunk of res) hash.update(chunk as Buffer);
      return hash.digest('hex');
    };
    const want = (file: string): string => createHash('sha256').update(readFileSync(file)).digest('hex');
    try {
      const sockets = new Set<unknown>();
      for (const file of [files.large, files.small, files.large]) {
        const res = await get(file);
        assert.is(res.statusCode, 200);
        sockets.add(res.socket);
        assert.is(await digest(res), want(file), file);
      }
      assert.is(sockets.size, 1, 'the three downloads shared one kept-alive connection');
      // A client that leaves after the first megabyte: the daemon drops the guest's side, and serves the next one.
      const abort = new AbortController();
      const leaving = await get(files.large, { signal: abort.signal });
      for await (const chunk of leaving) {
        void chunk;
        abort.abort();
        break;
      }
      const after = await get(files.large);
      assert.is(await digest(after), want(files.large));
    } finally {
      agent.destroy();
    }
  });

  test('secrets never reach a process\'s argv or environment', async () => {
    const pids: string[] = [];
    const walk = (dir: string): void => {
      pids.push(...readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean));
      for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) walk(join(dir, e.name));
    };
    walk(fixture.cgroupRoot);
    assert.ok(pids.length >= 4, `sandbox processes: ${pids.join(',')}`);
    const secrets = [fixture.apiKey, ...sandboxes.flatMap((s) => [s.token, s.execdToken])];
    for (const pid of pids) {
      for (const file of ['cmdline', 'environ']) {
        let text = '';
        try {
          text = readFileSync(`/proc/${pid}/${file}`, 'latin1');
        } catch {
          continue; // exited meanwhile
        }
        for (const secret of secrets) assert.not.ok(text.includes(secret), `a secret in /proc/${pid}/${file}`);
      }
    }
  });

  test('WebSocket upgrades and CONNECT are refused with 501', async () => {
    for (const head of [`GET /v1/sandboxes/${sandboxes[0]!.id}/proxy/44772/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`, 'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n']) {
      const answer = await rawHttp(head);
      assert.match(answer, /^HTTP\/1\.1 501 /);
      assert.match(answer, /x-request-id: /i);
    }
  });

  const badCreates: [string, unknown, number][] = [
    ['empty object', {}, 400],
    ['image missing', { ...GOOD, image: undefined }, 400],
    ['image not an object', { ...GOOD, image: 'test' }, 400],
    ['image key with path traversal', { ...GOOD, image: { uri: '../test' } }, 400],
    ['image key absolute', { ...GOOD, image: { uri: '/etc/passwd' } }, 400],
    ['image key a registry reference', { ...GOOD, image: { uri: 'docker.io/library/python:3.11' } }, 400],
    ['image key hidden', { ...GOOD, image: { uri: '.test' } }, 400],
    ['image unknown', { ...GOOD, image: { uri: 'nothere' } }, 400],
    ['image auth', { ...GOOD, image: { uri: 'test', auth: { username: 'u', password: 'p' } } }, 501],
    ['image unknown field', { ...GOOD, image: { uri: 'test', tag: 'x' } }, 400],
    ['entrypoint missing', { ...GOOD, entrypoint: undefined }, 400],
    ['entrypoint empty', { ...GOOD, entrypoint: [] }, 400],
    ['entrypoint not strings', { ...GOOD, entrypoint: [1] }, 400],
    ['entrypoint with NUL', { ...GOOD, entrypoint: ['a\u0000b'] }, 400],
    ['entrypoint first empty', { ...GOOD, entrypoint: [''] }, 400],
    ['entrypoint too many', { ...GOOD, entrypoint: Array(257).fill('x') }, 400],
    ['resourceLimits missing', { ...GOOD, resourceLimits: undefined }, 400],
    ['cpu bad', { ...GOOD, resourceLimits: { cpu: 'lots', memory: '1Gi' } }, 400],
    ['cpu zero', { ...GOOD, resourceLimits: { cpu: '0', memory: '1Gi' } }, 400],
    ['cpu negative', { ...GOOD, resourceLimits: { cpu: '-1', memory: '1Gi' } }, 400],
    ['cpu below the smallest quota', { ...GOOD, resourceLimits: { cpu: '9m', memory: '1Gi' } }, 400],
    ['cpu past any number', { ...GOOD, resourceLimits: { cpu: '9999999999999999999', memory: '1Gi' } }, 400],
    ['memory of one byte', { ...GOOD, resourceLimits: { cpu: '1', memory: '1' } }, 400],
    ['memory below 64Mi', { ...GOOD, resourceLimits: { cpu: '1', memory: '63Mi' } }, 400],
    ['NUL in an env value', { ...GOOD, env: { A: 'x\0y' } }, 400],
    ['memory bad', { ...GOOD, resourceLimits: { cpu: '1', memory: '1.5 Gi' } }, 400],
    ['memory not whole bytes', { ...GOOD, resourceLimits: { cpu: '1', memory: '100.0000001Mi' } }, 400],
    ['memory with an unknown suffix', { ...GOOD, resourceLimits: { cpu: '1', memory: '1gi' } }, 400],
    ['memory a number', { ...GOOD, resourceLimits: { cpu: '1', memory: 1024 } }, 400],
    ['gpu', { ...GOOD, resourceLimits: { cpu: '1', memory: '1Gi', gpu: '1' } }, 400],
    ['memory above capacity', { ...GOOD, resourceLimits: { cpu: '1', memory: '9Gi' } }, 429],
    ['cpu above capacity', { ...GOOD, resourceLimits: { cpu: '5', memory: '1Gi' } }, 429],
    ['timeout below 60', { ...GOOD, timeout: 59 }, 400],
    ['timeout above max', { ...GOOD, timeout: 86401 }, 400],
    ['timeout a string', { ...GOOD, timeout: '600' }, 400],
    ['timeout fractional', { ...GOOD, timeout: 60.5 }, 400],
    ['env not a map', { ...GOOD, env: ['A=1'] }, 400],
    ['env bad name', { ...GOOD, env: { 'A-B': '1' } }, 400],
    ['env value not a string', { ...GOOD, env: { A: 1 } }, 400],
    ['env too large', { ...GOOD, env: { A: 'x'.repeat(65536) } }, 400],
    ['metadata value not a string', { ...GOOD, metadata: { a: {} } }, 400],
    ['metadata too many keys', { ...GOOD, metadata: Object.fromEntries(Array.from({ length: 257 }, (_, i) => [`k${i}`, 'v'])) }, 400],
    ['unknown field', { ...GOOD, surprise: true }, 400],
    ['networkPolicy', { ...GOOD, networkPolicy: { defaultAction: 'deny' } }, 501],
    ['volumes', { ...GOOD, volumes: [{ name: 'v', mountPath: '/v', host: { path: '/tmp' } }] }, 501],
    ['snapshotId', { ...GOOD, snapshotId: 'snap' }, 501],
    ['snapshotId instead of image', { ...GOOD, image: undefined, snapshotId: 'snap' }, 501],
    ['neither image nor snapshotId', { ...GOOD, image: undefined }, 400],
    ['templateId', { ...GOOD, templateId: 't' }, 501],
    ['credentialProxy', { ...GOOD, credentialProxy: { enabled: true } }, 501],
    ['lifecycle hooks', { ...GOOD, lifecycle: { preStart: {} } }, 501],
    ['extensions non-empty', { ...GOOD, extensions: { poolRef: 'p' } }, 501],
    ['secureAccess true', { ...GOOD, secureAccess: true }, 501],
    ['platform arm64', { ...GOOD, platform: { os: 'linux', arch: 'arm64' } }, 501],
    ['a JSON array', [GOOD], 400],
    ['JSON null', null, 400],
  ];

  test('bad create requests: the right 4xx or 501, nothing created', async () => {
    const before = (await call('GET', '/v1/sandboxes')).json!.pagination as { totalItems: number };
    for (const [name, body, status] of badCreates) {
      const res = await call('POST', '/v1/sandboxes', { body });
      assert.is(res.status, status, `${name}: ${res.text}`);
      assert.type(res.json!.code, 'string', name);
      assert.ok((res.json!.message as string).length > 0, name);
    }
    const raw: [string, string, Record<string, string>, number][] = [
      ['malformed JSON', '{"image": ', { 'content-type': 'application/json' }, 400],
      ['not JSON', 'image=test', { 'content-type': 'text/plain' }, 415],
      ['form encoded', 'image=test', { 'content-type': 'application/x-www-form-urlencoded' }, 415],
      ['oversized body', JSON.stringify({ ...GOOD, metadata: { a: 'x'.repeat(2 << 20) } }), { 'content-type': 'application/json' }, 413],
      ['a __proto__ key', JSON.stringify(GOOD).replace('{', '{"__proto__": {"x": 1}, '), { 'content-type': 'application/json' }, 400],
      ['a constructor.prototype key', JSON.stringify({ ...GOOD, metadata: { constructor: { prototype: { x: 1 } } } }), { 'content-type': 'application/json' }, 400],
      ['an unknown Content-Encoding', JSON.stringify(GOOD), { 'content-type': 'application/json', 'content-encoding': 'zstd' }, 415],
      ['plain JSON said to be gzip', JSON.stringify(GOOD), { 'content-type': 'application/json', 'content-encoding': 'gzip' }, 400],
    ];
    for (const [name, body, headers, status] of raw) {
      const res = await call('POST', '/v1/sandboxes', { raw: body, headers });
      assert.is(res.status, status, `${name}: ${res.text}`);
    }
    // A compressed body is read decoded: its fields are checked as sent.
    const zipped = await fetch(`${daemon.url}/v1/sandboxes`, { method: 'POST', headers: { 'SVC-API-KEY': fixture.apiKey, 'content-type': 'application/json', 'content-encoding': 'gzip' }, body: new Uint8Array(gzipSync(JSON.stringify({ ...GOOD, image: { uri: 5 } }))) });
    assert.is(zipped.status, 400);
    assert.match(((await zipped.json()) as { message: string }).message, 'image/uri');
    const after = (await call('GET', '/v1/sandboxes')).json!.pagination as { totalItems: number };
    assert.is(after.totalItems, before.totalItems);
  });

  test('an unknown field is named, wherever it is (a misspelt one would otherwise be a needle in the body)', async () => {
    const cases: [unknown, string][] = [
      [{ ...GOOD, timeoutt: 60 }, "unknown body field 'timeoutt'"],
      [{ ...GOOD, resourceLimits: { cpu: '1', memory: '1Gi', 'nvidia.com/gpu': '1' } }, "unknown body field 'resourceLimits/nvidia.com/gpu'"],
      [{ ...GOOD, image: { uri: 'test', tag: 'x' } }, "unknown body field 'image/tag'"],
    ];
    for (const [body, named] of cases) {
      const res = await call('POST', '/v1/sandboxes', { body });
      assert.is(res.status, 400, res.text);
      assert.is(res.json!.message, named);
    }
    const renew = await call('POST', `/v1/sandboxes/${sandboxes[0]!.id}/renew-expiration`, { body: { expiresAt: new Date(Date.now() + 3600e3).toISOString(), when: 1 } });
    assert.is(renew.json!.message, "unknown body field 'when'");
    // Other failures keep naming their place.
    assert.is((await call('POST', '/v1/sandboxes', { body: { ...GOOD, entrypoint: ['sleep', 5] } })).json!.message, 'body/entrypoint/1 must be string');
  });

  test('a workload that cannot start is the request\'s fault (400 naming the program and why); one that exits before readiness says with what code', async () => {
    const before = (await call('GET', '/v1/sandboxes')).json!.pagination as { totalItems: number };
    const missing = await call('POST', '/v1/sandboxes', { body: { ...GOOD, entrypoint: ['/nonexistent/program', '-x'] } });
    assert.is(missing.status, 400, missing.text);
    assert.is(missing.json!.code, 'INVALID_REQUEST');
    assert.match(missing.json!.message as string, /entrypoint.*\/nonexistent\/program.*No such file/);
    const exits = await call('POST', '/v1/sandboxes', { body: { ...GOOD, entrypoint: ['sh', '-c', 'exit 3'] } });
    assert.is(exits.status, 500, exits.text);
    assert.is(exits.json!.code, 'SANDBOX_CREATE_FAILED');
    assert.match(exits.json!.message as string, 'the workload exited with code 3');
    const after = (await call('GET', '/v1/sandboxes')).json!.pagination as { totalItems: number };
    assert.is(after.totalItems, before.totalItems);
  });

  test('an unexpected failure is a 500 that says nothing more, and the daemon log tells it whole', async () => {
    const logged: string[] = [];
    const own = makeFixture(mount.path, new Logger('error', { write: (chunk: string) => logged.push(chunk) }));
    const running = await own.start();
    try {
      // The state directory damaged under the running daemon: a create can no longer be recorded.
      rmSync(join(own.state, 'records'), { recursive: true });
      const res = await fetch(`${running.url}/v1/sandboxes`, { method: 'POST', headers: { 'SVC-API-KEY': own.apiKey, 'content-type': 'application/json' }, body: JSON.stringify(GOOD) });
      assert.is(res.status, 500);
      assert.equal(await res.json(), { code: 'INTERNAL_ERROR', message: 'internal error' });
      const text = logged.join('');
      assert.match(text, `POST /v1/sandboxes (request ${res.headers.get('x-request-id')})`);
      assert.match(text, 'ENOENT');
      assert.not.match(text, own.apiKey);
    } finally {
      await running.close();
      await own.cleanup();
    }
  });

  test('memory quantities as Kubernetes writes them: a fraction that makes whole bytes, decimal k', async () => {
    for (const memory of ['1.5Gi', '100000k', '0.25Gi']) {
      const created = await call('POST', '/v1/sandboxes', { body: { ...GOOD, resourceLimits: { cpu: '500m', memory } } });
      assert.is(created.status, 202, `${memory}: ${created.text}`);
      assert.is((await call('DELETE', `/v1/sandboxes/${created.json!.id as string}`)).status, 204, memory);
    }
  });

  test('a manifest that is no prepared image is refused naming it (400), never a 500, never started', async () => {
    const rootfs = join(fixture.root, 'rootfs');
    const entrypoint = ['/sbin/sandbox-guest', 'bootstrap', '--'];
    const manifests: [string, string, string][] = [
      ['not-json', '{"rootfs": ', 'not JSON'],
      ['null', 'null', 'not a prepared image'],
      ['host-root', JSON.stringify({ rootfs: '/', entrypoint }), 'host root'],
      ['relative-rootfs', JSON.stringify({ rootfs: 'rootfs', entrypoint }), 'rootfs'],
      ['state-inside', JSON.stringify({ rootfs: fixture.root, entrypoint }), 'state'],
      ['inside-state', JSON.stringify({ rootfs: join(fixture.state, 'records'), entrypoint }), 'state'],
      ['relative-entrypoint', JSON.stringify({ rootfs, entrypoint: ['sandbox-guest'] }), 'entrypoint'],
      ['relative-library', JSON.stringify({ rootfs, entrypoint, library_dir: 'fw' }), 'library_dir'],
      ['cmd-not-strings', JSON.stringify({ rootfs, entrypoint, cmd: [1] }), 'cmd'],
    ];
    const before = (await call('GET', '/v1/sandboxes')).json!.pagination as { totalItems: number };
    for (const [key, text, named] of manifests) {
      writeFileSync(join(fixture.imagesDir, `${key}.json`), text);
      const res = await call('POST', '/v1/sandboxes', { body: { ...GOOD, image: { uri: key } } });
      assert.is(res.status, 400, `${key}: ${res.text}`);
      assert.is(res.json!.code, 'INVALID_REQUEST', key);
      assert.match(res.json!.message as string, key, `${key}: ${res.text}`);
      assert.match(res.json!.message as string, named, `${key}: ${res.text}`);
    }
    const after = (await call('GET', '/v1/sandboxes')).json!.pagination as { totalItems: number };
    assert.is(after.totalItems, before.totalItems);
  });

  test('bad list, endpoint, renew and per-id requests', async () => {
    const id = sandboxes[0]!.id;
    const cases: [string, string, unknown, number][] = [
      ['GET', '/v1/sandboxes?pageSize=201', undefined, 400],
      ['GET', '/v1/sandboxes?pageSize=0', undefined, 400],
      ['GET', '/v1/sandboxes?page=-1', undefined, 400],
      ['GET', '/v1/sandboxes?page=1&page=2', undefined, 400],
      ['GET', '/v1/sandboxes?metadata=novalue', undefined, 400],
      ['GET', '/v1/sandboxes?metadata=%3Dv', undefined, 400],
      ['GET', `/v1/sandboxes/${id}/endpoints/8080`, undefined, 501],
      ['GET', `/v1/sandboxes/${id}/endpoints/http`, undefined, 400],
      ['GET', `/v1/sandboxes/${id}/endpoints/44772?use_server_proxy=maybe`, undefined, 400],
      ['GET', `/v1/sandboxes/${id}/endpoints/44772?expires=100`, undefined, 400],
      ['GET', '/v1/sandboxes/sb-none/endpoints/44772', undefined, 404],
      ['GET', '/v1/sandboxes/sb-none', undefined, 404],
      ['GET', `/v1/sandboxes/${'x'.repeat(300)}`, undefined, 404],
      ['GET', '/v1/sandboxes/%ff', undefined, 400],
      ['DELETE', '/v1/sandboxes/sb-none', undefined, 404],
      ['POST', '/v1/sandboxes/sb-none/pause', undefined, 404],
      ['POST', `/v1/sandboxes/${id}/renew-expiration`, { expiresAt: new Date(Date.now() + 3600e3).toISOString() }, 409],
      ['POST', `/v1/sandboxes/${id}/renew-expiration`, { expiresAt: 'tomorrow' }, 400],
      ['POST', `/v1/sandboxes/${id}/renew-expiration`, {}, 400],
      ['POST', `/v1/sandboxes/${id}/renew-expiration`, { expiresAt: '2020-01-01T00:00:00Z', extra: 1 }, 400],
      ['PATCH', `/v1/sandboxes/${id}/metadata`, { a: 'b' }, 501],
      ['POST', '/v1/metrics/events', { eventType: 'x' }, 501],
      ['PUT', '/v1/sandboxes', { a: 1 }, 405],
      ['POST', `/v1/sandboxes/${id}`, {}, 405],
      ['GET', `/v1/sandboxes/${id}/pause`, undefined, 405],
      ['GET', '/v1/nowhere', undefined, 404],
    ];
    for (const [method, path, body, status] of cases) {
      const res = await call(method, path, body === undefined ? {} : { body });
      assert.is(res.status, status, `${method} ${path}: ${res.text}`);
      assert.type(res.json?.code, 'string', `${method} ${path}`);
      if (status === 405) assert.is(res.json!.code, 'METHOD_NOT_ALLOWED');
    }
    const put = await call('PUT', `/v1/sandboxes/${id}`);
    assert.is(put.headers.get('allow'), 'GET, HEAD, DELETE');
  });

  test('an empty body labelled JSON (as generated clients send on a POST without one) is no body: controls work, create and renew say a body is required', async () => {
    const { id } = await create();
    sandboxes.push({ id, token: '', execdToken: '' });
    const empty = { raw: '', headers: { 'content-type': 'application/json; charset=utf-8' } };
    for (const op of ['pause', 'resume']) {
      const res = await call('POST', `/v1/sandboxes/${id}/${op}`, empty);
      assert.is(res.status, 202, `${op}: ${res.text}`);
    }
    for (const path of ['/v1/sandboxes', `/v1/sandboxes/${id}/renew-expiration`]) {
      const res = await call('POST', path, empty);
      assert.is(res.status, 400, `${path}: ${res.text}`);
      assert.match(res.json!.message as string, 'body must be object', path);
    }
    assert.is((await call('DELETE', `/v1/sandboxes/${id}`, empty)).status, 204);
  });

  test('renewal only extends, and only into the future', async () => {
    const created = await call('POST', '/v1/sandboxes', { body: { ...GOOD, timeout: 600 } });
    const id = created.json!.id as string;
    sandboxes.push({ id, token: '', execdToken: '' });
    const deadline = Date.parse(created.json!.expiresAt as string);
    const renew = (at: number) => call('POST', `/v1/sandboxes/${id}/renew-expiration`, { body: { expiresAt: new Date(at).toISOString() } });
    assert.is((await renew(Date.now() - 1000)).status, 400);
    assert.is((await renew(deadline - 1000)).status, 400);
    assert.is((await renew(Date.now() + 86401e3)).status, 400);
    const ok = await renew(deadline + 60_000);
    assert.is(ok.status, 200, ok.text);
    assert.is(Date.parse(ok.json!.expiresAt as string), deadline + 60_000);
  });
}

test.run();
