/**
 * Mounts, runs and steps: GET /api/mounts, /api/mounts/:mount, /api/mounts/:mount/runs,
 * /api/mounts/:mount/runs/:document_id and /api/mounts/:mount/runs/:document_id/steps; and the last
 * two with the document id in the query (/api/mounts/:mount/run?document_id=, /run/steps?...), for
 * ids no path carries: a URL resolves "." and ".." away, and a path segment has a length limit.
 */
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { healthOf } from '../../stats/index.js';
import { RUN_SORTS, type PageRequest } from '../run-catalog.js';
import { listRuns, runDetail, runSteps } from '../runs.js';
import type { ServeContext } from '../context.js';
import { StringEnum } from '../schemas.js';

const MountParams = Type.Object({ mount: Type.String() });
const RunParams = Type.Object({ mount: Type.String(), document_id: Type.String() });
const RunQuery = Type.Object({ document_id: Type.String() }, { additionalProperties: false });

/** At most this many runs or steps per page. */
const MAX_PAGE = 500;
/** At most this many bytes of runs or steps per page (runs.ts): a request may lower it, never raise it. */
const MAX_PAGE_BYTES = 8 * 1024 * 1024;
const MaxBytes = (what: string) =>
  Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_PAGE_BYTES, description: `the page ends early once its ${what} pass this many bytes of JSON` }));

const RunsQuery = Type.Object(
  {
    agent: Type.Optional(Type.String({ description: 'agent_name or agent_id' })),
    model: Type.Optional(Type.String({ description: 'agent_model_name' })),
    since: Type.Optional(Type.String({ description: 'started_at >= since (RFC 3339, compared as text)' })),
    until: Type.Optional(Type.String({ description: 'started_at < until' })),
    source: Type.Optional(Type.String({ description: 'source_path, or a directory of them' })),
    min_cost: Type.Optional(Type.Number({ minimum: 0 })),
    max_cost: Type.Optional(Type.Number({ minimum: 0 })),
    sort: Type.Optional(StringEnum(RUN_SORTS)),
    order: Type.Optional(StringEnum(['asc', 'desc'] as const)),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_PAGE })),
    max_bytes: MaxBytes('runs'),
    cursor: Type.Optional(Type.String()),
  },
  { additionalProperties: false },
);

const StepsQuery = Type.Object(
  {
    offset: Type.Optional(Type.Integer({ minimum: 0 })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_PAGE })),
    max_bytes: MaxBytes('steps'),
  },
  { additionalProperties: false },
);
const RunStepsQuery = Type.Composite([RunQuery, StepsQuery], { additionalProperties: false });

export function datasetRoutes(app: FastifyInstance, { mounts }: ServeContext): void {
  app.get('/api/mounts', async () => {
    const list = [];
    for (const name of mounts.names()) {
      list.push(
        await mounts.use(name, (ds) => ({
          name,
          dataset_uri: ds.uri,
          kind: ds.kind,
          snapshot_id: ds.snapshotId,
          snapshot_created_at: ds.snapshot.created_at,
          rows: ds.snapshot.rows,
        })),
      );
    }
    return { mounts: list };
  });

  app.get<{ Params: Static<typeof MountParams> }>('/api/mounts/:mount', { schema: { params: MountParams } }, (req) =>
    mounts.use(req.params.mount, (ds) => ({ name: req.params.mount, ...healthOf(ds, ds.indexState === 'rebuilt' ? 'stale' : 'present') })),
  );

  app.get<{ Params: Static<typeof MountParams>; Querystring: Static<typeof RunsQuery> }>('/api/mounts/:mount/runs', { schema: { params: MountParams, querystring: RunsQuery } }, (req) => {
    const q = req.query;
    const filters: PageRequest = {
      sort: q.sort ?? 'started_at',
      order: q.order ?? 'desc',
      limit: q.limit ?? 100,
      ...(q.agent !== undefined ? { agent: q.agent } : {}),
      ...(q.model !== undefined ? { model: q.model } : {}),
      ...(q.since !== undefined ? { since: q.since } : {}),
      ...(q.until !== undefined ? { until: q.until } : {}),
      ...(q.source !== undefined ? { source: q.source } : {}),
      ...(q.min_cost !== undefined ? { minCost: q.min_cost } : {}),
      ...(q.max_cost !== undefined ? { maxCost: q.max_cost } : {}),
      ...(q.cursor !== undefined ? { cursor: q.cursor } : {}),
    };
    return mounts.use(req.params.mount, (ds) => ({ snapshot_id: ds.snapshotId, ...listRuns(ds, filters, q.max_bytes ?? MAX_PAGE_BYTES) }));
  });

  const run = (mount: string, documentId: string) => mounts.use(mount, (ds) => ({ snapshot_id: ds.snapshotId, run: runDetail(ds, documentId) }));
  const steps = (mount: string, documentId: string, q: Static<typeof StepsQuery>) => {
    const offset = q.offset ?? 0;
    return mounts.use(mount, (ds) => ({ snapshot_id: ds.snapshotId, offset, ...runSteps(ds, documentId, offset, q.limit ?? 100, q.max_bytes ?? MAX_PAGE_BYTES) }));
  };
  app.get<{ Params: Static<typeof RunParams> }>('/api/mounts/:mount/runs/:document_id', { schema: { params: RunParams } }, (req) => run(req.params.mount, req.params.document_id));
  app.get<{ Params: Static<typeof RunParams>; Querystring: Static<typeof StepsQuery> }>('/api/mounts/:mount/runs/:document_id/steps', { schema: { params: RunParams, querystring: StepsQuery } }, (req) =>
    steps(req.params.mount, req.params.document_id, req.query),
  );
  app.get<{ Params: Static<typeof MountParams>; Querystring: Static<typeof RunQuery> }>('/api/mounts/:mount/run', { schema: { params: MountParams, querystring: RunQuery } }, (req) => run(req.params.mount, req.query.document_id));
  app.get<{ Params: Static<typeof MountParams>; Querystring: Static<typeof RunStepsQuery> }>('/api/mounts/:mount/run/steps', { schema: { params: MountParams, querystring: RunStepsQuery } }, (req) =>
    steps(req.params.mount, req.query.document_id, req.query),
  );
}
