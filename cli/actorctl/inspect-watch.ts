/** `actorctl inspect watch`: polls the cluster and prints what changed each round. */
import { defineCommand } from '../kit/program.js';
import type { WatchKind } from '../../framework/core/inspect.js';
import { COMMON_OPTIONS, SEEDS_OPTION, inspectOptions, runInspection } from './inspect-common.js';

const KINDS: WatchKind[] = ['cluster', 'actors', 'metrics', 'all'];

export const inspectWatchCommand = defineCommand({
  name: 'inspect watch',
  description: 'poll the cluster and print changes of members, actors and key metrics',
  options: [
    SEEDS_OPTION,
    { flags: '--interval <seconds>', description: 'refresh interval', default: '1.0' },
    { flags: '--kind <kind>', description: `what to watch: ${KINDS.join('|')}`, default: 'all' },
    { flags: '--max_rounds <n>', description: 'stop after N rounds (default: until Ctrl+C)' },
    ...COMMON_OPTIONS,
  ],
  examples: ['actorctl inspect watch --seeds 127.0.0.1:8000 --kind cluster --interval 2'],
  flags: (args) => args,
  async run(ctx, args) {
    const { inspectWatch } = await import('../../framework/core/inspect.js');
    const kind = args.choice('--kind', KINDS, 'all');
    const intervalMs = args.number('--interval', 1, { min: 0.01 }) * 1000;
    const maxRounds = args.number('--max_rounds', undefined, { integer: true, min: 1 });
    const common = await inspectOptions(ctx, args);
    return runInspection(ctx, () => inspectWatch({ ...common, intervalMs, kind, ...(maxRounds === undefined ? {} : { maxRounds }), signal: ctx.signal }));
  },
});
