/**
 * s3rver (npm), a real S3-compatible server process started by a test on loopback, that ignores
 * conditional PUTs: it answers 200 to `If-None-Match: *` over an existing object and to `If-Match`
 * of an ETag the object does not have, as some older Garage and SeaweedFS builds do. What trajstore
 * must refuse to commit through (moto, bench/lib/s3-server.ts, is the server that honours them).
 */
import type { ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { startChild } from '../../../bench/lib/child.js';

/** The keys s3rver takes (fixed: it signs with no other). */
const ACCESS_KEY = 'S3RVER';
const SECRET_KEY = 'S3RVER';

export class S3rverServer {
  private constructor(
    private readonly child: ChildProcess,
    readonly port: number,
  ) {}

  get endpoint(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** The standard variables that reach this server. */
  get env(): Record<string, string> {
    return { AWS_ENDPOINT_URL_S3: this.endpoint, AWS_ACCESS_KEY_ID: ACCESS_KEY, AWS_SECRET_ACCESS_KEY: SECRET_KEY, AWS_REGION: 'us-west-2' };
  }

  /** Starts a server storing in `dir`, with `bucket` made, on a port of its own choosing. */
  static async start(dir: string, bucket: string): Promise<S3rverServer> {
    const bin = createRequire(import.meta.url).resolve('s3rver/bin/s3rver.js');
    const { proc, match } = await startChild([bin, '-d', dir, '-a', '127.0.0.1', '-p', '0', '--silent', '--configure-bucket', bucket], /listening on 127\.0\.0\.1:(\d+)/);
    return new S3rverServer(proc, Number(match[1]));
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((resolve) => this.child.once('exit', resolve));
    this.child.kill('SIGKILL');
    await exited;
  }
}
