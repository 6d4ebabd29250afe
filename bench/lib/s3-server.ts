/**
 * The S3-compatible server of the object-store benchmark and tests (in bench/lib/ so that both may use
 * it): scripts/s3-test-server.py (moto's S3, installed by scripts/setup.sh into .tools/test-python), a
 * real server process on loopback that honours conditional puts. `stop()` kills it (SIGKILL: the server-stopped-mid-import test wants it
 * gone at once); `start()` again serves an empty store on the same port.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createServer as createHttpServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';
import { freePort } from './free-port.js';
import { DIST } from './tools.js';

const REPO = join(DIST, '..');
/** The Python of the tests' tools (scripts/setup.sh `install_test_python`). */
export const TEST_PYTHON = join(REPO, '.tools', 'test-python', 'bin', 'python');
const SCRIPT = join(REPO, 'scripts', 's3-test-server.py');

/** Test credentials: fixed, and what the secrets-never-printed test looks for. */
export const TEST_ACCESS_KEY = 'AKIATRAJSTORETESTKEY';
export const TEST_SECRET_KEY = 'trajstore-test-secret-9f3c1e7a2b6d4058';

export function s3ServerInstalled(): boolean {
  return existsSync(TEST_PYTHON);
}

export class S3TestServer {
  private child: ChildProcess | undefined;
  private constructor(readonly port: number) {}

  get endpoint(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** The standard variables that reach this server (what a bare s3:// uri takes). */
  get env(): Record<string, string> {
    return { AWS_ENDPOINT_URL_S3: this.endpoint, AWS_ACCESS_KEY_ID: TEST_ACCESS_KEY, AWS_SECRET_ACCESS_KEY: TEST_SECRET_KEY, AWS_REGION: 'us-west-2' };
  }

  static async start(): Promise<S3TestServer> {
    if (!s3ServerInstalled()) throw new Error(`${TEST_PYTHON} is missing: run scripts/setup.sh`);
    const server = new S3TestServer(await freePort());
    await server.start();
    return server;
  }

  async start(): Promise<void> {
    const child = spawn(TEST_PYTHON, [SCRIPT, String(this.port)], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.child = child;
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-4000)));
    await new Promise<void>((resolve, reject) => {
      let out = '';
      child.stdout!.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        if (out.includes('listening')) resolve();
      });
      child.once('exit', (code) => reject(new Error(`the S3 test server exited (${code}): ${stderr}`)));
    });
  }

  /** Kills the server at once; what it stored is gone with it. */
  async stop(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
  }

  async createBucket(name: string): Promise<void> {
    const client = new S3Client({ endpoint: this.endpoint, forcePathStyle: true, region: 'us-west-2', credentials: { accessKeyId: TEST_ACCESS_KEY, secretAccessKey: TEST_SECRET_KEY } });
    try {
      await client.send(new CreateBucketCommand({ Bucket: name }));
    } finally {
      client.destroy();
    }
  }
}

/**
 * An HTTP forwarder in front of the S3 test server, for what tests must make happen at a given
 * moment: the endpoint going away in the middle of an upload (`goDownAfterUploadBytes`: every
 * connection cut, the port refusing, the server's data kept for after `comeBack`), and two writers'
 * manifest puts meeting (`holdManifestPuts`: each held until all have arrived, so both writers read
 * the same manifest before either commits), an upload that hangs (`holdPartPuts`), a drop held at
 * its commit point while another writer commits (`holdManifestWrite`), and an object the server
 * refuses to take (`refusePutsTo`). `honourDeleteConditions(false)` makes the server behind it one
 * that ignores `If-Match` on DELETE, as MinIO does.
 */
export class S3Gate {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  private uploaded = 0;
  private downAfter = Infinity;
  private held: Array<() => void> = [];
  private holdCount = 0;
  private holdingParts = false;
  private heldWrite: ((send: () => void) => void) | undefined;
  private deleteConditions = true;
  private refusedPuts: string | undefined;
  /** Every request that reached the gate, as `METHOD /path` (no query): what a test expects a command to ask. */
  readonly requests: string[] = [];

  private constructor(
    private readonly target: number,
    readonly port: number,
  ) {}

  get endpoint(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  static async open(target: S3TestServer): Promise<S3Gate> {
    const gate = new S3Gate(target.port, await freePort());
    await gate.comeBack();
    return gate;
  }

  /** Cuts every connection and stops listening once this many more bytes of request bodies have passed. */
  goDownAfterUploadBytes(bytes: number): void {
    this.uploaded = 0;
    this.downAfter = bytes;
  }

  /** Refuses (403 AccessDenied, which no client retries) each PUT whose path ends with `suffix`, until called with undefined. */
  refusePutsTo(suffix: string | undefined): void {
    this.refusedPuts = suffix;
  }

  /** Holds PUTs of Parquet parts (single or multipart) while on: an upload that never ends. */
  holdPartPuts(on: boolean): void {
    this.holdingParts = on;
  }

  /** Holds PUTs of `trajstore.json` until `count` of them are waiting, then lets all through. */
  holdManifestPuts(count: number): void {
    this.holdCount = count;
  }

  /**
   * Holds the next PUT or DELETE of `trajstore.json` (a drop's commit point): `arrived` settles when
   * it reaches the gate, `release` sends it on.
   */
  holdManifestWrite(): { arrived: Promise<void>; release: () => void } {
    let release = (): void => {};
    const arrived = new Promise<void>((resolve) => {
      this.heldWrite = (send) => {
        release = send;
        resolve();
      };
    });
    return { arrived, release: () => release() };
  }

  /** While off, DELETEs go on without their `If-Match`: a server that ignores the condition (MinIO) deletes whatever the key holds. */
  honourDeleteConditions(on: boolean): void {
    this.deleteConditions = on;
  }

  async comeBack(): Promise<void> {
    this.downAfter = Infinity;
    const server = createHttpServer((req, res) => this.forward(req, res));
    server.on('connection', (socket) => {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
    });
    await new Promise<void>((resolve) => server.listen(this.port, '127.0.0.1', resolve));
    this.server = server;
  }

  async close(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const socket of this.sockets) socket.destroy();
    if (server) await new Promise((resolve) => server.close(resolve));
  }

  private forward(req: IncomingMessage, res: ServerResponse): void {
    this.requests.push(`${req.method} ${req.url?.split('?')[0]}`);
    const send = (): void => {
      const headers = { ...req.headers };
      if (req.method === 'DELETE' && !this.deleteConditions) delete headers['if-match'];
      const upstream = httpRequest({ host: '127.0.0.1', port: this.target, method: req.method, path: req.url, headers }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      });
      upstream.on('error', () => res.destroy());
      req.on('data', (chunk: Buffer) => {
        this.uploaded += chunk.length;
        if (this.uploaded > this.downAfter && this.server) void this.close();
      });
      req.pipe(upstream);
    };
    if ((req.method === 'DELETE' || req.method === 'PUT') && req.url?.split('?')[0]?.endsWith('/trajstore.json') && this.heldWrite) {
      const hold = this.heldWrite;
      this.heldWrite = undefined;
      return hold(send);
    }
    if (req.method === 'PUT' && this.holdingParts && req.url?.includes('/parts/')) return;
    if (req.method === 'PUT' && this.refusedPuts !== undefined && req.url?.split('?')[0]?.endsWith(this.refusedPuts)) {
      req.resume();
      res.writeHead(403, { 'content-type': 'application/xml' });
      return void res.end('<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>');
    }
    if (req.method === 'PUT' && req.url?.split('?')[0]?.endsWith('/trajstore.json') && this.holdCount > 0) {
      this.held.push(send);
      if (this.held.length >= this.holdCount) {
        this.holdCount = 0;
        for (const release of this.held.splice(0)) release();
      }
      return;
    }
    send();
  }
}
