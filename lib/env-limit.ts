/** A numeric limit a user sets through an environment variable, read one way everywhere. */
import { InvalidInputError } from './errors.js';

/**
 * The whole number (at least 1) in `env[name]`, else `fallback` when the variable is unset or empty.
 * Anything else (`10G`, `1.5`, `0`) is refused with exit 2 naming the variable and its value, rather
 * than taken for the default: a limit the user set and that silently does not apply is worse than none.
 */
export function limitFromEnv(env: NodeJS.ProcessEnv, name: string, fallback: number, unit: string): number {
  const text = env[name];
  if (text === undefined || text === '') return fallback;
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < 1) throw new InvalidInputError(`invalid ${name} ${JSON.stringify(text)}: expected a whole number of ${unit}, at least 1`);
  return n;
}
