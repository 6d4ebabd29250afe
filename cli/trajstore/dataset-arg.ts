/**
 * Dataset and source arguments of import/export as local paths, through the pins module:
 * omitted -> the default dataset; `@name[/sub]` -> a pin; anything else -> a local path.
 * Object-store locations are a later issue and are refused here with exit 6.
 * The pins module is loaded on first use, so the commands that import this stay cheap to load.
 */
import { UnavailableError } from '../kit/errors.js';
import type { CommandContext } from '../kit/program.js';

export async function resolveLocalDataset(arg: string | undefined, ctx: CommandContext, purpose: 'read' | 'write', env: NodeJS.ProcessEnv = process.env): Promise<string> {
  const { resolveDataset } = await import('../../pipelines/pins/resolve.js');
  const location = await resolveDataset(arg, { config: ctx.config, env, purpose });
  if (location.kind !== 'local') throw new UnavailableError(`${location.display}: object-store datasets are not supported by import/export in this build`);
  return location.path;
}

/** An import source: `-` (stdin) as is, a pin (`@agentb-code`) resolved, a path as given. */
export async function resolveSource(arg: string, ctx: CommandContext): Promise<string> {
  if (arg === '-' || !arg.startsWith('@')) return arg;
  return resolveLocalDataset(arg, ctx, 'read');
}
