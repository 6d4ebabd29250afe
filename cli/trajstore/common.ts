/**
 * What the trajstore commands share: the engine's view of the command (where pins are resolved,
 * how progress is shown), the DATASET positional, and the options of the read commands.
 */
import { Progress, type ProgressFactory } from '../../lib/progress.js';
import type { ResolveContext } from '../../pipelines/index.js';
import type { CommandContext } from '../kit/program.js';

/** Where the engine resolves DATASET arguments: the command's configuration file and environment. */
export function resolveContext(ctx: CommandContext): ResolveContext {
  return { config: ctx.config, env: ctx.env };
}

/** Progress of the engine's long work, drawn on stderr when it is a terminal. */
export function progressOn(ctx: CommandContext): ProgressFactory {
  return (task) => new Progress({ ...task, stream: ctx.stderr });
}

export const DATASET_HELP = 'DATASET: a path, a pin (@name), or omitted for the default dataset';
