/**
 * The directory service's HTTP routes, as a fastify plugin that `serve --catalog-config FILE`
 * registers next to its own routes (the schemas here are the routes' only validation and types):
 *
 *   GET  /catalog/v1/datasets   the libraries granted to the caller        -> { user, datasets: [{ name }] }
 *   POST /catalog/v1/tickets    { "dataset": NAME }: a ticket to open it   -> { ticket } (tickets.ts)
 *
 * Every request authenticates with HTTP Basic `access_key:secret_key`. No or wrong credentials:
 * 401. A library that is not granted, and one that does not exist, both get the same 403, so a
 * user learns nothing about libraries beyond their own grants. Errors have serve's shape
 * (serve/errors.ts) `{"error": {"status", "code", "message", "hint"?}}`. The ACL is read once,
 * when the plugin is registered: changes apply when serve restarts.
 */
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { ErrorBody, errorBody } from '../serve/errors.js';
import type { Acl } from './acl.js';
import { verifySecret } from './keys.js';
import { CATALOG_PREFIX, TICKET_LIFETIME_MS } from './constants.js';
import { Ticket, grantedTo, ticketFor } from './tickets.js';


export interface CatalogPluginOptions {
  acl: Acl;
  /** Tests shorten it; the default is TICKET_LIFETIME_MS. */
  ticketLifetimeMs?: number;
}

const DatasetList = Type.Object({ user: Type.String(), datasets: Type.Array(Type.Object({ name: Type.String() }, { additionalProperties: false })) }, { additionalProperties: false });
const TicketRequest = Type.Object({ dataset: Type.String({ minLength: 1, maxLength: 64 }) }, { additionalProperties: false });
const TicketReply = Type.Object({ ticket: Ticket }, { additionalProperties: false });

const ERRORS = { 400: ErrorBody, 401: ErrorBody, 403: ErrorBody };

/** `Basic base64(access_key:secret_key)`, or undefined when the header is missing or malformed. */
function basicCredentials(header: string | undefined): { accessKey: string; secretKey: string } | undefined {
  const match = /^Basic ([A-Za-z0-9+/=]{1,1024})$/.exec(header ?? '');
  if (!match) return undefined;
  const decoded = Buffer.from(match[1] as string, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon <= 0 || colon === decoded.length - 1) return undefined;
  return { accessKey: decoded.slice(0, colon), secretKey: decoded.slice(colon + 1) };
}

export const catalogPlugin: FastifyPluginAsync<CatalogPluginOptions> = async (app, options) => {
  const { acl } = options;
  const lifetime = options.ticketLifetimeMs ?? TICKET_LIFETIME_MS;
  const users = new WeakMap<FastifyRequest, string>();
  const byAccessKey = new Map([...acl.users].map(([name, user]) => [user.access_key, { name, hash: user.secret_hash }]));

  const unauthorized = (reply: FastifyReply, message: string): FastifyReply =>
    reply.code(401).header('www-authenticate', 'Basic realm="trajstore catalog", charset="UTF-8"').send(errorBody(401, 'unauthorized', message, 'send the access key and secret key that `serve catalog issue` printed, as HTTP Basic credentials'));

  // The schemas are the validation, exactly: fastify's default validator would drop unknown
  // fields (removeAdditional) where these schemas refuse them. Scoped to this plugin's routes.
  app.setValidatorCompiler(({ schema }) => {
    const check = TypeCompiler.Compile(schema as TSchema);
    return (data: unknown) => {
      if (check.Check(data)) return { value: data };
      const first = check.Errors(data).First();
      return { error: new Error(first ? `${first.path || 'body'}: ${first.message}` : 'does not match the schema') };
    };
  });

  // onRequest: before the body is read, so that nobody unauthenticated gets as far as validation.
  app.addHook('onRequest', async (request, reply) => {
    const credentials = basicCredentials(request.headers.authorization);
    if (!credentials) return unauthorized(reply, 'credentials required');
    const user = byAccessKey.get(credentials.accessKey);
    // An unknown access key costs the same scrypt as a known one (keys.ts).
    if (!(await verifySecret(credentials.secretKey, user?.hash)) || user === undefined) return unauthorized(reply, 'unknown access key or wrong secret key');
    users.set(request, user.name);
    return undefined;
  });

  // A client's mistake is answered here; anything else goes on to the host server's handler
  // (serve/server.ts), which logs it to serve's logger (fastify's own, request.log, is off) and
  // answers the same bare 500.
  app.setErrorHandler((error: { validation?: unknown; statusCode?: number; message: string }, _request, reply) => {
    if (error.validation === undefined && (error.statusCode === undefined || error.statusCode >= 500)) throw error;
    const status = error.statusCode ?? 400;
    return reply.code(status).send(errorBody(status, 'bad_request', `invalid request: ${error.message}`));
  });

  app.get(`${CATALOG_PREFIX}/datasets`, { schema: { response: { 200: DatasetList, ...ERRORS } } }, async (request) => {
    const user = users.get(request) as string;
    return { user, datasets: grantedTo(acl, user).map((name) => ({ name })) };
  });

  app.post<{ Body: Static<typeof TicketRequest> }>(`${CATALOG_PREFIX}/tickets`, { bodyLimit: 4096, schema: { body: TicketRequest, response: { 200: TicketReply, ...ERRORS } } }, async (request, reply) => {
    const user = users.get(request) as string;
    const ticket = ticketFor(acl, user, request.body.dataset, Date.now(), lifetime);
    if (!ticket) return reply.code(403).send(errorBody(403, 'forbidden', `dataset ${JSON.stringify(request.body.dataset)} is not granted to this access key`, 'list what is granted with `trajstore list @PIN`'));
    // A ticket may carry an object store's credentials: it must not sit in a cache.
    reply.header('cache-control', 'no-store');
    return { ticket };
  });
};
