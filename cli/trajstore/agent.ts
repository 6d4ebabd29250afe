/** `trajstore agent`: a local coding agent (Codex CLI, Claude Code) set up to answer questions about a dataset. */
import { shellQuote } from '../../lib/shell.js';
import { ExitCode, InvalidInputError, ToolError } from '../../lib/errors.js';
import { AGENTS, planAgent, runAgent, type AgentName } from '../../pipelines/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { writeText } from '../kit/render.js';
import { defineCommand, type CommandContext } from '../kit/program.js';
import { readTextInput } from '../kit/text-input.js';
import { resolveContext } from './common.js';

/** A question longer than this is not a question. */
const MAX_QUESTION_BYTES = 1024 * 1024;

type QuestionSource = { text: string } | { file: string } | undefined;

interface AgentFlags {
  agent: AgentName;
  dataset: string | undefined;
  question: QuestionSource;
  overview: boolean;
  dryRun: boolean;
}

function flags(args: ParsedArgs): AgentFlags {
  const name = args.requiredPositional(0, 'the agent (agenta or agentb)');
  if (!(AGENTS as readonly string[]).includes(name)) throw new InvalidInputError(`unknown agent ${JSON.stringify(name)}`, { hint: 'agenta starts Codex CLI, agentb starts Claude Code' });
  const ask = args.text('--ask');
  const askFile = args.text('--ask-file');
  if (ask !== undefined && askFile !== undefined) throw new InvalidInputError('give --ask or --ask-file, not both');
  if (ask !== undefined && ask.trim() === '') throw new InvalidInputError('--ask is empty');
  if (askFile === '') throw new InvalidInputError('--ask-file is empty', { hint: '--ask-file - reads the question from stdin' });
  return {
    agent: name as AgentName,
    dataset: args.positional(1),
    question: ask !== undefined ? { text: ask } : askFile !== undefined ? { file: askFile } : undefined,
    overview: args.has('--overview'),
    dryRun: args.has('--dry-run'),
  };
}

async function readQuestion(ctx: CommandContext, source: QuestionSource): Promise<string | undefined> {
  if (source === undefined) return undefined;
  if ('text' in source) return source.text;
  const text = await readTextInput({ flag: '--ask-file', file: source.file, stdin: ctx.stdin, maxBytes: MAX_QUESTION_BYTES, what: 'question' });
  if (text.trim() === '') throw new InvalidInputError(`--ask-file ${source.file}: the question is empty`);
  return text;
}

/** How the agent runs this very trajstore: the same Node.js and the same script. */
function thisTrajstore(): string {
  return [process.execPath, process.argv[1] ?? 'trajstore'].map(shellQuote).join(' ');
}

export const agentCommand = defineCommand({
  name: 'agent <agent> [dataset]',
  description: 'start a coding agent (agenta: Codex CLI, agentb: Claude Code) primed to answer questions about a dataset with trajstore',
  options: [
    { flags: '--ask <question>', description: 'ask this and let the agent answer on its own (non-interactive)' },
    { flags: '--ask-file <file>', description: 'read the question from FILE (`-`: stdin)' },
    { flags: '--overview', description: 'put the dataset\'s stats reports into the prompt (default)' },
    { flags: '--no-overview', description: 'leave the overview out (a smaller prompt; the agent can still run stats)' },
    { flags: '--dry-run', description: 'print the command line and the prompt instead of starting the agent' },
  ],
  examples: [
    'trajstore agent agentb ./ds --ask "Which tools fail most, and why?"',
    'trajstore agent agenta @team/prod',
    'echo "Compare the cost of model-a and model-b per solved task" | trajstore agent agenta ./ds --ask-file -',
    'trajstore agent agentb ./ds --dry-run --no-overview',
  ],
  flags,
  async run(ctx, f) {
    const question = await readQuestion(ctx, f.question);
    const plan = await planAgent(resolveContext(ctx), { agent: f.agent, dataset: f.dataset, overview: f.overview, trajstore: thisTrajstore(), ...(question !== undefined ? { question } : {}) });
    if (f.dryRun) {
      const via = plan.promptVia === 'stdin' ? 'the prompt below on its stdin' : 'the prompt below in a private file, named by its first message';
      ctx.stdout.write(`# ${plan.product}${plan.path ? '' : ' (not installed: ' + plan.install + ')'}, with ${via}\n`);
      // On a terminal, the prompt's control characters (the question's, a dataset's) are shown, not acted on.
      writeText(ctx, `${[plan.path ?? plan.binary, ...plan.args].map(shellQuote).join(' ')}\n\n${plan.prompt}`);
      return;
    }
    if (plan.promptVia === 'file' && !(ctx.stdin as { isTTY?: boolean }).isTTY) {
      throw new InvalidInputError(`without --ask, ${plan.product} starts an interactive session, which needs a terminal`, { hint: 'give a question with --ask or --ask-file' });
    }
    const end = await runAgent(plan, ctx.signal);
    if ('signal' in end) throw new ToolError(ExitCode.Internal, `${plan.binary} was killed by ${end.signal}`);
    if (end.status !== 0) throw new ToolError(ExitCode.Internal, `${plan.binary} exited with status ${end.status}`);
  },
});
