/**
 * Flag checks and the terminal confirmation shared by the trajstore commands. Kept free of
 * pipeline imports, because every command module loads it at start-up.
 */
import { createInterface } from 'node:readline/promises';
import { InvalidInputError } from '../kit/errors.js';
import type { CommandContext } from '../kit/program.js';

export function oneOf<T extends string>(value: unknown, allowed: readonly T[], flag: string): T {
  if (typeof value === 'string' && (allowed as readonly string[]).includes(value)) return value as T;
  if (Array.isArray(value)) throw new InvalidInputError(`${flag} given more than once`);
  throw new InvalidInputError(`invalid ${flag} ${JSON.stringify(String(value))}`, { hint: `use one of: ${allowed.join(', ')}` });
}

export function requiredString(value: unknown, flag: string): string {
  if (Array.isArray(value)) throw new InvalidInputError(`${flag} given more than once`);
  if (typeof value === 'number') return String(value);
  if (typeof value !== 'string' || value === '') throw new InvalidInputError(`${flag} is required`);
  return value;
}

/** Asks on the terminal; false when there is no terminal to ask on. */
export async function confirm(ctx: CommandContext, question: string): Promise<boolean> {
  const stdin = ctx.stdin as NodeJS.ReadStream;
  const stderr = ctx.stderr as NodeJS.WriteStream;
  if (!stdin.isTTY || !stderr.isTTY) return false;
  const rl = createInterface({ input: stdin, output: stderr });
  try {
    const answer = await rl.question(`${question} [y/N] `);
    return /^y(es)?$/i.test(answer.trim());
  } finally {
    rl.close();
  }
}
