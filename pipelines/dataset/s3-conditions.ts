/**
 * Whether an object store honours conditional PUTs, asked before a command's first conditional write
 * (S3ObjectStore `requireConditionalWrites`). Every writer commits by one (`If-None-Match: *` for a
 * create, `If-Match` for an append or a drop's marker, `If-None-Match: *` for each object of a
 * create-only export): a server that ignores them answers 200 to both of two racing writers, the
 * last one wins and the other's runs are lost, both exiting 0. So a server that does not honour them
 * is refused (exit 2) before anything is written, unless the user says that there is one writer
 * (SINGLE_WRITER_ENV=1), which writes without asking.
 *
 * The probe's requests (s3-store.ts `probeConditionalWrites`) are made once per process and
 * endpoint+bucket, and a server found to honour them is remembered for VERDICT_TTL_MS in the cache
 * (`$XDG_CACHE_HOME/trajstore/conditional-writes/<hash of endpoint and bucket>`, the file's time
 * being the verdict's), so a pipeline importing every minute probes once an hour. Only that verdict
 * is kept: a refusal is asked again, the user having perhaps changed the server meanwhile.
 */
import { createHash } from 'node:crypto';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { cacheHome } from '../../lib/config.js';
import { writeFileDurably } from '../../lib/durable.js';
import { InvalidInputError } from '../../lib/errors.js';

export const SINGLE_WRITER_ENV = 'TRAJSTORE_S3_SINGLE_WRITER';
/** How long a server found to honour conditional writes is taken to still honour them. */
export const VERDICT_TTL_MS = 60 * 60_000;

/** The server a store writes to, as the check knows it. */
export interface ConditionalServer {
  /** The dataset or target being written (`s3://bucket/prefix`), for the message. */
  uri: string;
  /** The endpoint's URL as a message may show it: no user or password, no query. */
  endpoint: string;
  bucket: string;
}

/** What the checks under way or done in this process found, by endpoint and bucket: undefined when the server honours conditional writes. */
const findings = new Map<string, Promise<string | undefined>>();

/**
 * Resolves when `server` may be written with conditional PUTs: the user said there is one writer,
 * the cache holds a recent verdict, or `probe` (which returns what the server did wrong, or
 * undefined) finds that it honours them. Otherwise an InvalidInputError naming the endpoint, what
 * it answered and what to do.
 */
export async function requireConditionalWrites(server: ConditionalServer, env: NodeJS.ProcessEnv, probe: () => Promise<string | undefined>): Promise<void> {
  if (singleWriter(env)) return;
  const id = `${server.endpoint}\n${server.bucket}`;
  let finding = findings.get(id);
  if (!finding) {
    finding = findingOf(verdictPath(env, id), server, probe);
    findings.set(id, finding);
    // A probe that failed (the server unreachable) is made again by a later writer of this process.
    finding.catch(() => findings.delete(id));
  }
  const found = await finding;
  if (found === undefined) return;
  throw new InvalidInputError(
    `${server.uri}: the object store at ${server.endpoint} (bucket ${server.bucket}) does not honour conditional writes: it ${found}; refusing to write there: of two writers at once, one would lose what it wrote without an error`,
    { hint: `use a server that answers 412 to a PUT whose If-None-Match or If-Match does not hold (AWS S3 and MinIO do); if no other process ever writes to ${server.uri}, set ${SINGLE_WRITER_ENV}=1 to write without the check` },
  );
}

/** What the server does wrong, from a recent verdict in the cache (nothing) or the probe; a server found to honour them is written down. */
async function findingOf(verdict: string, server: ConditionalServer, probe: () => Promise<string | undefined>): Promise<string | undefined> {
  if (recentVerdict(verdict)) return undefined;
  const found = await probe();
  if (found !== undefined) return found;
  // A cache that cannot be written only means that the next command probes again.
  try {
    writeFileDurably(verdict, `${JSON.stringify({ endpoint: server.endpoint, bucket: server.bucket, honoured_at: new Date().toISOString() })}\n`, { createDirectory: true });
  } catch {
    // The probe stands for this process.
  }
  return undefined;
}

/** SINGLE_WRITER_ENV: 1 (one writer: no check), 0 or unset; anything else is refused (exit 2) rather than guessed. */
function singleWriter(env: NodeJS.ProcessEnv): boolean {
  const text = env[SINGLE_WRITER_ENV];
  if (text === undefined || text === '' || text === '0') return false;
  if (text === '1') return true;
  throw new InvalidInputError(`invalid ${SINGLE_WRITER_ENV} ${JSON.stringify(text)}: expected 1 (one writer: write without checking that the object store honours conditional writes) or 0`);
}

/** The cache file of the verdict on a server: its name a hash, as an endpoint is no file name. */
function verdictPath(env: NodeJS.ProcessEnv, id: string): string {
  return join(cacheHome(env), 'trajstore', 'conditional-writes', `${createHash('sha256').update(id).digest('hex').slice(0, 16)}.json`);
}

/** Whether the verdict file was written within VERDICT_TTL_MS (a time in the future, a clock set back, is no verdict). */
function recentVerdict(path: string): boolean {
  try {
    const age = Date.now() - statSync(path).mtimeMs;
    return age >= 0 && age < VERDICT_TTL_MS;
  } catch {
    return false;
  }
}
