/**
 * `serve`: the read-only HTTP API and web interface over mounted datasets, on fastify, and the
 * optional control listener. Every listener address is checked loopback (address.ts) before
 * anything binds. Requests are traced to the logger (info: one line per request; a 500's cause at
 * error), so `--log-level` filters them.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import { ConflictError, InvalidInputError } from '../../lib/errors.js';
import type { Logger } from '../../lib/log.js';
import type { ResolveContext } from '../pins/resolve.js';
import { isLoopbackHostHeader, parseListenAddress, type ListenAddress } from './address.js';
import type { ServeContext } from './context.js';
import { errorBody, toHttpError } from './errors.js';
import { Mounts, type MountSpec } from './mounts.js';
import { DEFAULT_SERVE_MOUNT } from './names.js';
import { controlRoutes, type ServeCounters } from './routes/control.js';
import { datasetRoutes } from './routes/datasets.js';
import { searchRoutes } from './routes/search.js';
import { statsRoutes } from './routes/stats.js';
import { webRoutes } from './routes/web.js';


export interface ServeOptions {
  mounts: MountSpec[];
  listen: string;
  control?: string;
  /** The bundled web interface (dist/bin/web). */
  webRoot: string;
  log: Logger;
  /** More routes on the API listener (the directory service registers here). */
  extend?: (app: FastifyInstance) => Promise<void> | void;
}

export interface RunningServer {
  url: string;
  controlUrl: string | undefined;
  close(): Promise<void>;
}

const urlOf = (app: FastifyInstance): string => {
  const address = app.server.address();
  if (address === null || typeof address === 'string') return String(address);
  return `http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}/`;
};

function newApp(ctx: ServeContext, counters: ServeCounters): FastifyInstance {
  // Unknown fields are refused, not dropped: a misspelt limit must not silently fall back to the default.
  const app = Fastify({ logger: false, bodyLimit: 1024 * 1024, return503OnClosing: true, ajv: { customOptions: { removeAdditional: false } } });
  app.addHook('onRequest', async (req, reply) => {
    counters.requests++;
    (req as { startedAt?: bigint }).startedAt = process.hrtime.bigint();
    if (!isLoopbackHostHeader(req.headers.host)) {
      return reply.code(403).send(errorBody(403, 'forbidden', `Host ${JSON.stringify(req.headers.host)} is not a loopback name: serve answers requests for this machine only`, 'use http://127.0.0.1:PORT/ or http://localhost:PORT/ (a reverse proxy in front must pass the original Host or rewrite it)'));
    }
  });
  app.addHook('onResponse', async (req, reply) => {
    const started = (req as { startedAt?: bigint }).startedAt ?? process.hrtime.bigint();
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    ctx.log.info(`${req.method} ${req.url} ${reply.statusCode} ${ms.toFixed(1)}ms`);
  });
  app.setErrorHandler((error, req, reply) => {
    const { body, internal } = toHttpError(error);
    if (internal) ctx.log.error(`${req.method} ${req.url}: ${(error as Error).stack ?? String(error)}`);
    else ctx.log.debug(`${req.method} ${req.url}: ${body.error.message}`);
    void reply.code(body.error.status).send(body);
  });
  app.setNotFoundHandler((req, reply) => {
    void reply.code(404).send(errorBody(404, 'not_found', `no route ${req.method} ${req.url.split('?')[0]}`));
  });
  return app;
}

async function listen(app: FastifyInstance, address: ListenAddress, flag: string): Promise<void> {
  try {
    await app.listen({ host: address.host, port: address.port });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EADDRINUSE') throw new ConflictError(`${flag} ${address.host}:${address.port} is in use by another process`, { hint: 'choose another port (0 picks a free one)' });
    throw error;
  }
}

export async function startServer(rc: ResolveContext, options: ServeOptions): Promise<RunningServer> {
  // Checked before anything binds or opens: a bad address exits without having listened.
  const listenAt = parseListenAddress(options.listen, '--listen');
  const controlAt = options.control === undefined ? undefined : parseListenAddress(options.control, '--control');
  if (controlAt && !options.mounts.some((m) => m.name === DEFAULT_SERVE_MOUNT)) {
    throw new InvalidInputError(`--control needs a mount named ${DEFAULT_SERVE_MOUNT}`, { hint: `give one bare DATASET, or ${DEFAULT_SERVE_MOUNT}=DATASET among the mounts` });
  }
  const mounts = new Mounts(options.mounts, rc);
  const ctx: ServeContext = { mounts, log: options.log };
  const counters: ServeCounters = { startedAt: new Date(), requests: 0 };
  // Every mount is opened once before listening: a missing dataset fails here, not on a first request.
  for (const name of mounts.names()) await mounts.use(name, () => undefined);

  const app = newApp(ctx, counters);
  datasetRoutes(app, ctx);
  searchRoutes(app, ctx);
  statsRoutes(app, ctx);
  webRoutes(app, options.webRoot);
  if (options.extend) await app.register(async (scope) => options.extend?.(scope));
  const control = controlAt ? newApp(ctx, counters) : undefined;
  if (control) controlRoutes(control, ctx, counters);
  try {
    await listen(app, listenAt, '--listen');
    if (control && controlAt) await listen(control, controlAt, '--control');
  } catch (error) {
    await Promise.all([app.close(), control?.close()]);
    mounts.close();
    throw error;
  }
  return {
    url: urlOf(app),
    controlUrl: control ? urlOf(control) : undefined,
    async close() {
      await Promise.all([app.close(), control?.close()]);
      mounts.close();
    },
  };
}
