/** `actorctl inspect actors`: named actors across the cluster, or on one node. */
import { defineCommand } from '../kit/program.js';
import { InvalidInputError } from '../../lib/errors.js';
import { COMMON_OPTIONS, SEEDS_OPTION, inspectOptions, runInspection } from './inspect-common.js';

export const inspectActorsCommand = defineCommand({
  name: 'inspect actors',
  description: 'show named actors and their instances across the cluster (--seeds) or on one node (--endpoint)',
  options: [
    SEEDS_OPTION,
    { flags: '--endpoint <addr>', description: 'one node to list the actors of, instead of --seeds' },
    { flags: '--top <n>', description: 'show the N actors with the most instances' },
    { flags: '--filter <str>', description: 'keep actor names containing this (case-insensitive)' },
    { flags: '--all_actors <bool>', description: 'True: include system and unnamed actors', default: 'False' },
    ...COMMON_OPTIONS,
  ],
  examples: ['actorctl inspect actors --seeds 127.0.0.1:8000 --top 10', 'actorctl inspect actors --endpoint 127.0.0.1:8000 --all_actors True'],
  flags: (args) => args,
  async run(ctx, args) {
    const { inspectActors, normalizeAddr } = await import('../../framework/core/inspect.js');
    const endpoint = args.text('--endpoint');
    if (endpoint !== undefined && args.given('--seeds')) throw new InvalidInputError('--endpoint and --seeds exclude each other', { hint: 'give one node with --endpoint, or the cluster with --seeds' });
    if (endpoint === undefined && !args.given('--seeds')) throw new InvalidInputError('inspect actors needs --seeds or --endpoint');
    const common = await inspectOptions(ctx, args, endpoint === undefined);
    const top = args.number('--top', undefined, { integer: true, min: 1 });
    const filter = args.text('--filter');
    return runInspection(ctx, () =>
      inspectActors({
        ...common,
        ...(endpoint === undefined ? {} : { endpoint: normalizeAddr(endpoint) }),
        ...(top === undefined ? {} : { top }),
        ...(filter === undefined ? {} : { filter }),
        all: args.bool('--all_actors', false),
      }),
    );
  },
});
