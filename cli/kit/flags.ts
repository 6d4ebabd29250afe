/**
 * Reading option values as a command receives them from the kit: a value, an array when the
 * option was repeated, undefined when absent (numbers only where they print back as typed).
 */
import { InvalidInputError } from './errors.js';

/** Every value of a repeatable option, as text. */
export function repeated(value: unknown): string[] {
  if (value === undefined || value === null || value === false) return [];
  return (Array.isArray(value) ? value : [value]).map((v) => String(v));
}

/** The one value of an option that must not repeat, as text; undefined when absent. */
export function single(value: unknown, flag: string): string | undefined {
  const values = repeated(value);
  if (values.length > 1) throw new InvalidInputError(`${flag} was given ${values.length} times; give it once`);
  return values[0];
}

export function requiredString(value: unknown, flag: string): string {
  const text = single(value, flag);
  if (text === undefined || text === '') throw new InvalidInputError(`${flag} is required`);
  return text;
}

export function oneOf<T extends string>(value: unknown, allowed: readonly T[], flag: string): T {
  const text = single(value, flag);
  if (text !== undefined && (allowed as readonly string[]).includes(text)) return text as T;
  throw new InvalidInputError(`invalid ${flag} ${JSON.stringify(String(text))}`, { hint: `use one of: ${allowed.join(', ')}` });
}
