/**
 * The DNS rebinding guard of loopback listeners (every `serve` listener; the serving Router without
 * an API key): a request whose Host header is not a loopback name is refused with 403 before any
 * route runs. Loopback listeners alone do not keep other sites out: a page whose site points
 * its own name at 127.0.0.1 reaches them from the user's browser, which then sends that name.
 */
import type { FastifyInstance, FastifyReply } from 'fastify';
import { isLoopbackHostHeader } from './loopback.js';

/** Adds the guard to `app`; `refuse` sends the 403 in the listener's own error shape. */
export function refuseOtherHosts(app: FastifyInstance, refuse: (reply: FastifyReply, message: string) => FastifyReply): void {
  app.addHook('onRequest', async (req, reply) => {
    if (isLoopbackHostHeader(req.headers.host)) return;
    return refuse(reply.code(403), `Host ${JSON.stringify(req.headers.host)} is not a loopback name: this server answers requests for this machine only (127.0.0.1, [::1] or localhost)`);
  });
}
