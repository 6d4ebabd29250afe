/**
 * The terminal confirmation shared by the trajstore commands that replace or remove data. Kept
 * free of pipeline imports, because command modules load it at start-up.
 */
import { createInterface } from 'node:readline/promises';
import type { CommandContext } from '../kit/program.js';

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
