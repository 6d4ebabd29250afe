/**
 * The DNS rebinding guard of loopback listeners (every `serve` listener; the serving Router without
 * an API key): a request whose Host is not a loopback name is refused with 403 before any route
 * runs. Loopback listeners alone do not keep other sites out: a page whose site points its own name
 * at 127.0.0.1 reaches them from the user's browser, which then sends that name.
 *
 * The host a request names is its Host header, and, for a request target in absolute form
 * (`POST http://host/path`), the target's authority too (RFC 9112 gives that one precedence); both
 * must be loopback names. A request with more than one Host header, or (HTTP/1.1) none, is refused
 * with 400 (RFC 9112, `hostHeaderFault`).
 *
 * Beside it, the CSRF guard (`refuseCrossSiteChanges`): what is not a read, sent from another
 * site's page, is refused too.
 */
import type { FastifyInstance, FastifyReply } from 'fastify';
import { crossSite, isLoopbackHostHeader } from './loopback.js';
import { hostHeaderFault } from './protocol-errors.js';

/** Adds the guard to `app`; `refuse` sends the refusal (its status already set) in the listener's own error shape. */
export function refuseOtherHosts(app: FastifyInstance, refuse: (reply: FastifyReply, message: string) => FastifyReply): void {
  app.addHook('onRequest', async (req, reply) => {
    const fault = hostHeaderFault(req.raw);
    if (fault !== undefined) return refuse(reply.code(400), fault);
    const named = [req.headers.host, absoluteAuthority(req.raw.url ?? '/')];
    const other = named.find((host) => !isLoopbackHostHeader(host));
    if (other === undefined) return;
    return refuse(reply.code(403), `Host ${JSON.stringify(other)} is not a loopback name: this server answers requests for this machine only (127.0.0.1, [::1] or localhost)`);
  });
}

/** Methods that only read: a page of any site may link to them (it cannot read the answer without CORS, which these listeners do not grant). */
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * Adds the CSRF guard to `app`: a request of any other method from another site's page (loopback.ts
 * `crossSite`) is refused with 403 before any route runs. A page may send a POST without a body, or
 * with a form's or text's type, to any address without the browser asking first, so a loopback
 * listener would otherwise run it for whichever site the user has open.
 */
export function refuseCrossSiteChanges(app: FastifyInstance, refuse: (reply: FastifyReply, message: string) => FastifyReply): void {
  app.addHook('onRequest', async (req, reply) => {
    if (SAFE_METHODS.has(req.method)) return;
    const why = crossSite(req.headers);
    if (why !== undefined) return refuse(reply.code(403), `${why}: a page of another site may not send this server a ${req.method}`);
  });
}

/** The authority of a request target in absolute form (`http://host:port/path`), '' when it has none to parse; undefined for the usual origin form (`/path`). */
function absoluteAuthority(target: string): string | undefined {
  if (target.startsWith('/') || target === '*') return undefined;
  try {
    return new URL(target).host;
  } catch {
    return '';
  }
}
