/** `actorctl inspect metrics`: each Alive node's Prometheus metrics, raw or summarised. */
import { defineCommand } from '../kit/program.js';
import { COMMON_OPTIONS, SEEDS_OPTION, inspectOptions, runInspection } from './inspect-common.js';

export const inspectMetricsCommand = defineCommand({
  name: 'inspect metrics',
  description: "show each Alive node's metrics (--raw False: only the key series)",
  options: [SEEDS_OPTION, { flags: '--raw <bool>', description: 'True: full Prometheus text; False: key metrics only', default: 'True' }, ...COMMON_OPTIONS],
  examples: ['actorctl inspect metrics --seeds 127.0.0.1:8000 --raw False'],
  flags: (args) => args,
  async run(ctx, args) {
    const { inspectMetrics } = await import('../../framework/core/inspect.js');
    const common = await inspectOptions(ctx, args);
    return runInspection(ctx, () => inspectMetrics({ ...common, raw: args.bool('--raw', true) }));
  },
});
