/**
 * What the trajstore commands share: the engine's view of the command (where pins are resolved,
 * how progress is shown), the DATASET positional, and the options of the read commands.
 */
import { Progress, type ProgressFactory } from '../../lib/progress.js';
import { WRITE_DEFAULTS, type ResolveContext } from '../../pipelines/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import type { CommandContext, OptionSpec } from '../kit/program.js';

/** Where the engine resolves DATASET arguments: the command's configuration file and environment. */
export function resolveContext(ctx: CommandContext): ResolveContext {
  return { config: ctx.config, env: ctx.env, signal: ctx.signal };
}

/** Progress of the engine's long work, drawn on stderr when it is a terminal. */
export function progressOn(ctx: CommandContext): ProgressFactory {
  return (task) => new Progress({ ...task, stream: ctx.stderr });
}

export const DATASET_HELP = 'DATASET: a path, a pin (@name), or omitted for the default dataset';

/** `--lock-timeout` of the commands that write a dataset (import, drop). */
export const LOCK_TIMEOUT_OPTION: OptionSpec = {
  flags: '--lock-timeout <duration>',
  description: `wait this long for another command writing the same dataset to finish, then exit 4 (0: do not wait; default ${WRITE_DEFAULTS.lockTimeoutMs / 60_000}m)`,
};

export function lockTimeoutOf(args: ParsedArgs): number {
  return args.duration('--lock-timeout', WRITE_DEFAULTS.lockTimeoutMs, { min: 0 });
}
