/**
 * The stats reports of a mount: GET /api/mounts/:mount/stats/:report, where report is one of
 * `trajstore stats`'s (overview, agents, models, tools) or `timeline` (usage per model and day,
 * which the web interface charts). A report reads the whole dataset, so each is kept per snapshot:
 * it is computed once per new snapshot, not once per request.
 */
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { REPORTS } from '../../stats/reports.js';
import { reportOf, usageTimeline, type Report } from '../../stats/index.js';
import type { ServeContext } from '../context.js';
import { StringEnum } from '../schemas.js';

const SERVED_REPORTS = [...REPORTS, 'timeline'] as const;
const StatsParams = Type.Object({ mount: Type.String(), report: StringEnum(SERVED_REPORTS) });

export function statsRoutes(app: FastifyInstance, { mounts }: ServeContext): void {
  const cache = new Map<string, Report>();
  app.get<{ Params: Static<typeof StatsParams> }>('/api/mounts/:mount/stats/:report', { schema: { params: StatsParams } }, (req) => {
    const { mount, report } = req.params;
    return mounts.use(mount, (ds) => {
      const key = `${mount}\0${ds.snapshotId}\0${report}`;
      let result = cache.get(key);
      if (!result) {
        result = report === 'timeline' ? usageTimeline(ds) : reportOf(ds, report);
        // Only the current snapshots' reports are worth keeping.
        for (const k of cache.keys()) if (k.startsWith(`${mount}\0`) && !k.startsWith(`${mount}\0${ds.snapshotId}\0`)) cache.delete(k);
        cache.set(key, result);
      }
      return { snapshot_id: ds.snapshotId, report, ...result };
    });
  });
}
