/**
 * The object-store backend of the dataset's storage seam (store.ts): keys under `s3://bucket/prefix`
 * on S3 or an S3-compatible server, through @aws-sdk/client-s3 (multipart uploads by
 * @aws-sdk/lib-storage).
 *
 * - Where it is reached: a pin's endpoint, region and keys (pins.ts), else the standard variables
 *   (`AWS_ENDPOINT_URL_S3`/`AWS_ENDPOINT_URL`, `AWS_REGION`/`AWS_DEFAULT_REGION`,
 *   `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`): a pin's values are laid over the
 *   process environment (`s3Environment`) and the client is made from that environment alone, per
 *   dataset, so two mounts of two pins each reach their own store. An endpoint means path-style
 *   addressing; `http://` is plain HTTP. Without keys the command stops (exit 2) instead of asking
 *   the SDK's default chain, whose last resort is the EC2 metadata address.
 * - Retries: the SDK's standard strategy (exponential backoff with jitter) on throttling, 5xx and
 *   connection errors, MAX_ATTEMPTS in all; what still fails is classified (`classify`): unreachable,
 *   throttled or 5xx -> exit 6, no such bucket -> exit 3, a failed precondition -> exit 4.
 * - Checksums only where S3 requires them: S3-compatible servers differ in the trailing checksums
 *   newer SDKs add to every upload.
 * - Nothing here puts a key into a message: errors name the dataset and the object, never the keys.
 */
import { createReadStream, createWriteStream, mkdirSync, openSync, closeSync, writeSync, rmSync, statSync } from 'node:fs';
import { rename } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Readable } from 'node:stream';
import {
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { ConflictError, InvalidInputError, NotFoundError, ToolError, UnavailableError } from '../../lib/errors.js';
import { randomSuffix, TEMP_MARKER } from '../../lib/durable.js';
import type { S3Place } from '../pins/pins.js';
import type { ObjectStore, ObjectWriter } from './store.js';

/** Attempts per request (the first and the retries): backoff of the SDK's standard mode, about 0.1, 0.2, 0.4, 0.8 s with jitter. */
const MAX_ATTEMPTS = 5;
/** A connection not made in this time counts as unreachable (then retried). */
const CONNECT_TIMEOUT_MS = 5_000;
/** Multipart uploads: parts of this size, this many at once. S3's minimum part is 5 MiB. */
export const MULTIPART_PART_BYTES = 8 * 1024 * 1024;
const MULTIPART_QUEUE = 4;

/** A condition on a put: the key must not exist (`create`), or must still hold the version `ifMatch` names. */
export type PutCondition = { ifNoneMatch: '*' } | { ifMatch: string };

/** The standard AWS variables of a place: the process environment with the pin's endpoint, region and keys laid over it. */
export function s3Environment(place: S3Place, env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = { ...env, AWS_REGION: place.region };
  if (place.endpoint) out.AWS_ENDPOINT_URL_S3 = place.endpoint;
  if (place.credentials) {
    out.AWS_ACCESS_KEY_ID = place.credentials.accessKeyId;
    out.AWS_SECRET_ACCESS_KEY = place.credentials.secretAccessKey;
    delete out.AWS_SESSION_TOKEN;
  }
  return out;
}

/** A client made from the standard variables of `env` alone (see the module comment). */
function clientFromEnvironment(env: NodeJS.ProcessEnv, uri: string): S3Client {
  const endpoint = env.AWS_ENDPOINT_URL_S3 || env.AWS_ENDPOINT_URL;
  const accessKeyId = env.AWS_ACCESS_KEY_ID;
  const secretAccessKey = env.AWS_SECRET_ACCESS_KEY;
  if (!accessKeyId || !secretAccessKey) {
    throw new InvalidInputError(`${uri}: no object-store credentials`, {
      hint: 'pin the dataset with --ak/--sk (trajstore dataset pin NAME URI), or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY',
    });
  }
  if (endpoint !== undefined && !/^https?:\/\/[^/\s]+/i.test(endpoint)) {
    throw new InvalidInputError(`${uri}: the endpoint ${JSON.stringify(endpoint)} is not an http:// or https:// URL`);
  }
  return new S3Client({
    region: env.AWS_REGION || env.AWS_DEFAULT_REGION,
    ...(endpoint ? { endpoint, forcePathStyle: true } : {}),
    credentials: { accessKeyId, secretAccessKey, ...(env.AWS_SESSION_TOKEN ? { sessionToken: env.AWS_SESSION_TOKEN } : {}) },
    maxAttempts: MAX_ATTEMPTS,
    retryMode: 'standard',
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    requestHandler: { connectionTimeout: CONNECT_TIMEOUT_MS },
  });
}

interface SdkError {
  name?: string;
  code?: string;
  Code?: string;
  $metadata?: { httpStatusCode?: number };
}

const UNREACHABLE = new Set(['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'EAI_AGAIN', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EPIPE', 'TimeoutError', 'RequestTimeout']);

/** What an SDK error means to the user, as one of the tool's errors (exit codes, spec/trajstore.md "Errors"). */
export function classify(error: unknown, what: string): Error {
  if (error instanceof ToolError) return error;
  const e = (error ?? {}) as SdkError;
  const name = e.name ?? e.Code ?? '';
  const status = e.$metadata?.httpStatusCode;
  if (name === 'NoSuchBucket') return new NotFoundError(`${what}: no such bucket`);
  if (status === 412 || name === 'PreconditionFailed') return new ConflictError(`${what}: changed by another writer`);
  if ((e.code && UNREACHABLE.has(e.code)) || UNREACHABLE.has(name) || (e.$metadata !== undefined && status === undefined)) {
    return new UnavailableError(`${what}: the object store is unreachable (${e.code ?? name ?? 'no answer'})`, { hint: 'check the endpoint (the pin\'s endpoint, or AWS_ENDPOINT_URL_S3) and that the server is up' });
  }
  if (status === 429 || name === 'SlowDown' || (status !== undefined && status >= 500)) {
    return new UnavailableError(`${what}: the object store failed (HTTP ${status}${name ? ` ${name}` : ''}) after ${MAX_ATTEMPTS} attempts`);
  }
  if (status === 403 || status === 401) return new InvalidInputError(`${what}: access denied (HTTP ${status} ${name})`, { hint: 'check the credentials of the pin (or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) and the region' });
  return new InvalidInputError(`${what}: the object store refused the request (HTTP ${status}${name ? ` ${name}` : ''})`);
}

const isMissingKey = (error: unknown): boolean => {
  const e = error as SdkError;
  return e?.name === 'NoSuchKey' || e?.name === 'NotFound' || (e?.$metadata?.httpStatusCode === 404 && e?.name !== 'NoSuchBucket');
};

async function bodyBytes(body: unknown): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of body as AsyncIterable<Uint8Array>) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks);
}

/**
 * An object being written: spooled to a temporary local file (writes stay synchronous and memory
 * bounded, as the interface wants), streamed up by `commit`, multipart past MULTIPART_PART_BYTES.
 */
class S3SpoolWriter implements ObjectWriter {
  private readonly path = join(tmpdir(), `trajstore-upload${TEMP_MARKER}${randomSuffix()}`);
  private readonly fd = openSync(this.path, 'wx', 0o600);
  private written = 0;
  private closed = false;
  constructor(
    private readonly store: S3ObjectStore,
    private readonly key: string,
  ) {}
  get size(): number {
    return this.written;
  }
  write(bytes: Uint8Array): void {
    let offset = 0;
    while (offset < bytes.length) offset += writeSync(this.fd, bytes, offset);
    this.written += bytes.length;
  }
  async commit(): Promise<void> {
    this.close();
    try {
      await this.store.upload(this.key, this.path);
    } finally {
      rmSync(this.path, { force: true });
    }
  }
  abort(): void {
    this.close();
    rmSync(this.path, { force: true });
  }
  private close(): void {
    if (this.closed) return;
    this.closed = true;
    closeSync(this.fd);
  }
}

export class S3ObjectStore implements ObjectStore {
  readonly uri: string;
  readonly bucket: string;
  private readonly prefix: string;
  private readonly client: S3Client;

  constructor(place: S3Place, env: NodeJS.ProcessEnv) {
    this.uri = place.uri;
    this.bucket = place.bucket;
    this.prefix = place.prefix === '' ? '' : `${place.prefix}/`;
    this.client = clientFromEnvironment(s3Environment(place, env), place.uri);
  }

  private keyOf(key: string): string {
    return `${this.prefix}${key}`;
  }

  private where(key: string): string {
    return `${this.uri}/${key}`;
  }

  private async send<T>(key: string, run: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    try {
      return await run();
    } catch (error) {
      // Stopped on purpose: the stop's reason (InterruptedError), not a failure of the store.
      signal?.throwIfAborted();
      throw classify(error, this.where(key));
    }
  }

  async get(key: string): Promise<Buffer | undefined> {
    return (await this.getVersioned(key))?.bytes;
  }

  /** An object with its version (ETag), for a conditional put of its successor. */
  async getVersioned(key: string): Promise<{ bytes: Buffer; etag: string } | undefined> {
    try {
      const out = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: this.keyOf(key) }));
      return { bytes: await bodyBytes(out.Body), etag: out.ETag ?? '' };
    } catch (error) {
      if (isMissingKey(error)) return undefined;
      throw classify(error, this.where(key));
    }
  }

  async getRange(key: string, start: number, end: number): Promise<Buffer> {
    if (end <= start) return Buffer.alloc(0);
    return this.send(key, async () => {
      const out = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: this.keyOf(key), Range: `bytes=${start}-${end - 1}` }));
      return bodyBytes(out.Body);
    });
  }

  async size(key: string): Promise<number | undefined> {
    try {
      const out = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: this.keyOf(key) }));
      return out.ContentLength;
    } catch (error) {
      if (isMissingKey(error)) return undefined;
      throw classify(error, this.where(key));
    }
  }

  async put(key: string, bytes: Uint8Array | string): Promise<void> {
    await this.send(key, () => this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: this.keyOf(key), Body: bytes })));
  }

  /**
   * A put that succeeds only while the condition holds (S3 conditional writes; a server that ignores
   * them lets the put through). Throws a ConflictError (exit 4) when it does not. Returns the new ETag.
   */
  async putIf(key: string, bytes: Uint8Array | string, condition: PutCondition): Promise<string> {
    const out = await this.send(key, () =>
      this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: this.keyOf(key), Body: bytes, ...('ifMatch' in condition ? { IfMatch: condition.ifMatch } : { IfNoneMatch: condition.ifNoneMatch }) })),
    );
    return out.ETag ?? '';
  }

  writer(key: string): ObjectWriter {
    return new S3SpoolWriter(this, key);
  }

  /**
   * Streams a local file up under `key`: one PUT when small, a multipart upload past MULTIPART_PART_BYTES.
   * `signal` (Ctrl-C, SIGTERM) stops it where it is (a multipart upload is aborted) and throws its reason.
   */
  async upload(key: string, path: string, signal?: AbortSignal): Promise<void> {
    const size = statSync(path).size;
    await this.send(key, async () => {
      if (size <= MULTIPART_PART_BYTES) {
        await this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: this.keyOf(key), Body: createReadStream(path), ContentLength: size }), signal ? { abortSignal: signal } : {});
        return;
      }
      const upload = new Upload({
        client: this.client,
        params: { Bucket: this.bucket, Key: this.keyOf(key), Body: createReadStream(path) },
        partSize: MULTIPART_PART_BYTES,
        queueSize: MULTIPART_QUEUE,
        // A failed upload is aborted: no parts of it stay billed on the server.
        leavePartsOnError: false,
      });
      const stop = (): void => void upload.abort().catch(() => {});
      signal?.addEventListener('abort', stop, { once: true });
      try {
        await upload.done();
      } finally {
        signal?.removeEventListener('abort', stop);
      }
    }, signal);
  }

  /** Streams `key` down into a local file, written under a temporary name and renamed into place: no torn files. */
  async download(key: string, path: string): Promise<void> {
    mkdirSync(dirname(path), { recursive: true });
    const temp = `${path}${TEMP_MARKER}${randomSuffix()}`;
    try {
      await this.send(key, async () => {
        const out = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: this.keyOf(key) }));
        await pipeline(out.Body as Readable, createWriteStream(temp, { mode: 0o644 }));
      });
      await rename(temp, path);
    } catch (error) {
      rmSync(temp, { force: true });
      if (isMissingKey(error)) throw new NotFoundError(`${this.where(key)}: missing`);
      throw error;
    }
  }

  /** Keys under a prefix, in byte order: every page of ListObjectsV2 (1,000 keys each). */
  async list(prefix: string): Promise<string[]> {
    const keys: string[] = [];
    let token: string | undefined;
    do {
      const page = await this.send(prefix, () =>
        this.client.send(new ListObjectsV2Command({ Bucket: this.bucket, Prefix: this.keyOf(prefix), ...(token ? { ContinuationToken: token } : {}) })),
      );
      for (const object of page.Contents ?? []) if (object.Key) keys.push(object.Key.slice(this.prefix.length));
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
    return keys.sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  }

  async delete(key: string): Promise<void> {
    await this.send(key, () => this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: this.keyOf(key) })));
  }

  /** Deletes keys 1,000 (S3's limit) per request. */
  async deleteMany(keys: readonly string[]): Promise<void> {
    for (let i = 0; i < keys.length; i += 1000) {
      const batch = keys.slice(i, i + 1000);
      const out = await this.send(batch[0] ?? '', () =>
        this.client.send(new DeleteObjectsCommand({ Bucket: this.bucket, Delete: { Objects: batch.map((key) => ({ Key: this.keyOf(key) })), Quiet: true } })),
      );
      const failed = out.Errors ?? [];
      if (failed.length > 0) throw new UnavailableError(`${this.uri}: ${failed.length} object(s) could not be deleted (${failed[0]?.Key}: ${failed[0]?.Code})`);
    }
  }

  close(): void {
    this.client.destroy();
  }
}
