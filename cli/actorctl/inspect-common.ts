/**
 * Options and error mapping shared by the `actorctl inspect` commands. The inspect module is
 * loaded on first use, so that loading the commands (for --help, or another command) stays cheap.
 */
import type { CommandContext, OptionSpec } from '../kit/program.js';
import { InvalidInputError, UnavailableError } from '../kit/errors.js';
import type { InspectOptions } from '../../framework/core/inspect.js';

export const SEEDS_OPTION: OptionSpec = { flags: '--seeds <addrs>', description: 'comma-separated node addresses (host:port; port 8000 when omitted)' };

export const COMMON_OPTIONS: OptionSpec[] = [
  { flags: '--timeout <seconds>', description: 'request timeout', default: '10.0' },
  { flags: '--best_effort <bool>', description: 'True: list failing nodes and show the rest', default: 'False' },
];

const TRUE = new Set(['true', '1', 'yes', 'y', 'on', 't']);
const FALSE = new Set(['false', '0', 'no', 'n', 'off', 'f']);

export function boolOption(options: Record<string, unknown>, key: string, fallback: boolean): boolean {
  const value = options[key];
  if (value === undefined) return fallback;
  if (typeof value === 'boolean') return value;
  const text = String(value).toLowerCase();
  if (TRUE.has(text)) return true;
  if (FALSE.has(text)) return false;
  throw new InvalidInputError(`--${key}: '${String(value)}' is not True or False`);
}

export function numberOption(options: Record<string, unknown>, key: string, fallback: number, { integer = false, min = 0 } = {}): number {
  const value = options[key];
  if (value === undefined) return fallback;
  const n = Number(value);
  if (String(value).trim() === '' || !Number.isFinite(n) || n < min || (integer && !Number.isInteger(n))) {
    throw new InvalidInputError(`--${key}: '${String(value)}' is not ${integer ? 'an integer' : 'a number'} >= ${min}`);
  }
  return n;
}

/** The options every inspect command shares, checked. */
export async function inspectOptions(ctx: CommandContext, options: Record<string, unknown>, seedsRequired = true): Promise<InspectOptions> {
  const { parseSeeds } = await import('../../framework/core/inspect.js');
  let seeds: string[] = [];
  try {
    if (seedsRequired || options.seeds !== undefined) seeds = parseSeeds(options.seeds === undefined ? undefined : String(options.seeds));
  } catch (error) {
    throw new InvalidInputError((error as Error).message);
  }
  return {
    seeds,
    timeoutMs: numberOption(options, 'timeout', 10, { min: 0.001 }) * 1000,
    bestEffort: boolOption(options, 'best_effort', false),
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
