/** Time and connection limits of the HTTP listeners (trajstore serve, the serving Router, sandboxd). */
import { readFileSync } from 'node:fs';
import type { Server, Socket } from 'node:net';
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { ErrorShape } from './protocol-errors.js';

/**
 * Time a client has to send a whole request, headers and body; past it Node's server answers 408
 * and closes the connection. Fastify's default is no limit, so a request whose body never came
 * would be held for good (and hold up shutdown).
 */
export const REQUEST_TIMEOUT_MS = 60_000;

/**
 * Time an answer may wait for its client to take any of it (as nginx's send_timeout and Apache's
 * Timeout): past it the connection is closed. Without it a client that stops reading holds its
 * answer in the server's memory for good, and enough such clients exhaust it.
 */
export const SEND_TIMEOUT_MS = 60_000;

/**
 * Most bytes of answers a listener holds at once for clients that have not taken them yet (four
 * of the largest a query may give). Until SEND_TIMEOUT_MS closes them, clients that stop reading
 * would otherwise each hold up to a whole answer in the server's memory, as many as connect.
 */
export const MAX_HELD_ANSWER_BYTES = 256 * 1024 * 1024;

/**
 * Closes the connections of `app` whose answer has not moved for SEND_TIMEOUT_MS at most. A connection
 * that is only quiet (its request still being answered, or kept alive between requests) is left to
 * the other limits: the listener here replaces Node's own, which would close it too.
 */
export function closeStalledAnswers(app: FastifyInstance): void {
  // Half: Node's socket reports a timeout only at the second quiet period when its write queue had
  // moved since the write began (the kernel took a first part), so a stall is told after one or two.
  app.server.timeout = SEND_TIMEOUT_MS / 2;
  app.server.on('timeout', (socket: Socket) => {
    if (socket.writableLength > 0) socket.destroy();
  });
}

/** What a client refused by boundHeldAnswers is told to wait before trying again, in seconds. */
const HELD_RETRY_AFTER_S = 5;

/**
 * Bounds the bytes of answers `app` holds for its clients to MAX_HELD_ANSWER_BYTES: an answer counts
 * from when it is sent until its client has taken it all or its connection closes. An answer that
 * would pass it is replaced by a small 503 in the listener's `shape` (with `headers()`).
 */
export function boundHeldAnswers(app: FastifyInstance, shape: ErrorShape, headers: () => Record<string, string> = () => ({})): void {
  let held = 0;
  const refusal = (reply: FastifyReply): string => {
    void reply.code(503).headers({ ...headers(), 'retry-after': String(HELD_RETRY_AFTER_S) }).type('application/json; charset=utf-8');
    const message = `the server holds ${MAX_HELD_ANSWER_BYTES / 1024 / 1024} MiB of answers its clients have not taken yet, the most it holds`;
    return JSON.stringify(shape(503, 'unavailable', message));
  };
  app.addHook('onSend', async (_req, reply, payload) => {
    const bytes = typeof payload === 'string' ? Buffer.byteLength(payload) : Buffer.isBuffer(payload) ? payload.length : 0;
    // An answer to a client already gone is never held (and its 'close' has passed).
    if (bytes === 0 || reply.raw.socket?.destroyed !== false) return payload;
    if (held + bytes > MAX_HELD_ANSWER_BYTES) return refusal(reply);
    held += bytes;
    // 'close' comes once the answer is all handed to the kernel, or its connection is gone.
    reply.raw.once('close', () => (held -= bytes));
    return payload;
  });
}

/** Time the requests under way get to finish at shutdown before their connections are closed. */
export const SHUTDOWN_GRACE_MS = 10_000;

/** How often a closing listener closes the connections that have gone idle since it began to close. */
const IDLE_REAP_MS = 50;

/**
 * Closes a listener: requests under way get SHUTDOWN_GRACE_MS, then their connections are closed
 * (a client that never ends its request must not keep the process up). Node closes only the
 * connections idle when the listener begins to close: a keep-alive connection whose request was
 * under way then stayed open once answered, and kept the process up until the grace ended. So
 * connections are closed as they go idle.
 */
export async function closeWithGrace(app: FastifyInstance): Promise<void> {
  const cut = setTimeout(() => app.server.closeAllConnections(), SHUTDOWN_GRACE_MS);
  const reap = setInterval(() => app.server.closeIdleConnections(), IDLE_REAP_MS);
  try {
    await app.close();
  } finally {
    clearTimeout(cut);
    clearInterval(reap);
  }
}

/** The open-file limit assumed where /proc/self/limits cannot be read (not Linux): the usual default. */
export const FALLBACK_OPEN_FILE_LIMIT = 1024;

/**
 * The soft RLIMIT_NOFILE of this process ("Max open files" in /proc/self/limits; Node raises the
 * soft limit to the hard one at start-up, so this is what the process can really open), or
 * FALLBACK_OPEN_FILE_LIMIT when unreadable.
 */
export function openFileLimit(limitsFile = '/proc/self/limits'): number {
  let text: string;
  try {
    text = readFileSync(limitsFile, 'utf8');
  } catch {
    return FALLBACK_OPEN_FILE_LIMIT;
  }
  const soft = /^Max open files\s+(\S+)/m.exec(text)?.[1];
  if (soft === 'unlimited') return Number.MAX_SAFE_INTEGER;
  return soft !== undefined && /^\d+$/.test(soft) ? Number(soft) : FALLBACK_OPEN_FILE_LIMIT;
}

/**
 * Whether `error` is this process (EMFILE) or the system (ENFILE) out of file descriptors: a
 * passing shortage to report as such and retry, not a fault of the server.
 */
export function isOutOfDescriptors(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | null | undefined)?.code;
  return code === 'EMFILE' || code === 'ENFILE';
}

/** Descriptors a process keeps for itself by default: its own files, pipes and outbound sockets. */
export const DEFAULT_DESCRIPTOR_RESERVE = 128;

/** The fewest connections a listener is capped at, however low the limit: below it the service is unusable anyway. */
const MIN_CONNECTIONS = 8;

/** A listener of the process and the descriptors one of its connections may hold (2 where a request is proxied on). */
export interface CappedListener {
  name: string;
  server: Server;
  descriptorsPerConnection: number;
}

/** After a drop, further drops are told again only once this long has passed without any. */
export const DROP_WARNING_QUIET_MS = 60_000;

/**
 * Caps the connections of a process's listeners so that together they cannot use up its open-file
 * limit: the soft limit less `reserve` (what the process needs for its own work) is shared evenly
 * among the listeners, each dividing its share by the descriptors a connection may hold. Past its
 * cap a listener closes new connections at once (Node's `maxConnections`); without it, clients
 * that open and hold connections took every descriptor, and the process's own work (writing its
 * state, reaching its backends) failed with EMFILE until they let go. A listener that reaches its
 * cap warns once, not per connection dropped; it warns again after a quiet DROP_WARNING_QUIET_MS.
 * Returns each listener's cap.
 */
export function capConnections(listeners: CappedListener[], warn: (message: string) => void, options: { reserve?: number; limit?: number } = {}): number[] {
  const limit = options.limit ?? openFileLimit();
  const reserve = options.reserve ?? DEFAULT_DESCRIPTOR_RESERVE;
  const share = Math.max(0, limit - reserve) / Math.max(1, listeners.length);
  return listeners.map(({ name, server, descriptorsPerConnection }) => {
    const cap = Math.max(MIN_CONNECTIONS, Math.floor(share / descriptorsPerConnection));
    server.maxConnections = cap;
    let lastDrop = -Infinity;
    server.on('drop', () => {
      const now = Date.now();
      if (now - lastDrop > DROP_WARNING_QUIET_MS) {
        warn(`${name}: at its cap of ${cap} connections (open-file limit ${limit}, ${reserve} descriptors kept for the process's own work): new connections are closed until some end`);
      }
      lastDrop = now;
    });
    return cap;
  });
}
