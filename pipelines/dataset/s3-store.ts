/**
 * The object-store backend of the dataset's storage seam (store.ts): keys under `s3://bucket/prefix`
 * on S3 or an S3-compatible server, through @aws-sdk/client-s3.
 *
 * - Where it is reached: a pin's endpoint, region and keys (pins.ts), else the standard variables
 *   (`AWS_ENDPOINT_URL_S3`/`AWS_ENDPOINT_URL`, `AWS_REGION`/`AWS_DEFAULT_REGION`,
 *   `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`): a pin's values are laid over the
 *   process environment (`s3Environment`) and the client is made from that environment alone, per
 *   dataset, so two mounts of two pins each reach their own store. An endpoint means path-style
 *   addressing; `http://` is plain HTTP. Without keys the command stops (exit 2) instead of asking
 *   the SDK's default chain, whose last resort is the EC2 metadata address.
 * - Retries: the SDK's standard strategy (exponential backoff with jitter) on throttling, 5xx,
 *   connection errors and timeouts, MAX_ATTEMPTS in all; what still fails is classified (`classify`):
 *   unreachable, timed out, throttled or 5xx -> exit 6, no such bucket or key -> exit 3, a failed
 *   precondition -> exit 4. Every body the SDK sends is a Buffer, which it can send again (it gives
 *   up on a stream at the first error).
 * - Time limits: a connection not made in CONNECT_TIMEOUT_MS, and a request during which nothing
 *   moves for the request timeout (`TRAJSTORE_S3_TIMEOUT_MS`), count as failed attempts. The
 *   command's signal (Ctrl-C, SIGTERM) goes with every request, so a stop never waits for the server.
 * - A server is not trusted to behave: a listing that does not advance, passes MAX_LISTED_KEYS, is
 *   no ListObjectsV2 result or names keys outside its prefix stops, as does an answer read into
 *   memory past MAX_ANSWER_BYTES; a bulk delete is done only for the keys its answer lists as
 *   deleted (`deleteBatch`); a multipart upload begun by an answer that cannot be read is found and
 *   aborted (`beginUpload`); its error codes are quoted only when they are words holding no
 *   credential (`shownCode`); every GET's body is checked against its length and, for a whole object, its ETag when
 *   that is an MD5 (a download also against the size and SHA-256 the caller expects: a part's ETag
 *   is no digest of its bytes when it went up in parts), and fetched again when
 *   it comes cut off, stalled or damaged (`whole`). Every single PUT and every part of a multipart
 *   upload carries its Content-MD5 and its answer's ETag is checked against it, so a body damaged on
 *   its way is sent again, never committed; a multipart upload's completion is checked against the
 *   ETag its parts make (`uploadInParts`).
 * - Conditional puts (`putIf`, `upload` create-only) are the commit point of every writer: before
 *   the first, the server is checked to honour them (`requireConditionalWrites`, s3-conditions.ts),
 *   as one that ignores them lets two racing writers both succeed, one losing what it wrote.
 * - The SDK's logger is silenced: what it would print on stderr, the errors here say.
 * - Checksums only where S3 requires them: S3-compatible servers differ in the trailing checksums
 *   newer SDKs add to every upload. A bulk delete carries a Content-MD5 too (`withContentMd5`).
 * - Nothing here puts a key into a message: errors name the dataset and the object, never the keys.
 */
import { createHash } from 'node:crypto';
import { createWriteStream, mkdirSync, openSync, closeSync, writeSync, rmSync, statSync } from 'node:fs';
import { open, readFile, rename, type FileHandle } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { pipeline as pipeStreams, Readable, Transform } from 'node:stream';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  type CreateMultipartUploadCommandOutput,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  type DeleteObjectsCommandOutput,
  GetObjectCommand,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  type ListMultipartUploadsCommandOutput,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { limitFromEnv } from '../../lib/env-limit.js';
import { ConflictError, InvalidInputError, NotFoundError, ResourceLimitError, ToolError, UnavailableError } from '../../lib/errors.js';
import { randomSuffix, TEMP_MARKER } from '../../lib/durable.js';
import type { S3Place } from '../pins/pins.js';
import { newPartStamp, probeKey } from './layout.js';
import { requireConditionalWrites } from './s3-conditions.js';
import type { ObjectStore, ObjectWriter } from './store.js';

/** Attempts per request (the first and the retries): backoff of the SDK's standard mode, about 0.1, 0.2, 0.4, 0.8 s with jitter. */
const MAX_ATTEMPTS = 5;
/** A connection not made in this time counts as unreachable (then retried). */
const CONNECT_TIMEOUT_MS = 5_000;
/**
 * A request during which nothing is sent or received for this long fails (then retried): a server
 * that accepts connections and never answers would otherwise hold a command forever. An idle limit,
 * not a total one, so a large part on a slow link is not cut off while it moves.
 */
export const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;
const REQUEST_TIMEOUT_ENV = 'TRAJSTORE_S3_TIMEOUT_MS';
/**
 * Keys one listing may return. A dataset holds far fewer (compaction keeps parts few); a server that
 * pages forever with new tokens would otherwise grow memory without bound.
 */
export const MAX_LISTED_KEYS = 1_000_000;
/**
 * Bytes of an answer read into memory: a manifest or snapshot descriptor, a listing page (1,000 keys
 * of at most 1 KiB each), an error. A server answering with a body that never ends would otherwise
 * grow the process until it dies.
 */
export const MAX_ANSWER_BYTES = 64 * 1024 * 1024;
/** Multipart uploads: parts of this size, this many at once. S3's minimum part is 5 MiB. */
export const MULTIPART_PART_BYTES = 8 * 1024 * 1024;
const MULTIPART_QUEUE = 4;
/** How long the abort of a multipart upload may hold a command that was stopped (Ctrl-C): a stop does not wait for the server. */
const ABORT_AFTER_STOP_MS = 2_000;

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

/** The SDK's logger, silenced: it would print on stderr, and everything it reports reaches the caller as an error. */
const SILENT = { trace() {}, debug() {}, info() {}, warn() {}, error() {} };

/**
 * The place's region, checked: the SDK puts it into the endpoint's host name and the signature, and
 * fails on a malformed one with an error that names nothing. Named with where it came from.
 */
function regionOf(place: S3Place, env: NodeJS.ProcessEnv): string {
  if (/^[A-Za-z0-9-]+$/.test(place.region)) return place.region;
  const source = env.AWS_REGION === place.region ? 'AWS_REGION' : !env.AWS_REGION && env.AWS_DEFAULT_REGION === place.region ? 'AWS_DEFAULT_REGION' : "the pin's region";
  throw new InvalidInputError(`${place.uri}: the region ${JSON.stringify(place.region)} (from ${source}) is not a region name: letters, digits and hyphens only`, {
    hint: 'for example us-west-2',
  });
}

/**
 * A client of a place made from the standard variables of `s3Environment` alone (see the module
 * comment), the credentials it signs with, and the endpoint it reaches as a message shows it.
 */
function clientOf(place: S3Place, processEnv: NodeJS.ProcessEnv, requestTimeoutMs: number): { client: S3Client; credentials: string[]; region: string; endpoint: string } {
  const region = regionOf(place, processEnv);
  const env = s3Environment(place, processEnv);
  const uri = place.uri;
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
  const client = new S3Client({
    region,
    ...(endpoint ? { endpoint, forcePathStyle: true } : {}),
    credentials: { accessKeyId, secretAccessKey, ...(env.AWS_SESSION_TOKEN ? { sessionToken: env.AWS_SESSION_TOKEN } : {}) },
    maxAttempts: MAX_ATTEMPTS,
    retryMode: 'standard',
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    logger: SILENT,
    requestHandler: { connectionTimeout: CONNECT_TIMEOUT_MS, socketTimeout: requestTimeoutMs, logger: SILENT },
  });
  limitAnswerBodies(client);
  return { client, credentials: [accessKeyId, secretAccessKey, env.AWS_SESSION_TOKEN ?? ''], region, endpoint: shownEndpoint(endpoint, region) };
}

/** An endpoint as a message shows it: scheme, host and path, never a user or password written into the URL, nor a query. */
function shownEndpoint(endpoint: string | undefined, region: string): string {
  if (!endpoint) return `https://s3.${region}.amazonaws.com`;
  try {
    const url = new URL(endpoint);
    return `${url.protocol}//${url.host}${url.pathname.replace(/\/$/, '')}`;
  } catch {
    return 'the endpoint set';
  }
}

interface SdkError {
  name?: string;
  code?: string;
  Code?: string;
  message?: string;
  syscall?: string;
  /** The region a server names in its error (S3 and MinIO, answering a request signed for another). */
  Region?: unknown;
  $metadata?: { httpStatusCode?: number; attempts?: number };
}

const UNREACHABLE = new Set(['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'EAI_AGAIN', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EPIPE', 'ERR_STREAM_PREMATURE_CLOSE', 'TimeoutError', 'RequestTimeout']);

/**
 * What an SDK error means to the user, as one of the tool's errors (exit codes, spec/trajstore.md
 * "Errors"). `timeoutMs` is the request timeout the client had, for the message of a timeout;
 * `credentials`, what no message may name (`shownCode`); `region`, the one the client signs for.
 */
export function classify(error: unknown, what: string, { timeoutMs = DEFAULT_REQUEST_TIMEOUT_MS, credentials = [], region }: { timeoutMs?: number; credentials?: readonly string[]; region?: string } = {}): Error {
  if (error instanceof ToolError) return error;
  if (error instanceof AnswerTooLarge) return new ResourceLimitError(`${what}: the object store's answer passed ${MAX_ANSWER_BYTES / 1024 / 1024} MiB; stopped`);
  const e = (error ?? {}) as SdkError;
  const name = e.name ?? e.Code ?? '';
  const code = shownCode(name, credentials);
  const status = e.$metadata?.httpStatusCode;
  const tries = e.$metadata?.attempts ?? 1;
  const attempts = `${tries} attempt${tries === 1 ? '' : 's'}`;
  if (name === 'NoSuchBucket') return new NotFoundError(`${what}: no such bucket`);
  if (isMissingKey(error)) return new NotFoundError(`${what}: no such object`);
  if (status === 412 || name === 'PreconditionFailed') return new ConflictError(`${what}: changed by another writer`);
  // The request timeout (the connection timeout says "connection" and is reported as unreachable).
  if (name === 'TimeoutError' && !/connection/i.test(e.message ?? '')) {
    return new UnavailableError(`${what}: no answer from the object store within ${timeoutMs / 1000} s (${attempts})`, { hint: `check that the server is up; ${REQUEST_TIMEOUT_ENV} changes the limit` });
  }
  if ((e.code && UNREACHABLE.has(e.code)) || UNREACHABLE.has(name) || (e.$metadata !== undefined && status === undefined)) {
    return new UnavailableError(`${what}: the object store is unreachable (${e.code ?? name ?? 'no answer'}, ${attempts})`, { hint: 'check the endpoint (the pin\'s endpoint, or AWS_ENDPOINT_URL_S3) and that the server is up' });
  }
  if (status === 429 || name === 'SlowDown' || (status !== undefined && status >= 500)) {
    return new UnavailableError(`${what}: the object store failed (HTTP ${status}${code ? ` ${code}` : ''}) after ${attempts}`);
  }
  // The store failing, as a 5xx is.
  if (unreadableAnswer(error)) return new UnavailableError(`${what}: the object store's answer could not be read (HTTP ${status})`);
  // S3 answers a request for a bucket of another region with a redirect; the SDK follows none, and
  // sends nothing (signed requests included) where it points.
  if (status !== undefined && status >= 300 && status < 400) {
    return new InvalidInputError(`${what}: the object store redirects the request (HTTP ${status}${code ? ` ${code}` : ''})`, {
      hint: "the endpoint or the region is not the bucket's: set them (the pin's, or AWS_ENDPOINT_URL_S3 and AWS_REGION) to where the bucket is",
    });
  }
  // A request signed for another region than the server's: S3 and MinIO answer 400 (no redirect
  // on a path-style endpoint), naming theirs.
  if (name === 'AuthorizationHeaderMalformed') {
    const theirs = typeof e.Region === 'string' && /^[a-z0-9-]{1,40}$/.test(e.Region) ? e.Region : undefined;
    const expects = theirs ? `expects requests signed for the region ${theirs}${region ? `, not ${region}` : ''}` : 'refused the request\'s signature';
    return new InvalidInputError(`${what}: the object store ${expects} (HTTP ${status} ${name})`, { hint: "set the region (the pin's region, or AWS_REGION) to the server's" });
  }
  if (status === 403 || status === 401) return new InvalidInputError(`${what}: access denied (HTTP ${status}${code ? ` ${code}` : ''})`, { hint: 'check the credentials of the pin (or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) and the region' });
  // A local file's error (writing a download): the caller's to report, not the store's.
  if (status === undefined && e.syscall !== undefined) return error as Error;
  return new InvalidInputError(`${what}: the object store refused the request (${status === undefined ? code || 'no HTTP status' : `HTTP ${status}${code ? ` ${code}` : ''}`})`);
}

/** An SDK error on a 2xx answer: the request was done, but its body (XML cut off, or none) could not be read. */
function unreadableAnswer(error: unknown): boolean {
  const status = (error as SdkError)?.$metadata?.httpStatusCode;
  return status !== undefined && status >= 200 && status < 300 && !(error instanceof AnswerTooLarge);
}

/**
 * An error code from a server's answer, as a message shows it: S3's codes are words (`AccessDenied`,
 * `SlowDown`); anything else is the server's own text (one that echoes the request's Authorization
 * header holds the access key id) and is left out, as is a code holding one of the `credentials`.
 */
function shownCode(name: string, credentials: readonly string[]): string {
  // `Unknown`: the SDK's name for an answer without a code, which says nothing.
  return /^[A-Za-z][A-Za-z0-9.]{0,63}$/.test(name) && name !== 'Unknown' && !credentials.some((secret) => secret !== '' && name.includes(secret)) ? name : '';
}

const isMissingKey = (error: unknown): boolean => {
  const e = error as SdkError;
  return e?.name === 'NoSuchKey' || e?.name === 'NotFound' || (e?.$metadata?.httpStatusCode === 404 && e?.name !== 'NoSuchBucket');
};

/** What an answer says of an object's bytes: its ETag, and the encryption that makes an ETag no digest of them. */
interface Tagged {
  ETag?: string | undefined;
  ServerSideEncryption?: string | undefined;
  SSECustomerAlgorithm?: string | undefined;
}

/**
 * An answer's ETag, unquoted, when it is made of MD5s: `shape` matches it and the object is not
 * encrypted by KMS or a customer key (whose ETags are no digest of the bytes).
 */
function digestEtagOf(out: Tagged, shape: RegExp): string | undefined {
  const etag = out.ETag?.replace(/"/g, '').toLowerCase();
  if (!etag || !shape.test(etag)) return undefined;
  if (out.SSECustomerAlgorithm || out.ServerSideEncryption?.startsWith('aws:kms')) return undefined;
  return etag;
}

/** The MD5 of an object's bytes (or of a part's), when its ETag is one: a single PUT's (an UploadPart's). */
const md5Of = (out: Tagged): string | undefined => digestEtagOf(out, /^[0-9a-f]{32}$/);

/** A multipart upload's ETag as S3 makes it, when the answer has one: `<md5>-<parts>` (`multipartEtagOf`). */
const multipartDigestOf = (out: Tagged): string | undefined => digestEtagOf(out, /^[0-9a-f]{32}-\d+$/);

/** The ETag S3 gives an object uploaded in these parts: the MD5 of their MD5s (binary, in order), a hyphen and their number. */
export function multipartEtagOf(partMd5s: readonly Buffer[]): string {
  return `${createHash('md5').update(Buffer.concat(partMd5s)).digest('hex')}-${partMd5s.length}`;
}

/** A multipart upload under way: what names it in each of its requests. */
interface MultipartUpload {
  Bucket: string;
  Key: string;
  UploadId: string;
}

/** A part sent: the MD5 of its bytes, and the ETag the server answered (what the completion lists). */
interface SentPart {
  md5: Buffer;
  etag: string;
}

/** What a caller knows of an object it downloads: its size and, when known, the SHA-256 of its bytes. */
export interface Expected {
  bytes: number;
  sha256?: string | undefined;
}

/** What a GET or PUT brought: the value, or what is wrong with the bytes that arrived (they are sent or fetched again). */
type Arrived<T> = { value: T } | { damage: string };

/** A key a server listed, as a message shows it: quoted (control characters escaped), clipped to 100 characters. */
export const shownKey = (key: string): string => JSON.stringify(key.length > 100 ? `${key.slice(0, 100)}...` : key);

const MD5_MISMATCH = "the bytes do not match the MD5 of the object's ETag";

/** An answer's body passed MAX_ANSWER_BYTES (`classify` names the object). */
class AnswerTooLarge extends Error {}

async function bodyBytes(body: unknown): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body as AsyncIterable<Uint8Array>) {
    size += chunk.length;
    if (size > MAX_ANSWER_BYTES) {
      (body as Readable).destroy?.();
      throw new AnswerTooLarge();
    }
    chunks.push(Buffer.from(chunk));
  }
  return Buffer.concat(chunks);
}

/**
 * Cuts off, past MAX_ANSWER_BYTES, the bodies the SDK reads whole to parse them (every answer's but
 * a successful GetObject's, which this module reads itself): a listing or an error whose body never
 * ends. Placed after the SDK's deserializer (priority low), it hands that a bounded body.
 */
function limitAnswerBodies(client: S3Client): void {
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const result = await next(args);
      const response = result.response as { statusCode?: number; body?: unknown };
      if ((context.commandName !== 'GetObjectCommand' || (response.statusCode ?? 0) >= 300) && response.body instanceof Readable) {
        let size = 0;
        const limit = new Transform({
          transform(chunk: Buffer, _encoding, done) {
            size += chunk.length;
            done(size > MAX_ANSWER_BYTES ? new AnswerTooLarge() : null, chunk);
          },
        });
        response.body = pipeStreams(response.body, limit, () => {});
      }
      return result;
    },
    { step: 'deserialize', priority: 'low', name: 'trajstoreAnswerLimit' },
  );
}

/**
 * A bulk delete with the Content-MD5 of its body. S3's documentation requires one; newer SDKs send a
 * CRC32 header instead (AWS takes either), which S3-compatible servers such as Ceph RGW, Dell ECS
 * and s3proxy refuse (400 "Missing required header for this request: Content-MD5"). Added before
 * the request is signed, to the body as the SDK serialized it.
 */
function withContentMd5(command: DeleteObjectsCommand): DeleteObjectsCommand {
  command.middlewareStack.add(
    (next) => async (args) => {
      const request = args.request as { headers?: Record<string, string>; body?: unknown };
      if (request.headers && (typeof request.body === 'string' || request.body instanceof Uint8Array)) {
        request.headers['content-md5'] = createHash('md5').update(request.body).digest('base64');
      }
      return next(args);
    },
    { step: 'build', name: 'trajstoreBulkDeleteContentMd5' },
  );
  return command;
}

/**
 * An object being written: spooled to a temporary local file (writes stay synchronous and memory
 * bounded, as the interface wants), uploaded by `commit` (S3ObjectStore.upload).
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
  /** What no message may name, whatever a server answers (`classify`). */
  private readonly credentials: readonly string[];
  /** The region requests are signed for. */
  private readonly region: string;
  /** The endpoint reached, as a message shows it (`shownEndpoint`). */
  private readonly endpoint: string;
  private readonly requestTimeoutMs: number;
  /** What goes with every request: the command's signal, so that a stop ends a request at once. */
  private readonly request: { abortSignal?: AbortSignal };

  /** `signal`: the command's (Ctrl-C, SIGTERM); it stops any request of this store and throws its reason. */
  constructor(
    place: S3Place,
    private readonly env: NodeJS.ProcessEnv,
    private readonly signal?: AbortSignal,
  ) {
    this.uri = place.uri;
    this.bucket = place.bucket;
    this.prefix = place.prefix === '' ? '' : `${place.prefix}/`;
    this.requestTimeoutMs = limitFromEnv(env, REQUEST_TIMEOUT_ENV, DEFAULT_REQUEST_TIMEOUT_MS, 'milliseconds');
    ({ client: this.client, credentials: this.credentials, region: this.region, endpoint: this.endpoint } = clientOf(place, env, this.requestTimeoutMs));
    this.request = signal ? { abortSignal: signal } : {};
  }

  private keyOf(key: string): string {
    return `${this.prefix}${key}`;
  }

  private where(key: string): string {
    return `${this.uri}/${key}`;
  }

  /** The error to throw for a failed request of `key`. */
  private failure(error: unknown, key: string): unknown {
    // Stopped on purpose: the stop's reason (InterruptedError), not a failure of the store.
    if (this.signal?.aborted) return this.signal.reason;
    return classify(error, this.where(key), { timeoutMs: this.requestTimeoutMs, credentials: this.credentials, region: this.region });
  }

  private async send<T>(key: string, run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (error) {
      throw this.failure(error, key);
    }
  }

  /** As `send`, but a key that does not exist is undefined. */
  private async sendIfPresent<T>(key: string, run: () => Promise<T>): Promise<T | undefined> {
    try {
      return await run();
    } catch (error) {
      if (isMissingKey(error) && !this.signal?.aborted) return undefined;
      throw this.failure(error, key);
    }
  }

  async get(key: string): Promise<Buffer | undefined> {
    return (await this.getVersioned(key))?.bytes;
  }

  /** An object with its version (ETag), for a conditional put of its successor. */
  async getVersioned(key: string): Promise<{ bytes: Buffer; etag: string } | undefined> {
    return this.whole(key, () => this.fetchBytes(key));
  }

  async getRange(key: string, start: number, end: number): Promise<Buffer> {
    if (end <= start) return Buffer.alloc(0);
    const got = await this.whole(key, () => this.fetchBytes(key, `bytes=${start}-${end - 1}`));
    if (!got) throw new NotFoundError(`${this.where(key)}: no such object`);
    return got.bytes;
  }

  /**
   * One GET of `key` (or of a range of it) into memory: its bytes and ETag, undefined when there is
   * no such object, or what is wrong with what arrived: fewer bytes than announced, or bytes that do
   * not match the MD5 of a whole object's ETag.
   */
  private async fetchBytes(key: string, range?: string): Promise<Arrived<{ bytes: Buffer; etag: string } | undefined>> {
    const out = await this.sendIfPresent(key, () => this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: this.keyOf(key), Range: range }), this.request));
    if (!out) return { value: undefined };
    if ((out.ContentLength ?? 0) > MAX_ANSWER_BYTES) {
      (out.Body as Readable | undefined)?.destroy?.();
      throw this.failure(new AnswerTooLarge(), key);
    }
    let bytes: Buffer;
    try {
      bytes = await bodyBytes(out.Body);
    } catch (error) {
      return { damage: this.brokenBody(error, key) };
    }
    if (out.ContentLength !== undefined && bytes.length !== out.ContentLength) return { damage: `${bytes.length} bytes arrived of the ${out.ContentLength} announced` };
    const etag = range === undefined ? md5Of(out) : undefined;
    if (etag !== undefined && createHash('md5').update(bytes).digest('hex') !== etag) return { damage: MD5_MISMATCH };
    return { value: { bytes, etag: out.ETag ?? '' } };
  }

  async size(key: string): Promise<number | undefined> {
    const out = await this.sendIfPresent(key, () => this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: this.keyOf(key) }), this.request));
    return out?.ContentLength;
  }

  async put(key: string, bytes: Uint8Array | string): Promise<void> {
    await this.putWhole(key, bytes);
  }

  /**
   * A put that succeeds only while the condition holds (S3 conditional writes). Throws a
   * ConflictError (exit 4) when it does not; a server that would let it through, ignoring the
   * condition, is refused before (`requireConditionalWrites`). Returns the new ETag.
   */
  async putIf(key: string, bytes: Uint8Array | string, condition: PutCondition): Promise<string> {
    await this.requireConditionalWrites();
    return this.putWhole(key, bytes, 'ifMatch' in condition ? { IfMatch: condition.ifMatch } : { IfNoneMatch: condition.ifNoneMatch });
  }

  /**
   * Resolves once the server is known to honour conditional PUTs (s3-conditions.ts: once per process
   * and endpoint+bucket, remembered in the cache for a while); a server that ignores them is refused
   * (exit 2). Made by every conditional write before its request; a writer calls it first, so that
   * it is refused before it uploads anything.
   */
  requireConditionalWrites(): Promise<void> {
    return requireConditionalWrites({ uri: this.uri, endpoint: this.endpoint, bucket: this.bucket }, this.env, () => this.probeConditionalWrites());
  }

  /**
   * Puts a probe object under the prefix (layout.ts `probeKey`), then puts it again with
   * `If-None-Match: *` and with `If-Match` of an ETag it does not have: a server that honours them
   * refuses both (412). What the server answered instead, or undefined; the probe is deleted
   * whatever happens (one a killed process leaves is reclaimed, and dropped with the dataset).
   *
   * A put with `If-None-Match: *` that was taken is asked once more, of a new probe: a drop of the
   * prefix running meanwhile may have deleted the first (its listing takes every key), and that put
   * then rightly succeeds. A server that ignores the condition takes both.
   */
  private async probeConditionalWrites(): Promise<string | undefined> {
    const found = await this.probeOnce();
    return found?.createTaken ? (await this.probeOnce())?.answer : found?.answer;
  }

  /** What the server answered where it should have refused, and whether that was a create over the probe (`If-None-Match: *` taken). */
  private async probeOnce(): Promise<{ answer: string; createTaken: boolean } | undefined> {
    const key = probeKey(await newPartStamp());
    const body = 'trajstore checks that this object store honours conditional writes; this object is deleted at once\n';
    await this.putWhole(key, body);
    try {
      const notItsEtag = `"${createHash('md5').update(`not ${body}`).digest('hex')}"`;
      const checks = [
        { header: 'If-None-Match: *', condition: { IfNoneMatch: '*' }, case: 'over an existing object' },
        { header: `If-Match: ${notItsEtag}`, condition: { IfMatch: notItsEtag }, case: 'of an ETag the object does not have' },
      ];
      for (const check of checks) {
        const status = await this.conditionalPutStatus(key, body, check.condition);
        if (status === 501) return { answer: `answered 501 NotImplemented to a PUT with ${check.header}`, createTaken: false };
        if (status !== 412) return { answer: `answered ${status} to a PUT with ${check.header} ${check.case}`, createTaken: 'IfNoneMatch' in check.condition && status < 300 };
      }
      return undefined;
    } finally {
      await this.delete(key).catch(() => {});
    }
  }

  /**
   * The HTTP status of one PUT of `body` under `key` with `condition`: 2xx when the server took it,
   * 412 when the condition did not hold (so too a 404 to `If-Match`: the object gone meanwhile, the
   * condition was looked at), 501 when the server implements no such header. Any other failure is
   * thrown, as every request's is.
   */
  private async conditionalPutStatus(key: string, body: string, condition: { IfMatch?: string; IfNoneMatch?: string }): Promise<number> {
    const bytes = Buffer.from(body);
    try {
      const out = await this.client.send(
        new PutObjectCommand({ Bucket: this.bucket, Key: this.keyOf(key), Body: bytes, ContentMD5: createHash('md5').update(bytes).digest('base64'), ...condition }),
        this.request,
      );
      return out.$metadata.httpStatusCode ?? 200;
    } catch (error) {
      const e = error as SdkError;
      const status = e.$metadata?.httpStatusCode;
      if (!this.signal?.aborted) {
        if (status === 412 || e.name === 'PreconditionFailed' || (condition.IfMatch !== undefined && isMissingKey(error))) return 412;
        if (status === 501 || e.name === 'NotImplemented') return 501;
      }
      throw this.failure(error, key);
    }
  }

  /** PUTs `body` until the server holds exactly its bytes (`sendBody`), MAX_ATTEMPTS times in all; returns the ETag. */
  private async putWhole(key: string, body: Uint8Array | string, condition: { IfMatch?: string; IfNoneMatch?: string } = {}): Promise<string> {
    const bytes = typeof body === 'string' ? Buffer.from(body) : body;
    const md5 = createHash('md5').update(bytes).digest();
    const put = (): Promise<Tagged> =>
      this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: this.keyOf(key), Body: bytes, ContentMD5: md5.toString('base64'), ...condition }), this.request);
    const out = await this.whole(key, () => this.sendBody(key, md5, put), { transfers: 'uploads' });
    return out.ETag ?? '';
  }

  /**
   * One request carrying a body (a PUT, or a part of a multipart upload) with the body's Content-MD5,
   * so that a server that receives other bytes than were sent (damaged on the way) refuses them (400
   * BadDigest) instead of storing them; an ETag that is an MD5 and not the body's says that a server
   * which does not check Content-MD5 stored something else. Either is damage, and the body is sent
   * again (the SDK retries a request that failed, not one the server answered with a 400).
   */
  private async sendBody<T extends Tagged>(key: string, md5: Buffer, send: () => Promise<T>): Promise<Arrived<T>> {
    let out: T;
    try {
      out = await send();
    } catch (error) {
      if ((error as SdkError)?.name === 'BadDigest' && !this.signal?.aborted) return { damage: 'the server received other bytes than were sent (BadDigest)' };
      throw this.failure(error, key);
    }
    const etag = md5Of(out);
    if (etag !== undefined && etag !== md5.toString('hex')) return { damage: 'the ETag the server answered is not the MD5 of the bytes sent' };
    return { value: out };
  }

  writer(key: string): ObjectWriter {
    return new S3SpoolWriter(this, key);
  }

  /**
   * Sends a local file up under `key`: one PUT when small, a multipart upload past MULTIPART_PART_BYTES
   * (`uploadInParts`), made again whole, MAX_ATTEMPTS times in all, while the server assembles other
   * bytes than were sent. The single PUT's body is the file read whole (at most MULTIPART_PART_BYTES)
   * and a multipart upload's parts are read into buffers: what fails is sent again with the same
   * bytes, which the SDK cannot do with a stream. The signal stops it where it is. With `condition`
   * (`If-None-Match: *`) an object already under `key` is left alone: a ConflictError (exit 4).
   */
  async upload(key: string, path: string, condition?: { ifNoneMatch: '*' }): Promise<void> {
    if (condition) await this.requireConditionalWrites();
    const size = statSync(path).size;
    if (size <= MULTIPART_PART_BYTES) {
      await this.putWhole(key, await readFile(path), condition ? { IfNoneMatch: condition.ifNoneMatch } : {});
      return;
    }
    // A multipart upload is not conditional on every server: the key is looked at right before it.
    if (condition && (await this.size(key)) !== undefined) throw new ConflictError(`${this.where(key)}: already exists`);
    const file = await open(path, 'r');
    try {
      await this.whole(key, () => this.uploadInParts(key, file, size), { transfers: 'uploads' });
    } finally {
      await file.close();
    }
  }

  /**
   * One multipart upload of the file under `key`: its parts, each checked as a PUT is (`sendBody`) and
   * sent again on its own when damaged, then the completion, whose ETag, when S3's kind, must be the
   * one the parts sent make (`multipartEtagOf`). One that is not says that the server assembled other
   * bytes: that object is deleted (a dataset's part has a name no other writer uses, and no manifest
   * names it yet) and the damage returned, for the upload to be made again. Whatever fails on the
   * way, the upload is aborted (`abandon`), so that no parts of it stay stored, and billed, on the server.
   */
  private async uploadInParts(key: string, file: FileHandle, size: number): Promise<Arrived<void>> {
    const upload = await this.beginUpload(key);
    let parts: SentPart[];
    let out: Tagged;
    try {
      parts = await this.uploadParts(key, upload, file, size);
      out = await this.complete(key, upload, parts);
    } catch (error) {
      throw await this.abandoned(key, error, () => this.abandon(upload));
    }
    const etag = multipartDigestOf(out);
    if (etag !== undefined && etag !== multipartEtagOf(parts.map((part) => part.md5))) {
      await this.delete(key);
      return { damage: 'the ETag the server answered is not that of the parts sent' };
    }
    return { value: undefined };
  }

  /**
   * Begins a multipart upload of `key`. A server may have begun one that this writer cannot name: when
   * its answer cannot be read or names none, when the request failed on its way back (the
   * connection cut, a 5xx) or the SDK sent it again (an earlier attempt's answer lost). Those are
   * found by listing the key's uploads and aborted (`abandonUnnamed`): the key is a part's, whose
   * name no other writer uses, so every upload of it is this writer's.
   */
  private async beginUpload(key: string): Promise<MultipartUpload> {
    let created: CreateMultipartUploadCommandOutput;
    try {
      created = await this.client.send(new CreateMultipartUploadCommand({ Bucket: this.bucket, Key: this.keyOf(key) }), this.request);
    } catch (error) {
      const status = (error as SdkError)?.$metadata?.httpStatusCode;
      const mayHaveBegun = status === undefined || status < 300 || status >= 500;
      throw mayHaveBegun ? await this.abandoned(key, this.failure(error, key), () => this.abandonUnnamed(key)) : this.failure(error, key);
    }
    if (!created.UploadId) {
      throw await this.abandoned(key, new UnavailableError(`${this.where(key)}: the object store began a multipart upload without naming it (no UploadId)`), () => this.abandonUnnamed(key));
    }
    // An upload left by an earlier attempt only keeps parts stored: this one goes on whatever becomes of it.
    if ((created.$metadata.attempts ?? 1) > 1) await this.abandonUnnamed(key, created.UploadId);
    return { Bucket: this.bucket, Key: this.keyOf(key), UploadId: created.UploadId };
  }

  /**
   * Aborts every multipart upload of `key` the server lists, but `keep`. False when they could not
   * be listed (the answer failed, or is no ListMultipartUploads result) or one could not be aborted.
   */
  private async abandonUnnamed(key: string, keep?: string): Promise<boolean> {
    let listed: ListMultipartUploadsCommandOutput;
    try {
      listed = await this.client.send(new ListMultipartUploadsCommand({ Bucket: this.bucket, Prefix: this.keyOf(key) }), this.abandonOptions());
    } catch {
      return false;
    }
    // Every ListMultipartUploads result names its bucket; an answer without it (an empty body) lists nothing.
    if (listed.Bucket === undefined) return false;
    const unnamed = (listed.Uploads ?? []).filter((upload) => upload.Key === this.keyOf(key) && upload.UploadId !== undefined && upload.UploadId !== keep);
    const ended = await Promise.all(unnamed.map((upload) => this.abandon({ Bucket: this.bucket, Key: this.keyOf(key), UploadId: upload.UploadId! })));
    return ended.every(Boolean);
  }

  /**
   * `error`, once `abandon` has ended the multipart uploads of `key` it leaves; when it could not,
   * with a hint naming the object whose upload the server may keep (and bill) for the user to end.
   */
  private async abandoned(key: string, error: unknown, abandon: () => Promise<boolean>): Promise<unknown> {
    if ((await abandon()) || !(error instanceof ToolError)) return error;
    const left = `a multipart upload of ${this.where(key)} may be left open on the server, keeping its parts: abort it (ListMultipartUploads, AbortMultipartUpload), or let a lifecycle rule of the bucket (AbortIncompleteMultipartUpload) end it`;
    return new ToolError(error.exitCode, error.summary, { ...(error.detail === undefined ? {} : { detail: error.detail }), hint: error.hint ? `${error.hint}; ${left}` : left });
  }

  /**
   * The parts of a multipart upload, MULTIPART_QUEUE at a time, in order of their numbers. At the
   * first that fails the others stop, and all have ended when this does: a part still on its way
   * could land after the upload's abort and keep parts stored.
   */
  private async uploadParts(key: string, upload: MultipartUpload, file: FileHandle, size: number): Promise<SentPart[]> {
    const count = Math.ceil(size / MULTIPART_PART_BYTES);
    const parts: SentPart[] = [];
    const failed = new AbortController();
    const signal = this.signal ? AbortSignal.any([this.signal, failed.signal]) : failed.signal;
    let next = 0;
    let failure: { error: unknown } | undefined;
    const sender = async (): Promise<void> => {
      while (next < count && !failure) {
        const index = next++;
        try {
          parts[index] = await this.uploadPart(key, upload, file, index, size, signal);
        } catch (error) {
          // The first failure is the one to report (the others are its consequence: stopped).
          failure ??= { error };
          failed.abort();
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(MULTIPART_QUEUE, count) }, sender));
    if (failure) throw failure.error;
    return parts;
  }

  /** Part `index` (from 0) of the file, sent until the server holds exactly its bytes, MAX_ATTEMPTS times in all. */
  private async uploadPart(key: string, upload: MultipartUpload, file: FileHandle, index: number, size: number, signal: AbortSignal): Promise<SentPart> {
    const start = index * MULTIPART_PART_BYTES;
    const bytes = Buffer.alloc(Math.min(MULTIPART_PART_BYTES, size - start));
    for (let at = 0; at < bytes.length; ) {
      const { bytesRead } = await file.read(bytes, at, bytes.length - at, start + at);
      if (bytesRead === 0) throw new Error(`${this.where(key)}: the file to upload ended at ${start + at} bytes, not ${size}`);
      at += bytesRead;
    }
    const md5 = createHash('md5').update(bytes).digest();
    const send = (): Promise<Tagged> =>
      this.client.send(new UploadPartCommand({ ...upload, PartNumber: index + 1, Body: bytes, ContentMD5: md5.toString('base64') }), { abortSignal: signal });
    const out = await this.whole(key, () => this.sendBody(key, md5, send), { transfers: `uploads of part ${index + 1}`, signal });
    return { md5, etag: out.ETag ?? `"${md5.toString('hex')}"` };
  }

  /**
   * Completes a multipart upload of `parts`: the object is made of them, under its key. A completion
   * that took effect but whose answer was lost (the connection cut) is sent again by the SDK and meets
   * NoSuchUpload, the upload being over: then the object's own ETag (HEAD) answers for it.
   */
  private async complete(key: string, upload: MultipartUpload, parts: readonly SentPart[]): Promise<Tagged> {
    try {
      return await this.client.send(new CompleteMultipartUploadCommand({ ...upload, MultipartUpload: { Parts: parts.map((part, i) => ({ PartNumber: i + 1, ETag: part.etag })) } }), this.request);
    } catch (error) {
      if ((error as SdkError)?.name !== 'NoSuchUpload' || this.signal?.aborted) throw this.failure(error, key);
      const made = await this.sendIfPresent(key, () => this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: upload.Key }), this.request));
      // An ETag that is no digest (encryption by KMS) cannot tell: the key is this upload's own (`uploadInParts`).
      const digest = made && multipartDigestOf(made);
      if (made && (digest === undefined || digest === multipartEtagOf(parts.map((part) => part.md5)))) return made;
      throw new UnavailableError(`${this.where(key)}: the object store no longer knows the multipart upload (NoSuchUpload): something else ended it`, { hint: 'try again' });
    }
  }

  /**
   * Ends a multipart upload that will not be completed, so that the server drops its parts; false
   * when it could not (a server that cannot be reached now keeps the upload until a lifecycle rule of
   * the bucket ends it). What failed is the caller's error, reported whatever happens here.
   */
  private async abandon(upload: MultipartUpload): Promise<boolean> {
    return this.client.send(new AbortMultipartUploadCommand(upload), this.abandonOptions()).then(
      () => true,
      // No such upload: ended already.
      (error: unknown) => (error as SdkError)?.name === 'NoSuchUpload' || (error as SdkError)?.$metadata?.httpStatusCode === 404,
    );
  }

  /** The requests' options of an abandon: after a stop (Ctrl-C), ABORT_AFTER_STOP_MS at most, as a stop does not wait for the server. */
  private abandonOptions(): { abortSignal?: AbortSignal } {
    return this.signal?.aborted ? { abortSignal: AbortSignal.timeout(ABORT_AFTER_STOP_MS) } : this.request;
  }

  /**
   * Fetches `key` into a local file, written under a temporary name and renamed into place: no torn
   * files. What arrives is checked (`fetchInto`); damaged bytes are dropped and fetched again, up to
   * MAX_ATTEMPTS times in all, so a part damaged in transit never reaches the cache. `expected`: what
   * the caller knows of the object (a snapshot's `part.bytes` and `part.sha256`), when it knows it.
   */
  async download(key: string, path: string, expected?: Expected): Promise<void> {
    mkdirSync(dirname(path), { recursive: true });
    await this.whole(key, async () => {
      const temp = `${path}${TEMP_MARKER}${randomSuffix()}`;
      try {
        const damage = await this.fetchInto(key, temp, expected);
        if (damage !== undefined) return { damage };
        await rename(temp, path);
        return { value: undefined };
      } finally {
        rmSync(temp, { force: true });
      }
    });
  }

  /**
   * Runs `fetch` (one GET and its body, one PUT, one part or one multipart upload) until what arrives
   * is whole: a body cut off, stalled or damaged on its way is sent or fetched again, MAX_ATTEMPTS
   * times in all (the SDK retries a request, but not once its body has begun, nor one the server
   * refused as damaged). `transfers` names them in the error; `signal` stops the waits between them.
   */
  private async whole<T>(key: string, fetch: () => Promise<Arrived<T>>, { transfers = 'downloads', signal = this.signal }: { transfers?: string; signal?: AbortSignal | undefined } = {}): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const got = await fetch();
      if (!('damage' in got)) return got.value;
      if (attempt === MAX_ATTEMPTS) {
        throw new UnavailableError(`${this.where(key)}: ${MAX_ATTEMPTS} ${transfers} came damaged (the last: ${got.damage})`, {
          hint: 'the server, or something on the way to it (a proxy), cuts or changes what passes; try again later',
        });
      }
      await this.backoff(attempt, key, signal);
    }
  }

  /** The wait after failed attempt `attempt`, as the SDK's: about 0.1, 0.2, 0.4, 0.8 s with jitter; a stop does not wait for it. */
  private async backoff(attempt: number, key: string, signal = this.signal): Promise<void> {
    await sleep(100 * 2 ** (attempt - 1) * (0.5 + Math.random()), undefined, { signal }).catch((error: unknown) => {
      throw this.failure(error, key);
    });
  }

  /** What broke a body on its way (cut off, or nothing arrived for the request timeout); any other failure is thrown as it is. */
  private brokenBody(error: unknown, key: string): string {
    const failure = this.failure(error, key);
    if (!(failure instanceof UnavailableError)) throw failure;
    const e = error as SdkError;
    return e.name === 'TimeoutError' ? `nothing arrived for ${this.requestTimeoutMs / 1000} s` : `the transfer broke off (${e.code ?? e.name})`;
  }

  /** One GET of `key` into the file `temp`: what is wrong with the bytes that arrived, or undefined when they are whole. */
  private async fetchInto(key: string, temp: string, expected: Expected | undefined): Promise<string | undefined> {
    const out = await this.send(key, () => this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: this.keyOf(key) }), this.request));
    // Hashed only when there is a digest to check against: an ETag that is an MD5 (never a multipart
    // upload's), the SHA-256 the snapshot lists.
    const etag = md5Of(out);
    const md5 = etag === undefined ? undefined : createHash('md5');
    const sha256 = expected?.sha256 === undefined ? undefined : createHash('sha256');
    let size = 0;
    // A body without a Content-Length (chunked) that runs past the size the snapshot lists is not
    // the part, however long it goes on: it would otherwise fill the disk.
    const tooLong = new Error('more bytes arrived than the snapshot lists');
    const limit = out.ContentLength ?? expected?.bytes ?? Infinity;
    const file = createWriteStream(temp, { mode: 0o644 });
    try {
      await pipeline(
        out.Body as Readable,
        async function* (chunks: AsyncIterable<Buffer>) {
          for await (const chunk of chunks) {
            md5?.update(chunk);
            sha256?.update(chunk);
            size += chunk.length;
            if (size > limit) throw tooLong;
            yield chunk;
          }
        },
        file,
      );
    } catch (error) {
      // A failed pipeline does not wait for the file: one still opening would be made after the
      // caller removed it, and stay in the cache.
      if (!file.closed) await new Promise<void>((resolve) => file.once('close', () => resolve()));
      if (error === tooLong) return tooLong.message;
      return this.brokenBody(error, key);
    }
    if (out.ContentLength !== undefined && size !== out.ContentLength) return `${size} bytes arrived of the ${out.ContentLength} announced`;
    if (expected !== undefined && size !== expected.bytes) {
      // All the server has arrived, and it is not what the snapshot lists: the object itself is
      // wrong (truncated or replaced in the bucket), which fetching again will not mend.
      if (out.ContentLength !== undefined) throw new InvalidInputError(`${this.where(key)}: the object is ${size} bytes, the snapshot lists ${expected.bytes}: the dataset is damaged`);
      return `${size} bytes arrived, ${expected.bytes} expected`;
    }
    if (md5 && md5.digest('hex') !== etag) return MD5_MISMATCH;
    if (sha256 && sha256.digest('hex') !== expected?.sha256) {
      // Bytes whose MD5 is the server's ETag are the ones it holds: the object is not the one the
      // snapshot lists. Without that MD5 (uploaded in parts) the way here may have changed them.
      if (md5) throw new InvalidInputError(`${this.where(key)}: its bytes are not those the snapshot lists (SHA-256): the dataset is damaged`);
      return 'the bytes do not match the SHA-256 the snapshot lists';
    }
    return undefined;
  }

  /**
   * Keys under a prefix, in byte order: every page of ListObjectsV2 (1,000 keys each). A server that
   * does not advance (a page marked truncated without a token, or with a token it gave before)
   * would be listed forever: that is the store failing (exit 6). Past MAX_LISTED_KEYS, exit 5.
   */
  async list(prefix: string): Promise<string[]> {
    const keys: string[] = [];
    const tokens = new Set<string>();
    let token: string | undefined;
    const notListing = (): UnavailableError =>
      new UnavailableError(`${this.where(prefix)}: the object store's answer to a listing is not a ListObjectsV2 result`, { hint: 'the endpoint may not be an S3 server (a proxy or a web page answers); check it' });
    do {
      const page = await this.send(prefix, () =>
        this.client.send(new ListObjectsV2Command({ Bucket: this.bucket, Prefix: this.keyOf(prefix), ...(token ? { ContinuationToken: token } : {}) }), this.request).catch((error: unknown) => {
          // Not a refusal of the request: an answer that is no listing.
          throw unreadableAnswer(error) && !this.signal?.aborted ? notListing() : error;
        }),
      );
      // Every ListObjectsV2 result says whether it is truncated; an answer without it (an empty body,
      // an HTML page) is no listing, and would otherwise read as an empty one.
      if (page.IsTruncated === undefined) throw notListing();
      for (const object of page.Contents ?? []) {
        if (object.Key === undefined) continue;
        // What the keys are taken for is what is under the prefix: a key outside it would be
        // shortened into another (`other/x` listed under `ds/` reads as `er/x`).
        if (!object.Key.startsWith(this.keyOf(prefix))) {
          throw new UnavailableError(`${this.where(prefix)}: the object store listed ${shownKey(object.Key)}, which is not under the prefix asked for`, {
            hint: 'the server does not follow ListObjectsV2; use one that does',
          });
        }
        keys.push(object.Key.slice(this.prefix.length));
      }
      if (keys.length > MAX_LISTED_KEYS) throw new ResourceLimitError(`${this.where(prefix)}: the listing passed ${MAX_LISTED_KEYS.toLocaleString('en-US')} keys; stopped`);
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
      if (page.IsTruncated && (token === undefined || tokens.has(token))) {
        throw new UnavailableError(`${this.where(prefix)}: the object store's listing does not advance (page ${tokens.size + 1} is marked truncated ${token === undefined ? 'without a continuation token' : 'with a continuation token it gave before'})`, {
          hint: 'the server does not follow ListObjectsV2; use one that does',
        });
      }
      if (token) tokens.add(token);
    } while (token);
    return keys.sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  }

  async delete(key: string): Promise<void> {
    await this.send(key, () => this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: this.keyOf(key) }), this.request));
  }

  /**
   * Deletes `key` only while it still holds the version `ifMatch` names (S3's conditional delete):
   * a ConflictError (exit 4) when another writer replaced it; false when it is gone already (S3
   * answers a conditional delete of no object 404, as it does the SDK's retry of one whose answer
   * was lost). A server that ignores If-Match on DELETE (as some S3-compatible ones do) deletes
   * whatever the key holds: the check cannot be made there.
   */
  async deleteIf(key: string, ifMatch: string): Promise<boolean> {
    const out = await this.sendIfPresent(key, () => this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: this.keyOf(key), IfMatch: ifMatch }), this.request));
    return out !== undefined;
  }

  /** Deletes keys 1,000 (S3's limit) per request (`deleteBatch`). */
  async deleteMany(keys: readonly string[]): Promise<void> {
    for (let i = 0; i < keys.length; i += 1000) await this.deleteBatch(keys.slice(i, i + 1000));
  }

  /**
   * Deletes up to 1,000 keys. S3 answers DeleteObjects 200 whatever became of each key, listing
   * (Quiet off) the keys it deleted and an <Error> for each it did not: a key not listed as deleted
   * (an error, left out, or an answer that cannot be read) is not taken for deleted, and is asked
   * for again (a delete is the same done twice), MAX_ATTEMPTS requests in all. What is still left
   * fails, naming a key and the server's error code: exit 2 when access is denied, else exit 6.
   */
  private async deleteBatch(batch: readonly string[]): Promise<void> {
    let left = batch;
    for (let attempt = 1; ; attempt++) {
      const objects = left.map((key) => ({ Key: this.keyOf(key) }));
      const out: Pick<DeleteObjectsCommandOutput, 'Deleted' | 'Errors'> = await this.send(left[0] ?? '', () =>
        this.client.send(withContentMd5(new DeleteObjectsCommand({ Bucket: this.bucket, Delete: { Objects: objects, Quiet: false } })), this.request).catch((error: unknown) => {
          // Nothing in it says what was deleted.
          if (unreadableAnswer(error) && !this.signal?.aborted) return {};
          throw error;
        }),
      );
      const deleted = new Set(out.Deleted?.map((entry) => entry.Key));
      const codes = new Map(out.Errors?.map((entry) => [entry.Key, entry.Code ?? '']));
      const failed = left.filter((key) => !deleted.has(this.keyOf(key)));
      if (failed.length === 0) return;
      const first = failed[0]!;
      const code = codes.has(this.keyOf(first)) ? shownCode(codes.get(this.keyOf(first))!, this.credentials) || 'an error without a code' : 'not listed as deleted';
      const what = `${this.where(first)}: the object store did not delete it (${code}); ${failed.length} of the ${left.length} object(s) asked for were not deleted`;
      if (code === 'AccessDenied') throw new InvalidInputError(what, { hint: 'check that the credentials may delete objects of the bucket (and that no object lock holds them)' });
      if (attempt === MAX_ATTEMPTS) throw new UnavailableError(`${what} after ${MAX_ATTEMPTS} attempts`, { hint: 'try again later' });
      left = failed;
      await this.backoff(attempt, first);
    }
  }

  close(): void {
    this.client.destroy();
  }
}
