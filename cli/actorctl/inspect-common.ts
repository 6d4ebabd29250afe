/**
 * Options and error mapping shared by the `actorctl inspect` commands. The inspect module is
 * loaded on first use, so that loading the commands (for --help, or another command) stays cheap.
 */
import type { ParsedArgs } from '../kit/flags.js';
import type { CommandContext, OptionSpec } from '../kit/program.js';
import { InvalidInputError, UnavailableError } from '../../lib/errors.js';
import type { InspectOptions } from '../../framework/core/inspect.js';

export const SEEDS_OPTION: OptionSpec = { flags: '--seeds <addrs>', description: 'comma-separated node addresses (host:port; port 8000 when omitted)' };

export const COMMON_OPTIONS: OptionSpec[] = [
  { flags: '--timeout <seconds>', description: 'request timeout', default: '10.0' },
  { flags: '--best_effort <bool>', description: 'True: list failing nodes and show the rest', default: 'False' },
];

/** The options every inspect command shares, checked. */
export async function inspectOptions(ctx: CommandContext, args: ParsedArgs, seedsRequired = true): Promise<InspectOptions> {
  const { parseSeeds } = await import('../../framework/core/inspect.js');
  let seeds: string[] = [];
  try {
    if (seedsRequired || args.given('--seeds')) seeds = parseSeeds(args.text('--seeds'));
  } catch (error) {
    throw new InvalidInputError((error as Error).message);
  }
  return {
    seeds,
    timeoutMs: args.number('--timeout', 10, { min: 0.001 }) * 1000,
    bestEffort: args.bool('--best_effort', false),
    write: (line) => void ctx.stdout.write(`${line}\n`),
  };
}

/** Runs an inspection, mapping its failures to exit codes (no seed reachable: 6). */
export async function runInspection(ctx: CommandContext, fn: () => Promise<void>): Promise<void> {
  const { InspectInvalid, InspectUnavailable } = await import('../../framework/core/inspect.js');
  try {
    await fn();
  } catch (error) {
    if (error instanceof InspectUnavailable) throw new UnavailableError(error.message, { hint: 'check --seeds and that the nodes run' });
    if (error instanceof InspectInvalid) throw new InvalidInputError(error.message);
    throw error;
  }
}
