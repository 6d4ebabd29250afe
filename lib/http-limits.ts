/** Time limits of the HTTP listeners (trajstore serve, the serving Router, sandboxd). */
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';

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
