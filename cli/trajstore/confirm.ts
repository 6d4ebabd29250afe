/** The terminal confirmation shared by the trajstore commands that replace or remove data. */
import type { CommandContext } from '../kit/program.js';

/** Whether both stdin and stderr are a terminal, so that a question can be asked and answered. */
export function canAsk(ctx: CommandContext): boolean {
  return (ctx.stdin as NodeJS.ReadStream).isTTY === true && ctx.stderr.isTTY;
}

/** Asks on the terminal; false when there is no terminal to ask on. */
export async function confirm(ctx: CommandContext, question: string): Promise<boolean> {
  if (!canAsk(ctx)) return false;
  // Loaded here: readline is only needed when there is something to ask.
  const { createInterface } = await import('node:readline/promises');
  const rl = createInterface({ input: ctx.stdin, output: ctx.stderr.stream });
  try {
    const answer = await rl.question(`${question} [y/N] `);
    return /^y(es)?$/i.test(answer.trim());
  } finally {
    rl.close();
  }
}
