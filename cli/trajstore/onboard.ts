/**
 * `trajstore onboard`: an interactive walkthrough. Each step says what it shows, prints the
 * command, runs it (the real trajstore, as the user would type it) and waits for Enter, unless
 * --no-pause or stdin has ended. `q` then Enter stops. The prompt is for a person at a terminal:
 * lines piped in are read without one, and stdin that has ended gets none. child_process and readline are loaded when
 * the walkthrough runs: at start-up every command would pay for them.
 */
import { shellQuote } from '../../lib/shell.js';
import { existsSync } from 'node:fs';
import { ExitCode, InvalidInputError, ToolError } from '../../lib/errors.js';
import { ONBOARD_SECTIONS, prepareOnboarding, type OnboardSection } from '../../pipelines/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { colorsOn } from '../kit/pager.js';
import { defineCommand, type CommandContext } from '../kit/program.js';
import { closest } from '../kit/suggest.js';
import { progressOn, resolveContext } from './common.js';

interface OnboardFlags {
  sections: OnboardSection[];
  dataset: string | undefined;
  pause: boolean;
}

function isSection(word: string | undefined): word is OnboardSection {
  return (ONBOARD_SECTIONS as readonly string[]).includes(word ?? '');
}

function flags(args: ParsedArgs): OnboardFlags {
  const first = args.positional(0);
  const second = args.positional(1);
  const pause = args.has('--pause');
  if (isSection(first)) return { sections: [first], dataset: second, pause };
  if (first !== undefined) {
    const guess = closest(first, [...ONBOARD_SECTIONS]);
    // `onboard fnd` is a misspelt section, not a dataset named fnd; `onboard ./ds` is a dataset.
    if (second !== undefined || (guess !== undefined && !existsSync(first) && !first.startsWith('@'))) {
      throw new InvalidInputError(`unknown section ${JSON.stringify(first)}`, { hint: guess ? `did you mean \`onboard ${guess}\`?` : `sections: ${ONBOARD_SECTIONS.join(', ')}` });
    }
  }
  return { sections: [...ONBOARD_SECTIONS], dataset: first, pause };
}

/** Runs `trajstore ARGS` as a child with the same configuration, its output on ours; resolves to its exit status. */
async function runTrajstore(ctx: CommandContext, args: string[]): Promise<number> {
  const { spawn } = await import('node:child_process');
  const config = ctx.config.source === 'flag' ? ['-c', ctx.config.path] : [];
  const child = spawn(process.execPath, [process.argv[1] as string, ...config, ...args], { stdio: ['ignore', 'inherit', 'inherit'], env: ctx.env });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => resolve(code ?? ExitCode.Interrupted));
  });
}

/**
 * A pause: waits for a line on stdin, with `prompt` on stderr when stdin is a terminal; resolves to
 * whether the line asks to stop (`q`). Once stdin has ended it returns at once, prompting no more.
 */
async function pauser(ctx: CommandContext, prompt: string): Promise<() => Promise<boolean>> {
  const { createInterface } = await import('node:readline');
  const lines = createInterface({ input: ctx.stdin, terminal: false })[Symbol.asyncIterator]();
  const prompting = (ctx.stdin as NodeJS.ReadStream).isTTY === true;
  let ended = false;
  return async () => {
    if (ended) return false;
    if (prompting) ctx.stderr.write(prompt);
    const next = await lines.next();
    if (prompting) ctx.stderr.write('\n');
    ended = next.done === true;
    return !ended && (next.value as string).trim().toLowerCase() === 'q';
  };
}

export const onboardCommand = defineCommand({
  name: 'onboard [section] [dataset]',
  description: `a walkthrough of trajstore on your dataset or on example data (sections: ${ONBOARD_SECTIONS.join(', ')}; all when omitted)`,
  options: [
    { flags: '--pause', description: 'wait for Enter after each step (default)' },
    { flags: '--no-pause', description: 'run straight through' },
  ],
  examples: ['trajstore onboard', 'trajstore onboard query', 'trajstore onboard find ./my-dataset', 'trajstore onboard ./my-dataset --no-pause'],
  flags,
  async run(ctx, f) {
    const onboarding = await prepareOnboarding(resolveContext(ctx), { sections: f.sections, dataset: f.dataset }, { stdin: ctx.stdin, log: ctx.log, signal: ctx.signal, progress: progressOn(ctx) });
    const color = colorsOn(ctx);
    const bold = (text: string): string => (color ? `\x1b[1m${text}\x1b[0m` : text);
    const dim = (text: string): string => (color ? `\x1b[2m${text}\x1b[0m` : text);
    const pause = f.pause ? await pauser(ctx, dim('-- Enter: next step, q: stop --')) : undefined;
    try {
      ctx.stdout.write(onboarding.example ? `The walkthrough uses temporary example data (three small runs), removed at the end.\n` : `The walkthrough uses the dataset ${onboarding.dataset}; it only reads it.\n`);
      for (const lesson of onboarding.lessons) {
        ctx.stdout.write(`\n${bold(`== ${lesson.title} ==`)}\n`);
        for (const step of lesson.steps) {
          ctx.stdout.write(`\n${step.text}\n\n${dim(`$ trajstore ${step.args.map(shellQuote).join(' ')}`)}\n`);
          const status = await runTrajstore(ctx, step.args);
          if (ctx.signal.aborted) throw ctx.signal.reason;
          if (status !== 0) throw new ToolError(ExitCode.Internal, `the walkthrough's step \`trajstore ${step.args.map(shellQuote).join(' ')}\` exited with status ${status}`);
          if (await pause?.()) return;
        }
      }
      ctx.stdout.write(`\n${bold('Done.')} Run \`trajstore <command> --help\` for every option, \`trajstore show\` to read a run, \`trajstore agent\` to let a coding agent answer questions about a dataset.\n`);
    } finally {
      onboarding.cleanup();
    }
  },
});
