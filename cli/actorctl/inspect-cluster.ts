/** `actorctl inspect cluster`: the members of a cluster and their status. */
import type { Column } from '../../lib/output.js';
import { inspectCluster } from '../../framework/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { defineCommand } from '../kit/program.js';
import { FORMAT_OPTIONS, printRows, rowView, type RowView } from '../kit/render.js';
import { INSPECT_OPTIONS, SEEDS_OPTION, inspectFlags, inspectOptions, type InspectFlags } from './common.js';

interface ClusterFlags {
  inspect: InspectFlags;
  view: RowView;
}

function flags(args: ParsedArgs): ClusterFlags {
  return { inspect: inspectFlags(args), view: rowView(args) };
}

/** Every format has every column; a table lists each member's named actors as text. */
const COLUMNS: Column[] = [{ key: 'node_id' }, { key: 'addr' }, { key: 'status' }, { key: 'actors' }];

export const inspectClusterCommand = defineCommand({
  name: 'inspect cluster',
  description: 'show the members of a cluster with their status (Alive first), and the totals by status',
  options: [SEEDS_OPTION, ...INSPECT_OPTIONS, ...FORMAT_OPTIONS],
  examples: ['actorctl inspect cluster --seeds 127.0.0.1:8000', 'actorctl inspect cluster --seeds 127.0.0.1:8000 --format json'],
  flags,
  async run(ctx, f) {
    const { view } = f;
    const inspect = inspectOptions(ctx, f.inspect);
    ctx.log.info(`connecting to the cluster via seeds ${inspect.seeds.join(', ')}`);
    const { seed, members } = await inspectCluster(inspect);
    const table = view.format === 'table';
    printRows(ctx, view, COLUMNS, members.map((m) => ({ ...m, ...(table ? { actors: m.actors.join(', ') } : {}) })));
    if (!table) return;
    const counts = new Map<string, number>();
    for (const m of members) counts.set(m.status, (counts.get(m.status) ?? 0) + 1);
    const byStatus = [...counts].sort(([a], [b]) => a.localeCompare(b)).map(([status, n]) => `${status} ${n}`);
    ctx.stdout.write(`(${members.length} members, ${counts.get('Alive') ?? 0} alive; ${byStatus.join(', ')}; as ${seed} sees them)\n`);
  },
});
