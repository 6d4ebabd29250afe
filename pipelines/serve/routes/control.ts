/**
 * The control listener (`--control ADDR`), apart from the API so that it can be firewalled apart:
 * GET /control/status (the mounts with the snapshot each serves, uptime, requests served) and
 * POST /control/reload (forget every open snapshot; the next request opens each dataset again,
 * which also picks up an index rebuilt elsewhere). It never changes what is mounted.
 */
import type { FastifyInstance } from 'fastify';
import type { ServeContext } from '../context.js';

export interface ServeCounters {
  startedAt: Date;
  requests: number;
}

export function controlRoutes(app: FastifyInstance, { mounts }: ServeContext, counters: ServeCounters): void {
  const status = async () => {
    const list = [];
    for (const name of mounts.names()) list.push(await mounts.use(name, (ds) => ({ name, dataset_uri: ds.uri, snapshot_id: ds.snapshotId })));
    return { started_at: counters.startedAt.toISOString(), uptime_s: Math.round((Date.now() - counters.startedAt.getTime()) / 1000), requests: counters.requests, mounts: list };
  };
  app.get('/control/status', status);
  app.post('/control/reload', async () => {
    mounts.reload();
    return { reloaded: true, ...(await status()) };
  });
}
