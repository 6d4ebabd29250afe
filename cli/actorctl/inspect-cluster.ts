/** `actorctl inspect cluster`: members of a cluster and their status. */
import type { CommandSpec } from '../kit/program.js';
import { inspectCluster } from '../../framework/core/inspect.js';
import { COMMON_OPTIONS, SEEDS_OPTION, inspectOptions, runInspection } from './inspect-common.js';

export const inspectClusterCommand: CommandSpec = {
  name: 'inspect cluster',
  description: 'show the members of a cluster: totals, a status summary and the member list',
  options: [SEEDS_OPTION, ...COMMON_OPTIONS],
  examples: ['actorctl inspect cluster --seeds 127.0.0.1:8000'],
  run: (ctx, { options }) => runInspection(ctx, () => inspectCluster(inspectOptions(ctx, options))),
};
