/**
 * Long text for a person, as `gh pr view` and `git log` show it: through `$PAGER` (default
 * `less`, with `LESS=FRX` unless set: quit when it fits one screen, keep colours, leave the text
 * on the screen) when stdout is a terminal; written as it is otherwise. A pager that cannot be
 * started, or `PAGER=cat`/empty, writes the text directly.
 */
import type { CommandContext } from './program.js';

/** Whether text for stdout may carry colours: a terminal, and NO_COLOR unset (no-color.org). */
export function colorsOn(ctx: CommandContext): boolean {
  return ctx.stdout.isTTY && !ctx.env.NO_COLOR;
}

function pagerCommand(ctx: CommandContext): string | undefined {
  const chosen = ctx.env.TRAJSTORE_PAGER ?? ctx.env.PAGER ?? 'less';
  return chosen.trim() === '' || chosen.trim() === 'cat' ? undefined : chosen;
}

/** Writes `text` to stdout, through the pager when stdout is a terminal and `page` is true. */
export async function page(ctx: CommandContext, text: string, pageIt = true): Promise<void> {
  const command = pageIt && ctx.stdout.isTTY ? pagerCommand(ctx) : undefined;
  if (command === undefined) {
    ctx.stdout.write(text);
    return;
  }
  const env = { ...ctx.env, LESS: ctx.env.LESS ?? 'FRX', LV: ctx.env.LV ?? '-c' };
  // The pager command is the user's own shell text (`less -S`, `delta`), as git runs it.
  // child_process is loaded here, not at start-up: every other command would pay for it.
  const { spawn } = await import('node:child_process');
  const child = spawn('/bin/sh', ['-c', command], { stdio: ['pipe', 'inherit', 'inherit'], env });
  const started = await new Promise<boolean>((resolve) => {
    child.once('spawn', () => resolve(true));
    child.once('error', () => resolve(false));
  });
  if (!started) {
    ctx.stdout.write(text);
    return;
  }
  // A pager that quits early (q in less) closes its input: the rest is not an error.
  child.stdin.on('error', () => undefined);
  child.stdin.end(text);
  const code = await new Promise<number | null>((resolve) => child.once('close', (status) => resolve(status)));
  // `sh -c` exits 127 when the pager is not installed: show the text rather than nothing.
  if (code === 127) ctx.stdout.write(text);
}
