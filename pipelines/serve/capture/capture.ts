/**
 * The capture gateway as `serve` runs it: the proxy's app (proxy.ts), its admin app
 * (`GET /admin/status`, `GET /admin/sessions`) and its state (state.ts), over the gateway that
 * stores its events. server.ts binds the two apps to `listen` and `admin_listen`.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import { REQUEST_TIMEOUT_MS } from '../../../lib/http-limits.js';
import { protocolErrorOptions, refuseBadHostHeader, type ErrorShape } from '../../../lib/protocol-errors.js';
import type { Logger } from '../../../lib/log.js';
import type { Gateway } from '../gateway/gateway.js';
import type { CaptureConfig } from './config.js';
import { CaptureProxy } from './proxy.js';
import { CaptureState } from './state.js';
import { refuseOtherHosts } from '../../../lib/loopback-host.js';
import { ANSWER_HEADERS } from '../answer-headers.js';

export interface CaptureOptions {
  /** `--gateway-stream-markdown`. */
  streamMarkdown: boolean;
  /** `--gateway-debug` (or `debug = true` in the file). */
  debug: boolean;
  log: Logger;
}

export interface Capture {
  config: CaptureConfig;
  proxy: FastifyInstance;
  admin: FastifyInstance;
  /** After the apps are closed: cuts and records the calls still under way, records what the ended calls left, saves the session index. */
  close(): Promise<void>;
}

export function startCapture(config: CaptureConfig, gateway: Gateway, options: CaptureOptions): Capture {
  const state = new CaptureState(gateway.dir, { debug: options.debug || config.debug, markdown: options.streamMarkdown, log: options.log });
  const proxy = new CaptureProxy(config, gateway, state, options.log);
  const startedAt = new Date();
  // Errors as the event gateway's, before any route too, with the API's headers.
  const shape: ErrorShape = (_status, error, message) => ({ error, message });
  const admin = Fastify({ ...protocolErrorOptions(shape, () => ANSWER_HEADERS), logger: false, requestTimeout: REQUEST_TIMEOUT_MS, return503OnClosing: true });
  refuseBadHostHeader(admin, shape, () => ANSWER_HEADERS);
  admin.addHook('onRequest', async (_req, reply) => void reply.headers(ANSWER_HEADERS));
  refuseOtherHosts(admin, (reply, message) => reply.send({ error: 'forbidden', message }));
  admin.setNotFoundHandler((req, reply) => reply.code(404).send({ error: 'not_found', message: `no route ${req.method} ${req.url.split('?')[0]}` }));
  admin.get('/admin/status', async () => ({
    status: 'ok',
    started_at: startedAt.toISOString(),
    uptime_s: Math.round((Date.now() - startedAt.getTime()) / 1000),
    config: config.path,
    dataset: gateway.datasetUri,
    state: gateway.dir,
    agent_id: config.agentId,
    session_header: config.sessionHeader,
    capture_level: config.captureLevel,
    upstream_timeout_s: config.upstreamTimeoutMs / 1000,
    stream_markdown: options.streamMarkdown,
    debug: options.debug || config.debug,
    routes: config.routes.map((r) => ({
      name: r.name,
      provider: r.provider,
      upstream: r.upstream?.href ?? null,
      upstream_anthropic: r.upstreamAnthropic?.href ?? null,
      forward: r.forward ?? null,
      credential: r.credentialSource ?? null,
    })),
    calls: { total: proxy.counters.calls, in_flight: proxy.counters.inFlight, upstream_errors: proxy.counters.upstreamErrors, capture_failures: proxy.counters.captureFailures },
    projection: gateway.projection.status,
  }));
  admin.get('/admin/sessions', async () => ({ sessions: state.list() }));
  return {
    config,
    proxy: proxy.app(),
    admin,
    async close() {
      await proxy.close();
      state.close();
    },
  };
}
