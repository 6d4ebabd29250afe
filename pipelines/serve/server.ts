/**
 * `serve`: the read-only HTTP API and web interface over mounted datasets, on fastify, and the
 * optional control listener. Every listener address is checked loopback (address.ts) before
 * anything binds. Requests are traced to the logger (info: one line per request; a 500's cause at
 * error), so `--log-level` filters them.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import { boundHeldAnswers, capConnections, closeStalledAnswers, closeWithGrace, REQUEST_TIMEOUT_MS, type CappedListener } from '../../lib/http-limits.js';
import { answerHalfClosedClients } from '../../lib/client-gone.js';
import { boundedBody, jsonBody, type BodyLimits } from '../../lib/bounded-body.js';
import { InvalidInputError, addressInUse } from '../../lib/errors.js';
import type { Logger } from '../../lib/log.js';
import type { ResolveContext } from '../pins/resolve.js';
import { parseListenAddress, type ListenAddress } from './address.js';
import { refuseCrossSiteChanges, refuseOtherHosts } from '../../lib/loopback-host.js';
import { protocolErrorOptions, refuseBadHostHeader } from '../../lib/protocol-errors.js';
import { strictQueryNumbers } from './query-numbers.js';
import type { ServeContext } from './context.js';
import { errorBody, toHttpError } from './errors.js';
import { ANSWER_HEADERS } from './answer-headers.js';
import { schemaError } from '../../lib/schema-error.js';
import { Mounts, type MountSpec } from './mounts.js';
import { SqlThread } from '../search/sql/thread/client.js';
import { DEFAULT_SERVE_MOUNT, GATEWAY_MOUNT } from './names.js';
import { controlRoutes, type ServeCounters } from './routes/control.js';
import { datasetRoutes } from './routes/datasets.js';
import { searchRoutes } from './routes/search.js';
import { statsRoutes } from './routes/stats.js';
import { webRoutes } from './routes/web.js';
import type { Capture } from './capture/capture.js';
import type { Gateway } from './gateway/index.js';


export interface ServeOptions {
  mounts: MountSpec[];
  listen: string;
  control?: string;
  /** The bundled web interface (dist/bin/web). */
  webRoot: string;
  log: Logger;
  /** More routes on the API listener (the directory service registers here). */
  extend?: (app: FastifyInstance) => Promise<void> | void;
  /** The event gateway and the LLM capture gateway, writing into one dataset (gateway/, capture/). */
  gateway?: GatewayServeOptions;
}

export interface GatewayServeOptions {
  /** `--gateway ADDRESS`: the event gateway's listener (POST /v1/events, OTLP traces). */
  listen?: string;
  /** `--gateway-dataset`: a path, an s3:// uri or a pin; mounted as GATEWAY_MOUNT. */
  dataset: string;
  /** `--gateway-state`. */
  state?: string;
  /** `--gateway-split`. */
  split?: string;
  /** `--gateway-split-idle`, in ms. */
  idleMs: number;
  /** `--gateway-config FILE`: the LLM capture gateway. */
  config?: string;
  streamMarkdown: boolean;
  debug: boolean;
}

export interface RunningServer {
  url: string;
  controlUrl: string | undefined;
  /** The event gateway's listener, with --gateway. */
  gatewayUrl?: string;
  /** The capture gateway's proxy and admin listeners, with --gateway-config. */
  captureUrl?: string;
  captureAdminUrl?: string;
  close(): Promise<void>;
}

const urlOf = (app: FastifyInstance): string => {
  const address = app.server.address();
  if (address === null || typeof address === 'string') return String(address);
  return `http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}/`;
};

/** Request bodies are queries, not datasets: up to 1 MiB; a larger one is read and dropped up to 8 MiB, so that its sender gets the 413. */
const BODY_LIMITS: BodyLimits = { maxBytes: 1024 * 1024, drainBytes: 8 * 1024 * 1024 };

function newApp(ctx: ServeContext, counters: ServeCounters): FastifyInstance {
  // Unknown fields are refused, not dropped: a misspelt limit must not silently fall back to the default.
  const app = Fastify({ ...protocolErrorOptions(errorBody, () => ANSWER_HEADERS), schemaErrorFormatter: schemaError, logger: false, bodyLimit: BODY_LIMITS.drainBytes, requestTimeout: REQUEST_TIMEOUT_MS, return503OnClosing: true, ajv: { customOptions: { removeAdditional: false } } });
  refuseBadHostHeader(app, errorBody, () => ANSWER_HEADERS);
  answerHalfClosedClients(app);
  closeStalledAnswers(app);
  boundHeldAnswers(app, errorBody, () => ANSWER_HEADERS);
  // Requests are JSON (and only JSON: a text/plain body is not parsed as something else).
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', boundedBody(BODY_LIMITS, jsonBody));
  strictQueryNumbers(app);
  app.addHook('onRequest', async (req, reply) => {
    counters.requests++;
    (req as { startedAt?: bigint }).startedAt = process.hrtime.bigint();
    void reply.headers(ANSWER_HEADERS);
  });
  refuseOtherHosts(app, (reply, message) => reply.send(errorBody(403, 'forbidden', message, 'a reverse proxy in front must send a loopback Host')));
  refuseCrossSiteChanges(app, (reply, message) => reply.send(errorBody(403, 'forbidden', message)));
  app.addHook('onResponse', async (req, reply) => {
    const started = (req as { startedAt?: bigint }).startedAt ?? process.hrtime.bigint();
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    ctx.log.info(`${req.method} ${req.url} ${reply.statusCode} ${ms.toFixed(1)}ms`);
  });
  app.setErrorHandler((error, req, reply) => {
    const { body, internal } = toHttpError(error, req.headers['content-type']);
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
    if ((error as NodeJS.ErrnoException).code === 'EADDRINUSE') throw addressInUse(`${flag} ${address.host}:${address.port}`);
    throw error;
  }
}

/** The gateway (and capture gateway) of `serve`, started before the mounts are opened: it may create its dataset. */
async function startGateways(rc: ResolveContext, options: GatewayServeOptions, log: Logger): Promise<{ gateway: Gateway; capture: Capture | undefined }> {
  const { startGateway, checkGatewayArguments, loadCaptureConfig, startCapture } = await import('./gateway/index.js');
  checkGatewayArguments(options);
  // The configuration is read (and refused) before the dataset is touched.
  const config = options.config === undefined ? undefined : loadCaptureConfig(options.config, rc.env);
  const gateway = await startGateway(rc, { dataset: options.dataset, state: options.state, split: options.split, idleMs: options.idleMs, log });
  return { gateway, capture: config ? startCapture(config, gateway, { streamMarkdown: options.streamMarkdown, debug: options.debug, log }) : undefined };
}

export async function startServer(rc: ResolveContext, options: ServeOptions): Promise<RunningServer> {
  // Checked before anything binds or opens: a bad address exits without having listened.
  const listenAt = parseListenAddress(options.listen, '--listen');
  const controlAt = options.control === undefined ? undefined : parseListenAddress(options.control, '--control');
  const gatewayAt = options.gateway?.listen === undefined ? undefined : parseListenAddress(options.gateway.listen, '--gateway');
  if (controlAt && !options.mounts.some((m) => m.name === DEFAULT_SERVE_MOUNT)) {
    throw new InvalidInputError(`--control needs a mount named ${DEFAULT_SERVE_MOUNT}`, { hint: `give one bare DATASET, or ${DEFAULT_SERVE_MOUNT}=DATASET among the mounts` });
  }
  if (options.gateway && options.mounts.some((m) => m.name === GATEWAY_MOUNT)) {
    throw new InvalidInputError(`the mount name ${GATEWAY_MOUNT} is the gateway's dataset (--gateway-dataset)`, { hint: 'choose another NAME in NAME=DATASET' });
  }
  const gateways = options.gateway ? await startGateways(rc, options.gateway, options.log) : undefined;
  const stopGateways = async (): Promise<void> => {
    await gateways?.capture?.close();
    await gateways?.gateway.close();
  };
  let mounts: Mounts;
  try {
    mounts = new Mounts(gateways ? [...options.mounts, { name: GATEWAY_MOUNT, dataset: gateways.gateway.mountArg }] : options.mounts, rc);
    // Every mount is opened once before listening: a missing dataset fails here, not on a first request.
    for (const name of mounts.names()) await mounts.use(name, () => undefined);
  } catch (error) {
    await stopGateways();
    throw error;
  }
  // A local mount sees a new snapshot by its manifest; an object-store one reads a local copy of one snapshot, so it is told.
  gateways?.gateway.projection.committed.subscribe(() => mounts.reload(GATEWAY_MOUNT));
  const ctx: ServeContext = { mounts, sql: new SqlThread(), log: options.log };
  const counters: ServeCounters = { startedAt: new Date(), requests: 0 };

  const app = newApp(ctx, counters);
  datasetRoutes(app, ctx);
  searchRoutes(app, ctx);
  statsRoutes(app, ctx);
  webRoutes(app, options.webRoot);
  if (options.extend) await app.register(async (scope) => options.extend?.(scope));
  if (gateways) {
    const { liveTraceRoutes } = await import('./gateway/index.js');
    liveTraceRoutes(app, gateways.gateway, GATEWAY_MOUNT);
  }
  const control = controlAt ? newApp(ctx, counters) : undefined;
  if (control) controlRoutes(control, ctx, counters);
  const gatewayApp = gateways && gatewayAt ? (await import('./gateway/index.js')).gatewayApp(gateways.gateway, options.log) : undefined;
  const capture = gateways?.capture;
  const apps = [app, control, gatewayApp, capture?.proxy, capture?.admin];
  // One process, one open-file limit: the listeners share it. A capture proxy's client also holds its upstream connection.
  const listeners: [FastifyInstance | undefined, string, number][] = [[app, '--listen', 1], [control, '--control', 1], [gatewayApp, '--gateway', 1], [capture?.proxy, 'the capture gateway', 2], [capture?.admin, "the capture gateway's admin", 1]];
  capConnections(
    listeners.flatMap(([a, name, descriptorsPerConnection]): CappedListener[] => (a ? [{ name: `serve ${name} listener`, server: a.server, descriptorsPerConnection }] : [])),
    (message) => options.log.warn(message),
  );
  const close = async (): Promise<void> => {
    // Listeners first (requests under way finish, capture calls included, within the grace), then what they write to.
    // The SQL thread at once: statements still waiting for their turn are refused rather than started.
    await Promise.all([...apps.map((a) => a && closeWithGrace(a)), ctx.sql.close()]);
    await stopGateways();
    mounts.close();
  };
  try {
    await listen(app, listenAt, '--listen');
    if (control && controlAt) await listen(control, controlAt, '--control');
    if (gatewayApp && gatewayAt) await listen(gatewayApp, gatewayAt, '--gateway');
    if (capture) {
      await listen(capture.proxy, parseListenAddress(capture.config.listen, 'listen'), `listen of ${capture.config.path}`);
      await listen(capture.admin, parseListenAddress(capture.config.adminListen, 'admin_listen'), `admin_listen of ${capture.config.path}`);
    }
  } catch (error) {
    await close();
    throw error;
  }
  return {
    url: urlOf(app),
    controlUrl: control ? urlOf(control) : undefined,
    ...(gatewayApp ? { gatewayUrl: urlOf(gatewayApp) } : {}),
    ...(capture ? { captureUrl: urlOf(capture.proxy), captureAdminUrl: urlOf(capture.admin) } : {}),
    close,
  };
}
