/**
 * The object-store layer against servers that misbehave: the real CLI and the real S3 test server
 * (moto), with a small hostile HTTP proxy between them that, for the requests a test names, never
 * answers, cuts the connection after the server acted, answers 503 SlowDown, damages a body, or
 * pages a listing forever. What each must come to: a time limit and a prompt stop on a signal, a
 * listing that stops, a commit whose answer was lost still counted as a commit, a part upload
 * retried, a damaged download fetched again, and exit codes that say what happened.
 */
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { AbortMultipartUploadCommand, ListMultipartUploadsCommand, S3Client } from '@aws-sdk/client-s3';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool, type RunOptions } from '../../lib/testing/run-tool.js';
import { scratchDir } from '../../lib/testing/scratch.js';
import { freePort } from '../../bench/lib/free-port.js';
import { S3TestServer, TEST_ACCESS_KEY, TEST_SECRET_KEY } from '../../bench/lib/s3-server.js';
import { startServeProcess } from '../../bench/lib/serve-process.js';
import { walkFiles } from '../../lib/walk.js';
import { MAX_LISTED_KEYS, MULTIPART_PART_BYTES, S3ObjectStore } from '../dataset/s3-store.js';
import type { S3Place } from '../pins/pins.js';
import { PROJECT_TESTDATA } from './helpers/fixtures.js';

const ATIF = join(PROJECT_TESTDATA, 'samples', 'atif');
const STORYLINE = join(PROJECT_TESTDATA, 'samples', 'storyline');
const home = scratchDir('s3-hostile');
/** Keys in each page of the endless listing. */
const ENDLESS_PAGE_KEYS = 250_000;
let server: S3TestServer;
let proxy: HostileProxy;

/**
 * What the proxy does to the requests `match` (a regex on `METHOD /path?query`) picks, the first
 * `times` of them (all without it); every other request goes to the server untouched.
 * - hang: never answers; reset-after: forwards, then cuts the connection instead of answering;
 * - slowdown: 503 SlowDown; corrupt: forwards, flipping bytes of the answer's body;
 * - corrupt-upload: flips a byte of the request's body on its way to the server (damage in transit);
 * - wrong-etag: forwards, answering with an ETag that is not the MD5 of what was sent;
 * - wrong-complete-etag: forwards, answering a multipart upload's completion with an ETag in its body
 *   that is not the one of the parts sent;
 * - cut-body: forwards, then sends the answer's headers and half its body, and cuts the connection;
 * - same-token: a listing marked truncated, with the same continuation token every time;
 * - endless: listing pages of 250,000 (short) keys, each with a new token;
 * - rewrite: forwards, answering with the body `rewrite` makes of the server's (a listing that is no XML, or names other keys);
 * - answer: never reaches the server; answers 200 with the body `rewrite` makes of the request's (a bulk delete that deleted nothing);
 * - endless-body: a 200 whose body never ends (a MiB at a time, as fast as it is taken);
 * - echo-auth: a 400 whose error code and message hold the request's Authorization and session token headers;
 * - redirect: a 307 to another host (a closed port: a client that followed it would find nothing there);
 * - require-md5: refuses (400, as Ceph RGW, Dell ECS and s3proxy do) a request without a Content-MD5 that is its body's, forwards the others;
 * - wrong-region: the 400 AuthorizationHeaderMalformed that S3 and MinIO answer a request signed for another region, naming theirs;
 * - stall-body: forwards, then sends the answer's headers and half its body, and nothing more (the connection open);
 * - ignore-if-match: forwards without the request's If-Match (a server that ignores it on PUT, honouring If-None-Match);
 * - conditions-not-implemented: answers a request carrying If-Match or If-None-Match 501 NotImplemented, forwards the others;
 * - meanwhile-if-none-match: a request carrying If-None-Match is forwarded once `meanwhile` has run (a drop deleting its key); the others untouched.
 */
type Act = 'hang' | 'reset-after' | 'slowdown' | 'corrupt' | 'corrupt-upload' | 'wrong-etag' | 'wrong-complete-etag' | 'cut-body' | 'same-token' | 'endless' | 'rewrite' | 'answer' | 'endless-body' | 'echo-auth' | 'redirect' | 'require-md5' | 'wrong-region' | 'stall-body' | 'ignore-if-match' | 'conditions-not-implemented' | 'meanwhile-if-none-match';
interface Rule {
  act: Act;
  match: RegExp;
  times?: number;
  /** reset-after: run after the server answered, before the connection is cut (another writer committing meanwhile); meanwhile-if-none-match: before the request goes on. */
  meanwhile?: () => Promise<void>;
  /** rewrite: the answer's new body, made from the server's; answer: the answer's body, made from the request's. */
  rewrite?: (body: string) => string;
}

class HostileProxy {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  private rule: Rule | undefined;
  private applied = 0;
  /** Every request, as `ACT METHOD /path?query` (`pass` for those forwarded untouched). */
  readonly seen: string[] = [];

  private constructor(
    private readonly target: number,
    readonly port: number,
  ) {}

  get endpoint(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  static async open(target: number): Promise<HostileProxy> {
    const proxy = new HostileProxy(target, await freePort());
    const server = createServer((req, res) => proxy.handle(req, res));
    server.on('connection', (socket) => {
      proxy.sockets.add(socket);
      socket.once('close', () => proxy.sockets.delete(socket));
    });
    await new Promise<void>((resolve) => server.listen(proxy.port, '127.0.0.1', resolve));
    proxy.server = server;
    return proxy;
  }

  /** From now on, `rule` (none: pass everything); forgets what was seen. */
  set(rule?: Rule): void {
    this.rule = rule;
    this.applied = 0;
    this.seen.length = 0;
  }

  count(pattern: RegExp): number {
    return this.seen.filter((line) => pattern.test(line)).length;
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise((resolve) => this.server?.close(resolve));
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const line = `${req.method} ${req.url}`;
      const rule = this.rule;
      const act = rule && rule.match.test(line) && (rule.times === undefined || this.applied < rule.times) ? rule.act : 'pass';
      if (act !== 'pass') this.applied++;
      this.seen.push(`${act} ${line}`);
      const answer = (status: number, headers: Record<string, string | string[] | undefined>, data: Buffer | string): void => {
        res.writeHead(status, headers);
        res.end(data);
      };
      switch (act) {
        case 'pass':
          return this.forward(req, body, (up, data) => answer(up.statusCode ?? 502, up.headers, data));
        case 'hang':
          return;
        case 'reset-after':
          return this.forward(req, body, () => void (rule?.meanwhile?.() ?? Promise.resolve()).finally(() => req.socket.destroy()));
        case 'slowdown':
          return answer(503, { 'content-type': 'application/xml' }, '<?xml version="1.0"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>');
        case 'corrupt':
          return this.forward(req, body, (up, data) => {
            for (let i = 100; i < data.length; i += 97) data[i]! ^= 0xff;
            answer(up.statusCode ?? 502, up.headers, data);
          });
        case 'corrupt-upload':
          if (body.length > 0) body[body.length >> 1]! ^= 0xff;
          return this.forward(req, body, (up, data) => answer(up.statusCode ?? 502, up.headers, data));
        case 'wrong-etag':
          return this.forward(req, body, (up, data) => answer(up.statusCode ?? 502, { ...up.headers, etag: '"0123456789abcdef0123456789abcdef"' }, data));
        case 'wrong-complete-etag':
          return this.forward(req, body, (up, data) => {
            const text = data.toString().replace(/<ETag>[^<]*<\/ETag>/, '<ETag>&quot;0123456789abcdef0123456789abcdef-2&quot;</ETag>');
            const { 'content-length': _length, ...headers } = up.headers;
            answer(up.statusCode ?? 502, headers, text);
          });
        case 'cut-body':
          return this.forward(req, body, (up, data) => {
            res.writeHead(up.statusCode ?? 502, up.headers);
            res.write(data.subarray(0, data.length >> 1), () => req.socket.destroy());
          });
        case 'same-token':
          req.url = req.url?.replace(/&?continuation-token=[^&]*/, '');
          return this.forward(req, body, (_up, data) =>
            answer(200, { 'content-type': 'application/xml' }, data.toString().replace('<IsTruncated>false</IsTruncated>', '<IsTruncated>true</IsTruncated><NextContinuationToken>SAME</NextContinuationToken>')),
          );
        case 'rewrite':
          return this.forward(req, body, (up, data) => {
            const { 'content-length': _length, ...headers } = up.headers;
            answer(up.statusCode ?? 502, headers, rule?.rewrite?.(data.toString()) ?? '');
          });
        case 'answer':
          return answer(200, { 'content-type': 'application/xml' }, rule?.rewrite?.(body.toString()) ?? '');
        case 'endless-body': {
          const chunk = Buffer.alloc(1024 * 1024, 0x20);
          res.writeHead(200, { 'content-type': 'application/xml' });
          const pump = (): void => {
            while (!res.destroyed && res.write(chunk));
          };
          res.on('drain', pump);
          return pump();
        }
        case 'stall-body':
          return this.forward(req, body, (up, data) => {
            res.writeHead(up.statusCode ?? 502, up.headers);
            res.write(data.subarray(0, data.length >> 1));
          });
        case 'redirect':
          return answer(307, { location: `http://127.0.0.1:9${req.url ?? '/'}`, 'content-length': '0' }, '');
        case 'ignore-if-match':
          delete req.headers['if-match'];
          return this.forward(req, body, (up, data) => answer(up.statusCode ?? 502, up.headers, data));
        case 'conditions-not-implemented':
          if (req.headers['if-match'] !== undefined || req.headers['if-none-match'] !== undefined) {
            return answer(501, { 'content-type': 'application/xml' }, '<?xml version="1.0" encoding="UTF-8"?><Error><Code>NotImplemented</Code><Message>A header you provided implies functionality that is not implemented</Message></Error>');
          }
          return this.forward(req, body, (up, data) => answer(up.statusCode ?? 502, up.headers, data));
        case 'meanwhile-if-none-match':
          if (req.headers['if-none-match'] !== undefined) {
            return void (rule?.meanwhile?.() ?? Promise.resolve()).then(() => this.forward(req, body, (up, data) => answer(up.statusCode ?? 502, up.headers, data)));
          }
          return this.forward(req, body, (up, data) => answer(up.statusCode ?? 502, up.headers, data));
        case 'require-md5':
          if (req.headers['content-md5'] !== createHash('md5').update(body).digest('base64')) {
            return answer(400, { 'content-type': 'application/xml' }, '<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidRequest</Code><Message>Missing required header for this request: Content-MD5.</Message></Error>');
          }
          return this.forward(req, body, (up, data) => answer(up.statusCode ?? 502, up.headers, data));
        case 'wrong-region':
          // MinIO's answer, as it is (S3's differs in its message only).
          return answer(400, { 'content-type': 'application/xml' }, `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AuthorizationHeaderMalformed</Code><Message>The authorization header is malformed; the region is wrong; expecting &#39;eu-central-1&#39;.</Message><BucketName>lake</BucketName><Region>eu-central-1</Region><RequestId>18ECC4E5609A2FBD</RequestId></Error>`);
        case 'echo-auth': {
          const echoed = `${req.headers.authorization ?? ''} ${req.headers['x-amz-security-token'] ?? ''}`;
          return answer(400, { 'content-type': 'application/xml' }, `<?xml version="1.0"?><Error><Code>${echoed}</Code><Message>bad request: ${echoed}</Message></Error>`);
        }
        case 'endless': {
          const prefix = new URL(req.url ?? '/', 'http://x').searchParams.get('prefix') ?? '';
          res.writeHead(200, { 'content-type': 'application/xml' });
          res.write(`<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>lake</Name><IsTruncated>true</IsTruncated><NextContinuationToken>T${this.applied}</NextContinuationToken>`);
          for (let i = 0; i < ENDLESS_PAGE_KEYS; i++) res.write(`<Contents><Key>${prefix}${this.applied}-${i}</Key></Contents>`);
          return res.end('</ListBucketResult>');
        }
      }
    });
  }

  private forward(req: IncomingMessage, body: Buffer, done: (answer: IncomingMessage, data: Buffer) => void): void {
    const upstream = httpRequest({ host: '127.0.0.1', port: this.target, method: req.method, path: req.url, headers: req.headers }, (answer) => {
      const chunks: Buffer[] = [];
      answer.on('data', (chunk: Buffer) => chunks.push(chunk));
      answer.on('end', () => done(answer, Buffer.concat(chunks)));
    });
    upstream.on('error', () => req.socket.destroy());
    upstream.end(body);
  }
}

/** The environment of a command reaching the server through the proxy, with its own home and `cache`. */
function envThroughProxy(cache = join(home, 'cache')): NodeJS.ProcessEnv {
  return {
    ...process.env,
    HOME: home,
    XDG_CONFIG_HOME: join(home, 'config'),
    XDG_DATA_HOME: join(home, 'data'),
    XDG_CACHE_HOME: cache,
    AWS_ENDPOINT_URL_S3: proxy.endpoint,
    AWS_ACCESS_KEY_ID: TEST_ACCESS_KEY,
    AWS_SECRET_ACCESS_KEY: TEST_SECRET_KEY,
    AWS_REGION: 'us-west-2',
  };
}

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/**
 * Runs trajstore through the proxy. `stop`: a signal sent once `when` holds. A run still going after
 * `deadlineMs` is killed (code null): what the old code did against a server that never answers.
 */
async function trajstore(args: string[], options: { env?: NodeJS.ProcessEnv; cache?: string; stop?: RunOptions['stop']; deadlineMs?: number } = {}): Promise<Run> {
  const env = { ...envThroughProxy(options.cache), ...options.env };
  const started = Date.now();
  const { code, stdout, stderr } = await runTool('trajstore', args, { env, cwd: home, timeoutMs: options.deadlineMs ?? 60_000, killSignal: 'SIGKILL', ...(options.stop ? { stop: options.stop } : {}) });
  return { code, stdout, stderr, ms: Date.now() - started };
}

/** The store itself, reached without the proxy: what is really on the server. */
function direct<T>(prefix: string, run: (store: S3ObjectStore) => Promise<T>): Promise<T> {
  const place: S3Place = { uri: `s3://lake/${prefix}`, bucket: 'lake', prefix, endpoint: server.endpoint, region: 'us-west-2', credentials: { accessKeyId: TEST_ACCESS_KEY, secretAccessKey: TEST_SECRET_KEY } };
  const store = new S3ObjectStore(place, {});
  return run(store).finally(() => store.close());
}

const snapshotOf = (prefix: string): Promise<string | undefined> =>
  direct(prefix, async (store) => {
    const bytes = await store.get('trajstore.json');
    return bytes && (JSON.parse(bytes.toString('utf8')) as { snapshot_id: string }).snapshot_id;
  });

/** The runs of a dataset, by source, read from the server with an empty cache. */
async function runsOf(prefix: string): Promise<string> {
  proxy.set();
  const listed = await trajstore(['list', `s3://lake/${prefix}`, '--format', 'csv'], { cache: scratchDir('s3-hostile-reader') });
  assert.is(listed.code, 0, listed.stderr);
  return listed.stdout;
}

async function create(prefix: string, from = STORYLINE): Promise<void> {
  proxy.set();
  const made = await trajstore(['import', '-f', from, '-t', `s3://lake/${prefix}`]);
  assert.is(made.code, 0, made.stderr);
}

test.before(async () => {
  server = await S3TestServer.start();
  await server.createBucket('lake');
  proxy = await HostileProxy.open(server.port);
});

test.after(async () => {
  await proxy?.close();
  await server?.stop();
});

test('a server that never answers: a read ends with exit 6 naming the object once the request time limit passes (each attempt)', async () => {
  await create('silent');
  proxy.set({ act: 'hang', match: /./ });
  const read = await trajstore(['list', 's3://lake/silent'], { cache: scratchDir('s3-hostile-silent'), env: { TRAJSTORE_S3_TIMEOUT_MS: '200' }, deadlineMs: 30_000 });
  assert.is(read.code, 6, read.stderr);
  assert.match(read.stderr, /s3:\/\/lake\/silent\/trajstore\.json: no answer from the object store within 0\.2 s \(5 attempts\)/);
  assert.is(proxy.count(/^hang GET \/lake\/silent\/trajstore\.json/), 5);
  const bad = await trajstore(['list', 's3://lake/silent'], { env: { TRAJSTORE_S3_TIMEOUT_MS: 'soon' } });
  assert.is(bad.code, 2, bad.stderr);
  assert.match(bad.stderr, /TRAJSTORE_S3_TIMEOUT_MS/);
});

test('a signal stops a hanging request at once: an append whose manifest put hangs (143), a drop whose commit hangs (130); the dataset stays as it was', async () => {
  await create('stopped');
  const before = await snapshotOf('stopped');
  const cache = join(home, 'cache-stopped');
  proxy.set({ act: 'hang', match: /^PUT \/lake\/stopped\/trajstore\.json/ });
  let since = 0;
  const hanging = (): boolean => {
    if (proxy.count(/^hang PUT/) === 0) return false;
    since = Date.now();
    return true;
  };
  const append = await trajstore(['import', '-f', ATIF, '-t', 's3://lake/stopped', '--mode', 'append'], { cache, stop: { signal: 'SIGTERM', when: hanging }, deadlineMs: 30_000 });
  assert.is(append.code, 143, append.stderr);
  assert.ok(Date.now() - since < 5_000, `stopped ${Date.now() - since} ms after the signal`);
  assert.match(append.stderr, /may have taken the commit/);
  assert.equal(readdirSync(join(cache, 'trajstore', 's3', 'builds')), [], 'the build is removed');
  assert.is(await snapshotOf('stopped'), before);

  // Readers and drop's check stop at once too, while a GET hangs.
  proxy.set({ act: 'hang', match: /^GET \/lake\/stopped\/trajstore\.json/ });
  for (const [args, signal, code] of [[['list', 's3://lake/stopped'], 'SIGINT', 130], [['query', 's3://lake/stopped', '--sql', 'SELECT 1'], 'SIGTERM', 143], [['drop', 's3://lake/stopped', '--yes'], 'SIGINT', 130]] as const) {
    const seen = proxy.count(/^hang GET/);
    const started = Date.now();
    const r = await trajstore([...args], { cache: scratchDir('s3-hostile-reader'), stop: { signal, when: () => proxy.count(/^hang GET/) > seen }, deadlineMs: 30_000 });
    assert.is(r.code, code, `${args[0]}: ${r.stderr}`);
    assert.ok(Date.now() - started < 10_000, `${args[0]} stopped in ${Date.now() - started} ms`);
  }

  // A drop's commit: the put of its marker over the manifest.
  proxy.set({ act: 'hang', match: /^PUT \/lake\/stopped\/trajstore\.json/ });
  const drop = await trajstore(['drop', 's3://lake/stopped', '--yes'], { stop: { signal: 'SIGINT', when: () => proxy.count(/^hang PUT/) > 0 }, deadlineMs: 30_000 });
  assert.is(drop.code, 130, drop.stderr);
  proxy.set();
  assert.is(await snapshotOf('stopped'), before);
});

test('a listing that does not advance stops with exit 6 naming the prefix; one past the key limit with exit 5; an append still commits and warns', async () => {
  await create('looping');
  proxy.set({ act: 'same-token', match: /list-type=2/ });
  const drop = await trajstore(['drop', 's3://lake/looping', '--yes'], { deadlineMs: 30_000 });
  assert.is(drop.code, 6, drop.stderr);
  assert.match(drop.stderr, /s3:\/\/lake\/looping\/: the object store's listing does not advance/);
  assert.is(proxy.count(/^same-token/), 2);
  // The reclamation after a commit lists too: the commit stands, and says what failed.
  const before = await snapshotOf('looping');
  proxy.set({ act: 'same-token', match: /list-type=2/ });
  const append = await trajstore(['import', '-f', ATIF, '-t', 's3://lake/looping', '--mode', 'append'], { deadlineMs: 30_000 });
  assert.is(append.code, 0, append.stderr);
  assert.match(append.stderr, /reclaiming superseded objects failed .*listing does not advance/);
  assert.is.not(await snapshotOf('looping'), before);

  proxy.set({ act: 'endless', match: /list-type=2/ });
  const endless = await trajstore(['drop', 's3://lake/looping', '--yes'], { deadlineMs: 60_000 });
  assert.is(endless.code, 5, endless.stderr);
  assert.match(endless.stderr, `s3://lake/looping/: the listing passed ${MAX_LISTED_KEYS.toLocaleString('en-US')} keys`);
  assert.is(proxy.count(/^endless/), Math.floor(MAX_LISTED_KEYS / ENDLESS_PAGE_KEYS) + 1, 'it stopped at the first page past the limit');
});

test('the manifest put took effect but its answer was lost: the retry meets 412, and the writer finds its own commit (append and create exit 0, no run doubled)', async () => {
  await create('lost-ack');
  const once = await runsOf('lost-ack');
  proxy.set({ act: 'reset-after', match: /^PUT \/lake\/lost-ack\/trajstore\.json/, times: 1 });
  const append = await trajstore(['import', '-f', ATIF, '-t', 's3://lake/lost-ack', '--mode', 'append']);
  assert.is(append.code, 0, append.stderr);
  assert.is(proxy.count(/^(reset-after|pass) PUT \/lake\/lost-ack\/trajstore\.json/), 2, 'the put was sent again');
  const after = await runsOf('lost-ack');
  assert.is(after.trim().split('\n').length, once.trim().split('\n').length + 2, `the two ATIF files once each:\n${after}`);

  // Another writer commits on top before the retry: the current snapshot descends from this one's.
  const meanwhile = async (): Promise<void> => {
    const other = await trajstore(['import', '-f', STORYLINE, '-t', 's3://lake/lost-ack', '--mode', 'append']);
    assert.is(other.code, 0, other.stderr);
  };
  proxy.set({ act: 'reset-after', match: /^PUT \/lake\/lost-ack\/trajstore\.json/, times: 1, meanwhile });
  const raced = await trajstore(['import', '-f', ATIF, '-t', 's3://lake/lost-ack', '--mode', 'append']);
  assert.is(raced.code, 0, raced.stderr);
  // Runs in all (the third column of list's CSV): the first listing held one create of STORYLINE.
  const total = (csv: string): number => csv.trim().split('\n').slice(1).reduce((n, line) => n + Number(line.split(',')[2]), 0);
  const afterRace = await runsOf('lost-ack');
  assert.is(total(afterRace), total(after) + (total(after) - total(once)) + total(once), `both commits, each once:\n${afterRace}`);

  proxy.set({ act: 'reset-after', match: /^PUT \/lake\/lost-ack-create\/trajstore\.json/, times: 1 });
  const created = await trajstore(['import', '-f', ATIF, '-t', 's3://lake/lost-ack-create']);
  assert.is(created.code, 0, created.stderr);
  assert.match(await runsOf('lost-ack-create'), /release-notes\.atif\.json/);
});

test('a part upload that meets one 503 is sent again, whole; one that meets only 503s fails with exit 6 after 5 attempts, as many as were made; the SDK prints nothing', async () => {
  proxy.set({ act: 'slowdown', match: /^PUT \/lake\/throttled\/parts\//, times: 1 });
  const once = await trajstore(['import', '-f', ATIF, '-t', 's3://lake/throttled']);
  assert.is(once.code, 0, once.stderr);
  assert.not.match(once.stderr, /non-retryable|error/i);
  const part = proxy.seen.find((line) => line.startsWith('slowdown'))!.split(' ')[2]!.split('?')[0]!;
  assert.is(proxy.count(new RegExp(`^pass PUT ${part}`)), 1, 'the refused part was put again');
  assert.match(await runsOf('throttled'), /release-notes\.atif\.json/);

  proxy.set({ act: 'slowdown', match: /^PUT \/lake\/throttled-always\/parts\// });
  const always = await trajstore(['import', '-f', ATIF, '-t', 's3://lake/throttled-always']);
  assert.is(always.code, 6, always.stderr);
  assert.match(always.stderr, /parts\/\S+\.parquet: the object store failed \(HTTP 503 SlowDown\) after 5 attempts/);
  assert.is(proxy.count(/^slowdown PUT/), 5);
  assert.not.match(always.stderr, /non-retryable/);
});

test('an upload damaged in transit is sent again and never committed damaged; one damaged every time, or answered with an ETag that is not its MD5, exits 6 naming the object and commits nothing', async () => {
  await create('upload-damaged', ATIF);
  const clean = await runsOf('upload-damaged');
  const before = await snapshotOf('upload-damaged');
  proxy.set({ act: 'corrupt-upload', match: /^PUT \/lake\/upload-damaged\/parts\/steps\//, times: 1 });
  const once = await trajstore(['import', '-f', STORYLINE, '-t', 's3://lake/upload-damaged', '--mode', 'append']);
  assert.is(once.code, 0, once.stderr);
  assert.is(proxy.count(/^pass PUT \/lake\/upload-damaged\/parts\/steps\//), 1, 'the damaged part was sent again');
  const grown = await runsOf('upload-damaged');
  assert.match(grown, /release-notes-0001\.storyline\.json/, 'every reader reads the appended runs');
  const appended = await snapshotOf('upload-damaged');

  for (const act of ['corrupt-upload', 'wrong-etag'] as const) {
    proxy.set({ act, match: /^PUT \/lake\/upload-damaged\/parts\/steps\// });
    const always = await trajstore(['import', '-f', ATIF, '-t', 's3://lake/upload-damaged', '--mode', 'append']);
    assert.is(always.code, 6, `${act}: ${always.stderr}`);
    assert.match(always.stderr, /s3:\/\/lake\/upload-damaged\/parts\/steps\/\S+\.parquet: 5 uploads came damaged/, act);
    assert.is(await snapshotOf('upload-damaged'), appended, `${act}: nothing committed`);
  }
  assert.is.not(appended, before);
  assert.is(await runsOf('upload-damaged'), grown);
  assert.ok(clean.length < grown.length);
});

/**
 * An input whose contents part passes MULTIPART_PART_BYTES, so that it goes up as a multipart upload
 * of two parts: one ATIF file whose steps hold random text, which does not compress. New each time:
 * an append stores only contents the dataset lacks.
 */
function bigInput(): string {
  const dir = scratchDir('s3-hostile-big');
  const stepBytes = 768 * 1024;
  const steps = Array.from({ length: Math.ceil((1.5 * MULTIPART_PART_BYTES) / stepBytes) }, (_, i) => ({
    step_id: i + 1,
    timestamp: '2026-03-02T14:00:00Z',
    source: i % 2 === 0 ? 'user' : 'agent',
    message: randomBytes(stepBytes).toString('base64'),
  }));
  writeFileSync(join(dir, 'big.atif.json'), JSON.stringify({ schema_version: 'ATIF-v1.7', session_id: 'big', trajectory_id: 'big-1', agent: { name: 'writer', version: '1', model_name: 'demo' }, steps }));
  return dir;
}

/** The keys of the multipart uploads under a prefix begun and neither completed nor aborted: parts the server keeps (and bills). */
async function uploadsLeft(prefix: string): Promise<string[]> {
  const client = new S3Client({ endpoint: server.endpoint, forcePathStyle: true, region: 'us-west-2', credentials: { accessKeyId: TEST_ACCESS_KEY, secretAccessKey: TEST_SECRET_KEY } });
  try {
    const out = await client.send(new ListMultipartUploadsCommand({ Bucket: 'lake', Prefix: `${prefix}/` }));
    return (out.Uploads ?? []).map((upload) => upload.Key ?? '');
  } finally {
    client.destroy();
  }
}

test('a multipart upload: a part damaged in transit is sent again, alone; parts damaged every time, answered with a wrong ETag or refused, a completion answered with an ETag not that of the parts, or a stop: no commit, no object, no upload left', async () => {
  await create('mp', ATIF);
  const PARTS = /^PUT \/lake\/mp\/parts\/contents\/.*partNumber=/;
  const cache = join(home, 'cache-mp');
  proxy.set({ act: 'corrupt-upload', match: PARTS, times: 1 });
  const once = await trajstore(['import', '-f', bigInput(), '-t', 's3://lake/mp', '--mode', 'append'], { cache });
  assert.is(once.code, 0, once.stderr);
  const damaged = proxy.seen.find((line) => line.startsWith('corrupt-upload'))!.split(' ')[2]!;
  const [path, query] = damaged.split('?') as [string, string];
  const partNumber = new URLSearchParams(query).get('partNumber');
  assert.is(proxy.seen.filter((line) => line.startsWith(`pass PUT ${path}?`) && new URLSearchParams(line.split('?')[1]).get('partNumber') === partNumber).length, 1, 'the damaged part was sent again');
  assert.is(proxy.count(/^pass POST \/lake\/mp\/parts\/contents\/\S+\?uploads/), 1, 'in the same upload');
  const key = path.slice('/lake/mp/'.length);
  const local: string[] = [];
  walkFiles(join(cache, 'trajstore', 's3', 'parts'), (rel, _entry, full) => rel.endsWith(key) && local.push(full));
  const sent = readFileSync(local[0]!);
  assert.ok(sent.length > MULTIPART_PART_BYTES, `a part of ${sent.length} bytes goes up in parts`);
  assert.ok((await direct('mp', (store) => store.get(key)))?.equals(sent), 'the server holds the bytes sent');

  // A completion that took effect, its answer lost: the SDK's retry meets NoSuchUpload, and the object's ETag shows the upload done.
  const COMPLETE = /^POST \/lake\/mp\/parts\/contents\/.*uploadId=/;
  proxy.set({ act: 'reset-after', match: COMPLETE, times: 1 });
  const lost = await trajstore(['import', '-f', bigInput(), '-t', 's3://lake/mp', '--mode', 'append'], { cache: scratchDir('s3-hostile-mp') });
  assert.is(lost.code, 0, lost.stderr);
  assert.is(proxy.count(/^(reset-after|pass) POST \/lake\/mp\/.*uploadId=/), 2, 'the completion was sent again');
  const committed = await snapshotOf('mp');
  const big = bigInput();

  for (const [act, match, said] of [
    ['corrupt-upload', PARTS, '5 uploads of part \\d came damaged'],
    ['wrong-etag', PARTS, '5 uploads of part \\d came damaged'],
    ['slowdown', PARTS, 'the object store failed \\(HTTP 503 SlowDown\\) after 5 attempts'],
    ['wrong-complete-etag', COMPLETE, '5 uploads came damaged \\(the last: the ETag the server answered is not that of the parts sent'],
  ] as const) {
    proxy.set({ act, match });
    const r = await trajstore(['import', '-f', big, '-t', 's3://lake/mp', '--mode', 'append'], { cache: scratchDir('s3-hostile-mp') });
    assert.is(r.code, 6, `${act}: ${r.stderr}`);
    const named = new RegExp(`s3://lake/mp/(parts/contents/\\S+\\.parquet): ${said}`).exec(r.stderr);
    assert.ok(named, `${act}: ${r.stderr}`);
    proxy.set();
    assert.is(await snapshotOf('mp'), committed, `${act}: nothing committed`);
    assert.is(await direct('mp', (store) => store.size(named![1]!)), undefined, `${act}: the object is not on the server`);
    assert.equal(await uploadsLeft('mp'), [], `${act}: the upload was aborted`);
  }

  proxy.set({ act: 'hang', match: PARTS });
  const stopped = await trajstore(['import', '-f', big, '-t', 's3://lake/mp', '--mode', 'append'], { cache: scratchDir('s3-hostile-mp'), stop: { signal: 'SIGINT', when: () => proxy.count(/^hang PUT/) > 0 }, deadlineMs: 30_000 });
  assert.is(stopped.code, 130, stopped.stderr);
  proxy.set();
  assert.equal(await uploadsLeft('mp'), [], 'a stop aborts the upload');
  assert.is(await snapshotOf('mp'), committed);
});

/** Aborts every multipart upload under a prefix (what a test left on purpose). */
async function abortUploads(prefix: string): Promise<void> {
  const client = new S3Client({ endpoint: server.endpoint, forcePathStyle: true, region: 'us-west-2', credentials: { accessKeyId: TEST_ACCESS_KEY, secretAccessKey: TEST_SECRET_KEY } });
  try {
    const out = await client.send(new ListMultipartUploadsCommand({ Bucket: 'lake', Prefix: `${prefix}/` }));
    for (const upload of out.Uploads ?? []) await client.send(new AbortMultipartUploadCommand({ Bucket: 'lake', Key: upload.Key, UploadId: upload.UploadId }));
  } finally {
    client.destroy();
  }
}

test('a multipart upload begun by an answer that cannot be read, names no upload, or was lost and sent again: none is left open on the server (found by listing the part\'s uploads); one that cannot be ended is named in the error', async () => {
  await create('begun', ATIF);
  const committed = await snapshotOf('begun');
  const BEGIN = /^POST \/lake\/begun\/parts\/contents\/\S+\?uploads/;
  for (const [what, rule, said] of [
    ['XML cut off', { act: 'rewrite', match: BEGIN, rewrite: (xml: string) => xml.slice(0, xml.length >> 1) }, "the object store's answer could not be read \\(HTTP 200\\)"],
    ['no UploadId', { act: 'rewrite', match: BEGIN, rewrite: (xml: string) => xml.replace(/<UploadId>[^<]*<\/UploadId>/, '') }, 'the object store began a multipart upload without naming it \\(no UploadId\\)'],
  ] as const) {
    proxy.set(rule);
    const r = await trajstore(['import', '-f', bigInput(), '-t', 's3://lake/begun', '--mode', 'append'], { cache: scratchDir('s3-hostile-begun') });
    assert.is(r.code, 6, `${what}: ${r.stderr}`);
    assert.match(r.stderr, new RegExp(`s3://lake/begun/parts/contents/\\S+\\.parquet: ${said}`), what);
    assert.not.match(r.stderr, /may be left open/, what);
    proxy.set();
    assert.equal(await uploadsLeft('begun'), [], `${what}: the upload it began was aborted`);
    assert.is(await snapshotOf('begun'), committed, `${what}: nothing committed`);
  }

  // The answer lost: the SDK begins another upload, which goes on; the first is aborted.
  proxy.set({ act: 'reset-after', match: BEGIN, times: 1 });
  const lost = await trajstore(['import', '-f', bigInput(), '-t', 's3://lake/begun', '--mode', 'append'], { cache: scratchDir('s3-hostile-begun') });
  assert.is(lost.code, 0, lost.stderr);
  assert.is(proxy.count(/^(reset-after|pass) POST \/lake\/begun\/\S+\?uploads/), 2, 'begun twice');
  proxy.set();
  assert.equal(await uploadsLeft('begun'), [], 'the upload of the lost answer was aborted');
  const appended = await snapshotOf('begun');

  // Neither the uploads of the key can be listed nor a known upload aborted: the error names the object.
  for (const [what, match] of [
    ['begun and not listed', /[?&]uploads(=|&|$)/],
    ['parts refused and not aborted', /^(PUT|DELETE) \/lake\/begun\/\S+uploadId=/],
  ] as const) {
    // Empty answers: an upload begun without a name, a listing of uploads that lists nothing.
    proxy.set(what === 'begun and not listed' ? { act: 'rewrite', match, rewrite: () => '' } : { act: 'slowdown', match });
    const r = await trajstore(['import', '-f', bigInput(), '-t', 's3://lake/begun', '--mode', 'append'], { cache: scratchDir('s3-hostile-begun') });
    assert.is(r.code, 6, `${what}: ${r.stderr}`);
    assert.match(r.stderr, /hint: a multipart upload of s3:\/\/lake\/begun\/parts\/contents\/\S+\.parquet may be left open on the server/, `${what}: ${r.stderr}`);
    proxy.set();
    assert.is((await uploadsLeft('begun')).length, 1, `${what}: the upload named is the one left`);
    await abortUploads('begun');
    assert.is(await snapshotOf('begun'), appended, `${what}: nothing committed`);
  }
});

/** A DeleteObjects answer (a DeleteResult) listing an <Error> of `code` for each key of the request `xml`. */
const deleteErrors = (code: string) => (xml: string): string =>
  `<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">${[...xml.matchAll(/<Key>([^<]*)<\/Key>/g)].map((m) => `<Error><Key>${m[1]}</Key><Code>${code}</Code><Message>failed</Message></Error>`).join('')}</DeleteResult>`;

test('a bulk delete answered 200 that did not delete every key (an <Error> listed, keys left out, an answer that cannot be read) is no success: what is left is asked for again; left after 5 attempts, drop exits 6 naming a key and the error code (AccessDenied: 2 at once), and a drop run again finishes it', async () => {
  const BULK = /^POST \/lake\/\?delete/;
  const keysOf = (prefix: string): Promise<string[]> => direct(prefix, (store) => store.list(''));

  // One answer listing every key as failed: sent again, and the drop completes.
  await create('bulk-once', ATIF);
  proxy.set({ act: 'answer', match: BULK, times: 1, rewrite: deleteErrors('InternalError') });
  const once = await trajstore(['drop', 's3://lake/bulk-once', '--yes']);
  assert.is(once.code, 0, once.stderr);
  assert.is(proxy.count(/^(answer|pass) POST \/lake\/\?delete/), 2, 'the bulk delete was sent again');
  assert.equal(await keysOf('bulk-once'), [], 'every object is gone');

  for (const [what, rule, said, code, attempts] of [
    ['an Error for every key', { act: 'answer', match: BULK, rewrite: deleteErrors('InternalError') }, 'InternalError', 6, 5],
    ['keys left out', { act: 'answer', match: BULK, rewrite: () => '<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"></DeleteResult>' }, 'not listed as deleted', 6, 5],
    ['an empty answer', { act: 'answer', match: BULK, rewrite: () => '' }, 'not listed as deleted', 6, 5],
    ['access denied', { act: 'answer', match: BULK, rewrite: deleteErrors('AccessDenied') }, 'AccessDenied', 2, 1],
  ] as const) {
    const prefix = `bulk-${what.replace(/ /g, '-')}`;
    await create(prefix, ATIF);
    const before = await keysOf(prefix);
    proxy.set(rule);
    const drop = await trajstore(['drop', `s3://lake/${prefix}`, '--yes']);
    assert.is(drop.code, code, `${what}: ${drop.stderr}`);
    assert.match(drop.stderr, new RegExp(`s3://lake/${prefix}/(parts|snapshots)/\\S+: the object store did not delete it \\(${said}\\); \\d+ of the \\d+ object\\(s\\) asked for were not deleted`), what);
    assert.is(proxy.count(/^answer POST/), attempts, `${what}: attempts`);
    assert.match(drop.stderr, /hint: the dataset is dropped but objects of it are left: run drop again/, what);
    proxy.set();
    assert.equal(await keysOf(prefix), before, `${what}: the drop's marker holds the manifest's key, the rest is left`);
    const read = await trajstore(['list', `s3://lake/${prefix}`]);
    assert.is(read.code, 3, `${what}: ${read.stderr}`);
    assert.match(read.stderr, `s3://lake/${prefix}: is being dropped (a drop committed there and has not finished)`);
    // Behind the marker no writer commits: a drop run again finishes at once.
    const again = await trajstore(['drop', `s3://lake/${prefix}`, '--yes']);
    assert.is(again.code, 0, `${what}: ${again.stderr}`);
    assert.equal(await keysOf(prefix), [], `${what}: every object is gone`);
  }

  // A server that wants a Content-MD5 on a bulk delete (S3's documentation says it is required; newer
  // SDKs send a CRC32 instead, which Ceph RGW, Dell ECS and others refuse): it gets one.
  await create('bulk-md5', ATIF);
  proxy.set({ act: 'require-md5', match: BULK });
  const md5 = await trajstore(['drop', 's3://lake/bulk-md5', '--yes']);
  assert.is(md5.code, 0, md5.stderr);
  assert.is(proxy.count(/^require-md5 POST/), 1);
  proxy.set();
  assert.equal(await keysOf('bulk-md5'), [], 'every object is gone');

  // An answer whose XML is cut off: exit 6, sent again first.
  await create('bulk-cut', ATIF);
  proxy.set({ act: 'rewrite', match: BULK, rewrite: (xml) => xml.slice(0, xml.length >> 1) });
  const cut = await trajstore(['drop', 's3://lake/bulk-cut', '--yes']);
  assert.is(cut.code, 6, cut.stderr);
  assert.match(cut.stderr, /s3:\/\/lake\/bulk-cut\/\S+: the object store did not delete it \(not listed as deleted\)/);
  assert.is(proxy.count(/^rewrite POST/), 5);
});

test('a download damaged in transit is fetched again and never cached; one damaged every time exits 6 naming the object; the expected size is checked', async () => {
  await create('damaged', ATIF);
  const clean = await runsOf('damaged');
  const cache = join(home, 'cache-damaged');
  proxy.set({ act: 'corrupt', match: /^GET \/lake\/damaged\/parts\/steps\//, times: 1 });
  const once = await trajstore(['list', 's3://lake/damaged', '--format', 'csv'], { cache });
  assert.is(once.code, 0, once.stderr);
  assert.is(once.stdout, clean);

  const always = join(home, 'cache-damaged-always');
  proxy.set({ act: 'corrupt', match: /^GET \/lake\/damaged\/parts\/steps\// });
  const broken = await trajstore(['list', 's3://lake/damaged'], { cache: always });
  assert.is(broken.code, 6, broken.stderr);
  assert.match(broken.stderr, /s3:\/\/lake\/damaged\/parts\/steps\/\S+\.parquet: 5 downloads came damaged \(the last: the bytes do not match the MD5/);
  const cached: string[] = [];
  walkFiles(join(always, 'trajstore', 's3', 'parts'), (rel) => cached.push(rel));
  assert.not.ok(cached.some((rel) => rel.includes('steps')), `no damaged part is cached: ${cached.join(', ')}`);
  proxy.set();
  const healed = await trajstore(['list', 's3://lake/damaged', '--format', 'csv'], { cache: always });
  assert.is(healed.code, 0, healed.stderr);
  assert.is(healed.stdout, clean);

  // A size the caller knows (a snapshot's part.bytes) that the object, as the server holds it, does not have: the dataset is damaged, no download mends it.
  await direct('damaged', async (store) => {
    const key = (await store.list('parts/steps/'))[0]!;
    const size = (await store.size(key))!;
    const path = join(home, 'downloaded.parquet');
    await store.download(key, path, { bytes: size });
    assert.is(readFileSync(path).length, size);
    const wrong = join(home, 'wrong-size.parquet');
    const error = await store.download(key, wrong, { bytes: size + 1 }).then(() => undefined, (e: unknown) => e as Error & { exitCode?: number });
    assert.is(error?.exitCode, 2, String(error));
    assert.match(String(error?.message), /the object is \d+ bytes, the snapshot lists \d+: the dataset is damaged/);
    assert.not.ok(existsSync(wrong));
  });
});

test('a part uploaded in parts (its ETag no MD5 of its bytes) damaged in transit on its way down, its length kept, is fetched again and never cached; one damaged every time exits 6 naming the object', async () => {
  const big = bigInput();
  proxy.set();
  const made = await trajstore(['import', '-f', big, '-t', 's3://lake/mp-read'], { cache: scratchDir('s3-hostile-mp-read') });
  assert.is(made.code, 0, made.stderr);
  const key = await direct('mp-read', async (store) => {
    for (const k of await store.list('parts/contents/')) if (((await store.size(k)) ?? 0) > MULTIPART_PART_BYTES) return k;
    throw new Error('no part went up in parts');
  });
  const served = (await direct('mp-read', (store) => store.get(key)))!;
  const exported = (cache: string): Promise<Run> => trajstore(['export', '-f', 's3://lake/mp-read', '-t', '-', '-o', 'atif'], { cache });
  const cachedCopy = (cache: string): Buffer | undefined => {
    const found: string[] = [];
    walkFiles(join(cache, 'trajstore', 's3', 'parts'), (rel, _entry, full) => rel.endsWith(key) && found.push(full));
    return found[0] === undefined ? undefined : readFileSync(found[0]);
  };

  const cache = scratchDir('s3-hostile-mp-read');
  const GET = new RegExp(`^GET /lake/mp-read/${key.replace(/[.]/g, '\\.')}`);
  proxy.set({ act: 'corrupt', match: GET, times: 1 });
  const once = await exported(cache);
  assert.is(once.code, 0, once.stderr);
  assert.is(proxy.count(/^corrupt GET/), 1);
  assert.is(proxy.count(new RegExp(`^pass ${GET.source.slice(1)}`)), 1, 'fetched again');
  assert.ok(cachedCopy(cache)?.equals(served), 'the cache holds the bytes the server holds');

  const always = scratchDir('s3-hostile-mp-read');
  proxy.set({ act: 'corrupt', match: GET });
  const broken = await exported(always);
  assert.is(broken.code, 6, broken.stderr);
  assert.match(broken.stderr, new RegExp(`s3://lake/mp-read/${key.replace(/[.]/g, '\\.')}: 5 downloads came damaged \\(the last: the bytes do not match the SHA-256 the snapshot lists`));
  assert.is(cachedCopy(always), undefined, 'no damaged part is cached');
});

test('a manifest whose body is cut off is fetched again (the SDK retries a request, not its body); one cut off every time exits 6 naming it', async () => {
  await create('cut-manifest', ATIF);
  const clean = await runsOf('cut-manifest');
  proxy.set({ act: 'cut-body', match: /^GET \/lake\/cut-manifest\/trajstore\.json/, times: 1 });
  const once = await trajstore(['list', 's3://lake/cut-manifest', '--format', 'csv'], { cache: join(home, 'cache-cut') });
  assert.is(once.code, 0, once.stderr);
  assert.is(once.stdout, clean);
  assert.is(proxy.count(/^pass GET \/lake\/cut-manifest\/trajstore\.json/), 1, 'fetched again after the cut');

  proxy.set({ act: 'cut-body', match: /^GET \/lake\/cut-manifest\/trajstore\.json/ });
  const always = await trajstore(['list', 's3://lake/cut-manifest'], { cache: join(home, 'cache-cut-always') });
  assert.is(always.code, 6, always.stderr);
  assert.match(always.stderr, /s3:\/\/lake\/cut-manifest\/trajstore\.json: 5 downloads came damaged \(the last: the transfer broke off/);
  assert.is(proxy.count(/^cut-body/), 5);
});

test('a part missing from the server is not found (exit 3), naming it; a malformed region exits 2 naming the region and where it came from', async () => {
  await create('missing', ATIF);
  const key = await direct('missing', async (store) => {
    const part = (await store.list('parts/runs/'))[0]!;
    await store.delete(part);
    return part;
  });
  proxy.set();
  const read = await trajstore(['list', 's3://lake/missing'], { cache: scratchDir('s3-hostile-missing') });
  assert.is(read.code, 3, read.stderr);
  assert.match(read.stderr, new RegExp(`s3://lake/missing/${key.replace(/[.]/g, '\\.')}: no such object`));

  for (const [variable, env] of [['AWS_REGION', { AWS_REGION: 'bad region!' }], ['AWS_DEFAULT_REGION', { AWS_REGION: '', AWS_DEFAULT_REGION: 'eu/west' }]] as const) {
    const r = await trajstore(['list', 's3://lake/missing'], { env });
    assert.is(r.code, 2, r.stderr);
    assert.match(r.stderr, new RegExp(`the region "${(env.AWS_DEFAULT_REGION ?? env.AWS_REGION).replace(/[!/]/g, '\\$&')}" \\(from ${variable}\\)`));
  }
});

test('a listing answer that is no ListObjectsV2 result (empty, an HTML page, XML cut off, not XML) stops a drop with exit 6 naming the prefix, before anything is deleted; so does one without the manifest', async () => {
  await create('unlisted', ATIF);
  const before = await snapshotOf('unlisted');
  for (const [what, rewrite] of [
    ['empty', () => ''],
    ['an HTML page', () => '<html><body><h1>Welcome</h1></body></html>'],
    ['XML cut off', (xml: string) => xml.slice(0, xml.length >> 1)],
    ['not XML', () => 'upstream connect error or disconnect/reset before headers'],
  ] as const) {
    proxy.set({ act: 'rewrite', match: /list-type=2/, rewrite });
    const drop = await trajstore(['drop', 's3://lake/unlisted', '--yes']);
    assert.is(drop.code, 6, `${what}: ${drop.stderr}`);
    assert.match(drop.stderr, /s3:\/\/lake\/unlisted\/: the object store's answer to a listing is not a ListObjectsV2 result/, what);
    assert.is(proxy.count(/^pass (DELETE|POST)/), 0, `${what}: nothing deleted`);
    assert.is(await snapshotOf('unlisted'), before, what);
  }
  // A listing that leaves out the manifest just read leaves out what the drop would delete.
  proxy.set({ act: 'rewrite', match: /list-type=2/, rewrite: () => '<?xml version="1.0"?><ListBucketResult><Name>lake</Name><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>' });
  const drop = await trajstore(['drop', 's3://lake/unlisted', '--yes']);
  assert.is(drop.code, 6, drop.stderr);
  assert.match(drop.stderr, /s3:\/\/lake\/unlisted: the object store's listing does not show the trajstore\.json it serves/);
  assert.is(await snapshotOf('unlisted'), before);
});

test('a drop meets listed keys that are no keys of a dataset (a `..` segment, a NUL, 2 KB long) or lie outside the prefix: refused before the manifest goes (exit 2, or 6 for a server listing outside the prefix), the dataset as it was', async () => {
  await create('strange', ATIF);
  const before = await snapshotOf('strange');
  const inject = (key: string) => (xml: string) => xml.replace('<Contents>', `<Contents><Key>${key}</Key><Size>1</Size></Contents><Contents>`);
  for (const [what, key, code, said] of [
    ['a .. segment', 'strange/parts/../../victim/trajstore.json', 2, /holds objects that are not part of a dataset \("parts\/\.\.\/\.\.\/victim\/trajstore\.json"\)/],
    ['a NUL', 'strange/parts/runs/a&#0;b.parquet', 2, /holds objects that are not part of a dataset \("parts\/runs\/a\\u0000b\.parquet"\)/],
    ['2 KB long', `strange/parts/runs/${'a'.repeat(2048)}.parquet`, 2, /holds objects that are not part of a dataset \("parts\/runs\/a{20,200}\.\.\."\)/],
    ['outside the prefix', 'elsewhere/trajstore.json', 6, /s3:\/\/lake\/strange\/: the object store listed "elsewhere\/trajstore\.json", which is not under the prefix asked for/],
  ] as const) {
    proxy.set({ act: 'rewrite', match: /list-type=2/, rewrite: inject(key) });
    const drop = await trajstore(['drop', 's3://lake/strange', '--yes']);
    assert.is(drop.code, code, `${what}: ${drop.stderr}`);
    assert.match(drop.stderr, said, what);
    assert.ok(drop.stderr.length < 1500, `${what}: a message of ${drop.stderr.length} characters`);
    assert.is(proxy.count(/^pass (DELETE|POST)/), 0, `${what}: nothing deleted`);
    assert.is(await snapshotOf('strange'), before, what);
  }
  // The reclamation after a commit deletes unlisted parts past the grace period: never a key that is not a part's.
  const old = `${(Date.parse('2020-01-01T00:00:00Z')).toString(36)}-0123abcd-0000.parquet`;
  proxy.set({ act: 'rewrite', match: /list-type=2&prefix=strange%2Fparts%2F/, rewrite: inject(`strange/parts/../../victim/parts/runs/${old}`) });
  const append = await trajstore(['import', '-f', STORYLINE, '-t', 's3://lake/strange', '--mode', 'append']);
  assert.is(append.code, 0, append.stderr);
  assert.is(append.stderr, '');
  assert.is(proxy.count(/^rewrite GET/), 1, 'the parts were listed');
  assert.is(proxy.count(/^pass DELETE .*\.\./), 0, proxy.seen.filter((line) => line.includes('DELETE')).join('\n'));
});

test('an answer whose body never ends: a manifest or a listing page stops with exit 5 naming the object, a part past the size its snapshot lists is fetched again, then exit 6; in a bounded time, the process whole, nothing cached', async () => {
  await create('endless-body', ATIF);
  for (const [what, match, args, code, said] of [
    ['the manifest', /^GET \/lake\/endless-body\/trajstore\.json/, ['list', 's3://lake/endless-body'], 5, /s3:\/\/lake\/endless-body\/trajstore\.json: the object store's answer passed 64 MiB; stopped/],
    ['a listing page', /list-type=2/, ['drop', 's3://lake/endless-body', '--yes'], 5, /s3:\/\/lake\/endless-body\/: the object store's answer passed 64 MiB; stopped/],
    ['a part', /^GET \/lake\/endless-body\/parts\/runs\//, ['export', '-f', 's3://lake/endless-body', '-t', '-', '-o', 'atif'], 6, /s3:\/\/lake\/endless-body\/parts\/runs\/\S+\.parquet: 5 downloads came damaged \(the last: more bytes arrived than the snapshot lists/],
  ] as const) {
    const cache = scratchDir('s3-hostile-endless');
    proxy.set({ act: 'endless-body', match });
    const r = await trajstore([...args], { cache, deadlineMs: 120_000 });
    assert.is(r.code, code, `${what}: ${r.stderr}`);
    assert.match(r.stderr, said, what);
    assert.ok(r.ms < 60_000, `${what}: ${r.ms} ms`);
    const cached: string[] = [];
    walkFiles(join(cache, 'trajstore', 's3', 'parts'), (rel) => cached.push(rel));
    assert.not.ok(cached.some((rel) => rel.includes('runs')), `${what}: nothing of it cached: ${cached.join(', ')}`);
  }
  proxy.set();
  assert.ok(await snapshotOf('endless-body'), 'the dataset stays');
});

test("a server that echoes the request's Authorization header and session token in its errors: no message names the access key, the secret or the token, at any log level", async () => {
  await create('echo', ATIF);
  const TOKEN = 'trajstore-test-session-token-5e1d07c2';
  proxy.set({ act: 'echo-auth', match: /./ });
  for (const level of ['warn', 'debug']) {
    for (const args of [['list', 's3://lake/echo'], ['import', '-f', ATIF, '-t', 's3://lake/echo', '--mode', 'append'], ['drop', 's3://lake/echo', '--yes'], ['export', '-f', 's3://lake/echo', '-t', '-', '-o', 'atif']]) {
      const r = await trajstore(['--log-level', level, ...args], { env: { AWS_SESSION_TOKEN: TOKEN } });
      const what = `${level} ${args[0]}`;
      assert.is(r.code, 2, `${what}: ${r.stderr}`);
      assert.match(r.stderr, /s3:\/\/lake\/echo\/trajstore\.json: the object store refused the request \(HTTP 400\)/, what);
      for (const secret of [TEST_ACCESS_KEY, TEST_SECRET_KEY, TOKEN]) assert.not.ok(`${r.stdout}${r.stderr}`.includes(secret), `${what}: ${r.stderr}`);
    }
  }
  assert.ok(proxy.count(/^echo-auth/) >= 8);
});

test('a server of another region than the one the request is signed for (400 AuthorizationHeaderMalformed): exit 2 naming the region it expects, with a hint to set the region', async () => {
  await create('region', ATIF);
  proxy.set({ act: 'wrong-region', match: /./ });
  for (const args of [['list', 's3://lake/region'], ['import', '-f', ATIF, '-t', 's3://lake/region', '--mode', 'append'], ['drop', 's3://lake/region', '--yes']]) {
    const r = await trajstore(args, { cache: scratchDir('s3-hostile-region') });
    assert.is(r.code, 2, `${args[0]}: ${r.stderr}`);
    assert.match(r.stderr, 's3://lake/region/trajstore.json: the object store expects requests signed for the region eu-central-1, not us-west-2 (HTTP 400 AuthorizationHeaderMalformed)', args[0]);
    assert.match(r.stderr, "hint: set the region (the pin's region, or AWS_REGION) to the server's", args[0]);
  }
  proxy.set();
});

test('a server that ignores If-Match on PUT, or answers 501 NotImplemented to a conditional PUT: an append and a drop exit 2 saying what it answered, the dataset as it was and no probe left', async () => {
  await create('conditions', ATIF);
  const before = await snapshotOf('conditions');
  for (const [act, answered] of [
    ['ignore-if-match', /it answered 200 to a PUT with If-Match: "[0-9a-f]{32}" of an ETag the object does not have/],
    ['conditions-not-implemented', /it answered 501 NotImplemented to a PUT with If-None-Match: \*/],
  ] as const) {
    proxy.set({ act, match: /^PUT / });
    for (const args of [['import', '-f', STORYLINE, '-t', 's3://lake/conditions', '--mode', 'append'], ['drop', 's3://lake/conditions', '--yes']]) {
      const r = await trajstore(args, { cache: scratchDir('s3-hostile-conditions') });
      assert.is(r.code, 2, `${act} ${args[0]}: ${r.stderr}`);
      assert.match(r.stderr, `s3://lake/conditions: the object store at ${proxy.endpoint} (bucket lake) does not honour conditional writes`);
      assert.match(r.stderr, answered, `${act} ${args[0]}`);
      assert.is(proxy.count(/PUT .*\/parts\//), 0, 'refused before any part went up');
    }
  }
  proxy.set();
  assert.is(await snapshotOf('conditions'), before);
  assert.equal((await direct('conditions', (store) => store.list(''))).filter((key) => !/^(trajstore\.json|snapshots\/|parts\/)/.test(key)), []);
});

test("a drop deleting the probe while it runs: the server's 200 to its If-None-Match put (a create, the key gone) is asked again of a new probe, and the append goes on", async () => {
  await create('probe-race', ATIF);
  // As a drop does: every key listed under the prefix deleted, the probe's among them.
  const dropProbes = (): Promise<void> => direct('probe-race', async (store) => void (await Promise.all((await store.list('.trajstore-probes/')).map((key) => store.delete(key)))));
  // The first probe's two puts (its create, then If-None-Match), not the second probe's.
  proxy.set({ act: 'meanwhile-if-none-match', match: /^PUT \/lake\/probe-race\/\.trajstore-probes\//, times: 2, meanwhile: dropProbes });
  const r = await trajstore(['import', '-f', STORYLINE, '-t', 's3://lake/probe-race', '--mode', 'append'], { cache: scratchDir('s3-hostile-probe-race') });
  assert.is(r.code, 0, r.stderr);
  assert.is(proxy.count(/^\S+ PUT \/lake\/probe-race\/\.trajstore-probes\//), 5, 'the first probe ends at its If-None-Match put, the second makes all three');
  proxy.set();
  assert.equal(await direct('probe-race', (store) => store.list('.trajstore-probes/')), [], 'no probe left');
});

test('serve of an s3:// dataset whose store fails: a request waits for one round of attempts (5), not two, answers 503 naming the object, and the next one after the store mends is answered', async () => {
  await create('served', ATIF);
  const served = await startServeProcess(['serve', 's3://lake/served', '--listen', '127.0.0.1:0'], { env: envThroughProxy(scratchDir('s3-hostile-serve')), cwd: home });
  try {
    const runs = (): Promise<Response> => fetch(`${served.url}api/mounts/default/runs`);
    assert.is((await runs()).status, 200);
    proxy.set({ act: 'slowdown', match: /^GET \/lake\/served\/trajstore\.json/ });
    const failing = await runs();
    assert.is(failing.status, 503);
    assert.match(await failing.text(), /s3:\/\/lake\/served\/trajstore\.json: the object store failed \(HTTP 503 SlowDown\) after 5 attempts/);
    assert.is(proxy.count(/^slowdown/), 5, 'one round of attempts');
    proxy.set();
    assert.is((await runs()).status, 200);
  } finally {
    await served.stop();
  }
});

test('an answer S3 does not give: a redirect to another host exits 2 saying so, not followed; an upload answer whose XML is cut off exits 6 (the store failing, not the input), nothing committed', async () => {
  await create('odd', ATIF);
  proxy.set({ act: 'redirect', match: /./ });
  const redirected = await trajstore(['list', 's3://lake/odd'], { cache: scratchDir('s3-hostile-odd') });
  assert.is(redirected.code, 2, redirected.stderr);
  assert.match(redirected.stderr, /s3:\/\/lake\/odd\/trajstore\.json: the object store redirects the request \(HTTP 307\)/);
  assert.match(redirected.stderr, /hint: .*endpoint/);
  assert.is(proxy.count(/^redirect/), 1, 'asked once, never again elsewhere');

  const committed = await snapshotOf('odd');
  proxy.set({ act: 'rewrite', match: /^POST \/lake\/odd\/parts\/contents\/\S+\?uploads/, rewrite: (xml) => xml.slice(0, xml.length >> 1) });
  const cut = await trajstore(['import', '-f', bigInput(), '-t', 's3://lake/odd', '--mode', 'append'], { cache: scratchDir('s3-hostile-odd') });
  assert.is(cut.code, 6, cut.stderr);
  assert.match(cut.stderr, /s3:\/\/lake\/odd\/parts\/contents\/\S+\.parquet: the object store's answer could not be read \(HTTP 200\)/);
  assert.is(await snapshotOf('odd'), committed);
});

test('a body that stalls half-way (the connection kept open): the manifest, a listing page and a part each end with exit 6 after 5 attempts of the request time limit, nothing written to the export target or the cache', async () => {
  await create('stalled', ATIF);
  const target = join(home, 'stalled-export');
  for (const [what, match, args, said] of [
    ['the manifest', /^GET \/lake\/stalled\/trajstore\.json/, ['list', 's3://lake/stalled'], /s3:\/\/lake\/stalled\/trajstore\.json: 5 downloads came damaged \(the last: nothing arrived for 0\.3 s\)/],
    ['a listing page', /list-type=2/, ['drop', 's3://lake/stalled', '--yes'], /s3:\/\/lake\/stalled\/: no answer from the object store within 0\.3 s \(5 attempts\)/],
    ['a part', /^GET \/lake\/stalled\/parts\/steps\//, ['export', '-f', 's3://lake/stalled', '-t', target, '-o', 'atif'], /s3:\/\/lake\/stalled\/parts\/steps\/\S+\.parquet: 5 downloads came damaged \(the last: nothing arrived for 0\.3 s\)/],
  ] as const) {
    const cache = scratchDir('s3-hostile-stalled');
    proxy.set({ act: 'stall-body', match });
    const r = await trajstore([...args], { cache, env: { TRAJSTORE_S3_TIMEOUT_MS: '300' }, deadlineMs: 60_000 });
    assert.is(r.code, 6, `${what}: ${r.stderr}`);
    assert.match(r.stderr, said, what);
    assert.is(proxy.count(/^stall-body/), 5, what);
    assert.not.ok(existsSync(target), `${what}: no export target`);
    const cached: string[] = [];
    walkFiles(join(cache, 'trajstore', 's3', 'parts'), (rel) => cached.push(rel));
    assert.not.ok(cached.some((rel) => rel.includes('steps')), `${what}: nothing of it cached: ${cached.join(', ')}`);
  }
  proxy.set();
  assert.ok(await snapshotOf('stalled'), 'the dataset stays');
});

test.run();
