/** Time limits of the HTTP listeners (trajstore serve, the serving Router). */

/**
 * Time a client has to send a whole request, headers and body; past it Node's server answers 408
 * and closes the connection. Fastify's default is no limit, so a request whose body never came
 * would be held for good (and hold up shutdown).
 */
export const REQUEST_TIMEOUT_MS = 60_000;

/** Time the requests under way get to finish at shutdown before their connections are closed. */
export const SHUTDOWN_GRACE_MS = 10_000;
