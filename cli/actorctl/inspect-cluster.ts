/** `actorctl inspect cluster`: members of a cluster and their status. */
import { defineCommand } from '../kit/program.js';
import { COMMON_OPTIONS, SEEDS_OPTION, inspectOptions, runInspection } from './inspect-common.js';

export const inspectClusterCommand = defineCommand({
  name: 'inspect cluster',
  description: 'show the members of a cluster: totals, a status summary and the member list',
  options: [SEEDS_OPTION, ...COMMON_OPTIONS],
  examples: ['actorctl inspect cluster --seeds 127.0.0.1:8000'],
  flags: (args) => args,
  async run(ctx, args) {
    const { inspectCluster } = await import('../../framework/core/inspect.js');
    const common = await inspectOptions(ctx, args);
    return runInspection(ctx, () => inspectCluster(common));
  },
});
