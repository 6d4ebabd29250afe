/** `actorctl inspect actors`: named actors across the cluster, or on one node. */
import type { CommandSpec } from '../kit/program.js';
import { InvalidInputError } from '../kit/errors.js';
import { COMMON_OPTIONS, SEEDS_OPTION, boolOption, inspectOptions, numberOption, runInspection } from './inspect-common.js';

export const inspectActorsCommand: CommandSpec = {
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
  async run(ctx, { options }) {
    const { inspectActors, normalizeAddr } = await import('../../framework/core/inspect.js');
    const endpoint = options.endpoint === undefined ? undefined : String(options.endpoint);
    if (endpoint !== undefined && options.seeds !== undefined) throw new InvalidInputError('--endpoint and --seeds exclude each other', { hint: 'give one node with --endpoint, or the cluster with --seeds' });
    if (endpoint === undefined && options.seeds === undefined) throw new InvalidInputError('inspect actors needs --seeds or --endpoint');
    const common = await inspectOptions(ctx, options, endpoint === undefined);
    const top = options.top === undefined ? undefined : numberOption(options, 'top', 0, { integer: true, min: 1 });
    return runInspection(ctx, () =>
      inspectActors({
        ...common,
        ...(endpoint === undefined ? {} : { endpoint: normalizeAddr(endpoint) }),
        ...(top === undefined ? {} : { top }),
        ...(options.filter === undefined ? {} : { filter: String(options.filter) }),
        all: boolOption(options, 'all_actors', false),
      }),
    );
  },
};
