/** `actorctl inspect watch`: polls the cluster and prints what changed each round. */
import type { CommandSpec } from '../kit/program.js';
import { InvalidInputError } from '../kit/errors.js';
import type { WatchKind } from '../../framework/core/inspect.js';
import { COMMON_OPTIONS, SEEDS_OPTION, inspectOptions, numberOption, runInspection } from './inspect-common.js';

const KINDS: WatchKind[] = ['cluster', 'actors', 'metrics', 'all'];

export const inspectWatchCommand: CommandSpec = {
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
  async run(ctx, { options }) {
    const { inspectWatch } = await import('../../framework/core/inspect.js');
    const kind = String(options.kind ?? 'all') as WatchKind;
    if (!KINDS.includes(kind)) throw new InvalidInputError(`--kind: '${kind}' is not one of ${KINDS.join(', ')}`);
    const intervalMs = numberOption(options, 'interval', 1, { min: 0.01 }) * 1000;
    const maxRounds = options.max_rounds === undefined ? undefined : numberOption(options, 'max_rounds', 0, { integer: true, min: 1 });
    const common = await inspectOptions(ctx, options);
    return runInspection(ctx, () => inspectWatch({ ...common, intervalMs, kind, ...(maxRounds === undefined ? {} : { maxRounds }), signal: ctx.signal }));
  },
};
