/** `trajstore show`: one run as a readable transcript, paged on a terminal like `gh pr view`. */
import { InvalidInputError } from '../../lib/errors.js';
import { jsonText } from '../../lib/output.js';
import { showRun, type TranscriptKey } from '../../pipelines/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { defineCommand } from '../kit/program.js';
import { colorsOn, page } from '../kit/pager.js';
import { progressOn, resolveContext } from './common.js';
import { renderMarkdown, renderText } from './transcript-view.js';

const SHOW_FORMATS = ['text', 'markdown', 'json'] as const;
/** Lines of a tool's arguments or result shown before they are cut (`--full` shows all). */
const DEFAULT_MAX_LINES = 12;
/** The width tool output is clipped to when stdout is not a terminal. */
const PIPE_WIDTH = 120;

interface ShowFlags {
  dataset: string | undefined;
  key: TranscriptKey;
  format: (typeof SHOW_FORMATS)[number];
  full: boolean;
  maxLines: number;
  pager: boolean;
}

function keyOf(args: ParsedArgs): TranscriptKey {
  const documentId = args.text('--document-id');
  const runId = args.text('--run-id');
  if ((documentId === undefined) === (runId === undefined)) throw new InvalidInputError('show needs exactly one of --document-id ID or --run-id ID', { hint: 'e.g. trajstore show ./ds --document-id doc-1' });
  const [flag, value] = documentId !== undefined ? ['--document-id', documentId] : ['--run-id', runId as string];
  if (value === '') throw new InvalidInputError(`${flag} is empty`);
  return documentId !== undefined ? { documentId } : { runId: value };
}

function flags(args: ParsedArgs): ShowFlags {
  return {
    dataset: args.positional(0),
    key: keyOf(args),
    format: args.choice('--format', SHOW_FORMATS, 'text'),
    full: args.has('--full'),
    maxLines: args.positiveInt('--max-lines', DEFAULT_MAX_LINES),
    pager: args.has('--pager'),
  };
}

export const showCommand = defineCommand({
  name: 'show [dataset]',
  description: 'show one run as a transcript: roles, reasoning, tool calls and results, tokens, cost and timings',
  options: [
    { flags: '--document-id <id>', description: 'the run with this document id' },
    { flags: '--run-id <id>', description: 'the run with this run id (when several runs share it, choose with --document-id)' },
    { flags: '--format <format>', description: `${SHOW_FORMATS.join('|')}: text for a terminal, markdown to paste, json for programs`, default: 'text' },
    { flags: '--full', description: 'print tool arguments, results and observations whole (default: clipped to the terminal width and --max-lines)' },
    { flags: '--max-lines <n>', description: `lines of each tool argument or result shown (default ${DEFAULT_MAX_LINES})` },
    { flags: '--pager', description: 'page through $PAGER (default less) when stdout is a terminal (default)' },
    { flags: '--no-pager', description: 'print without a pager' },
  ],
  examples: ['trajstore show ./ds --document-id doc-1', 'trajstore show @work --run-id task-7 --format markdown > run.md', 'trajstore show ./ds --document-id doc-1 --format json | jq .steps[0]'],
  flags,
  async run(ctx, f) {
    const transcript = await showRun(resolveContext(ctx), { dataset: f.dataset, key: f.key, progress: progressOn(ctx) });
    if (f.format === 'json') {
      ctx.stdout.write(`${jsonText(transcript, 2)}\n`);
      return;
    }
    const style = { width: ctx.stdout.columns ?? PIPE_WIDTH, maxLines: f.maxLines, full: f.full, colors: f.format === 'text' && colorsOn(ctx) };
    await page(ctx, f.format === 'markdown' ? renderMarkdown(transcript, style) : renderText(transcript, style), f.pager);
  },
});
