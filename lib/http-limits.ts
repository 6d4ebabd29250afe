/** Time limits of the HTTP listeners (trajstore serve, the serving Router, sandboxd). */
import type { FastifyInstance } from 'fastify';

/**
 * Time a client has to send a whole request, headers and body; past it Node's server answers 408
 * and closes the connection. Fastify's default is no limit, so a request whose body never came
 * would be held for good (and hold up shutdown).
 */
export const REQUEST_TIMEOUT_MS = 60_000;

/** Time the requests under way get to finish at shutdown before their connections are closed. */
export const SHUTDOWN_GRACE_MS = 10_000;

/**
 * Closes a listener: requests under way get SHUTDOWN_GRACE_MS, then their connections are closed
 * (a client that never ends its request must not keep the process up).
 */
export async function closeWithGrace(app: FastifyInstance): Promise<void> {
  const cut = setTimeout(() => app.server.closeAllConnections(), SHUTDOWN_GRACE_MS);
  try {
    await app.close();
  } finally {
    clearTimeout(cut);
  }
}
