/**
 * `trajstore agent`: starts a local coding agent on a dataset. `agenta` is Codex CLI (`codex`),
 * `agentb` is Claude Code (`claude`). The prompt (agent/prompt.ts) never goes on the command line,
 * where `ps` shows it to everyone and where its length is bounded:
 * - with a question, the agent runs once, non-interactively, reading the prompt on its stdin
 *   (`codex exec -`, `claude -p`);
 * - without one, the agent starts its interactive session on the terminal; the prompt is in a
 *   private file (0600, in a 0700 directory, removed when the agent exits) and the agent's first
 *   message only names that file.
 */
import { spawn } from 'node:child_process';
import { accessSync, constants, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { InvalidInputError, UnavailableError } from '../../lib/errors.js';
import { resolveDataset, type ResolveContext } from '../pins/resolve.js';
import { openDatasetArg } from '../dataset/open.js';
import { reportOf } from '../stats/index.js';
import { REPORTS, type ReportName } from '../stats/reports.js';
import type { ReportRow } from '../stats/index.js';
import { agentPrompt } from './prompt.js';
import type { AgentName } from './names.js';


const CLIS: Record<AgentName, { binary: string; product: string; install: string }> = {
  agenta: { binary: 'codex', product: 'Codex CLI', install: 'npm install -g @openai/codex (https://github.com/openai/codex)' },
  agentb: { binary: 'claude', product: 'Claude Code', install: 'npm install -g @anthropic-ai/claude-code (https://docs.anthropic.com/en/docs/claude-code)' },
};

/** Stands for the prompt file in a plan's arguments until it is written. */
const PROMPT_FILE = '<prompt file>';

export interface AgentRequest {
  agent: AgentName;
  /** A DATASET argument: a path, a pin, or undefined for the default dataset. */
  dataset: string | undefined;
  question?: string;
  overview: boolean;
  /** How the agent runs this trajstore (`node /path/to/trajstore.js`). */
  trajstore: string;
}

export interface AgentPlan {
  agent: AgentName;
  product: string;
  binary: string;
  /** Where the binary is on PATH; undefined when it is not installed. */
  path: string | undefined;
  install: string;
  args: string[];
  /** `stdin`: piped to the agent; `file`: written to PROMPT_FILE for an interactive session. */
  promptVia: 'stdin' | 'file';
  prompt: string;
}

function onPath(binary: string, env: NodeJS.ProcessEnv): string | undefined {
  for (const dir of (env.PATH ?? '').split(delimiter)) {
    if (dir === '') continue;
    const candidate = join(dir, binary);
    try {
      accessSync(candidate, constants.X_OK);
      if (statSync(candidate).isFile()) return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

/** How the agent names the dataset: a pin as given, anything else as the absolute place it resolves to. */
async function datasetForAgent(rc: ResolveContext, arg: string | undefined): Promise<string> {
  if (arg?.startsWith('@')) return arg;
  const location = await resolveDataset(arg, { ...rc, purpose: 'read' });
  return location.kind === 'local' ? location.path : location.uri;
}

export async function planAgent(rc: ResolveContext, request: AgentRequest): Promise<AgentPlan> {
  const cli = CLIS[request.agent];
  if (request.question !== undefined && request.question.trim() === '') throw new InvalidInputError('the question is empty');
  const dataset = await datasetForAgent(rc, request.dataset);
  let overview: Partial<Record<ReportName, ReportRow[]>> | undefined;
  if (request.overview) {
    overview = {};
    // Reading the reports also checks that the dataset exists and is a Storyline dataset. One
    // opening serves them all (and they all see one snapshot).
    const opened = await openDatasetArg(rc, request.dataset);
    try {
      for (const name of REPORTS) overview[name] = reportOf(opened, name).rows;
    } finally {
      opened.close();
    }
  }
  const prompt = agentPrompt({ trajstore: request.trajstore, dataset, ...(overview ? { overview } : {}), ...(request.question !== undefined ? { question: request.question } : {}) });
  const interactive = request.question === undefined;
  const opening = `Read the file ${PROMPT_FILE} and follow the instructions in it.`;
  const args = interactive ? [opening] : request.agent === 'agenta' ? ['exec', '-'] : ['-p'];
  return { agent: request.agent, product: cli.product, binary: cli.binary, path: onPath(cli.binary, rc.env), install: cli.install, args, promptVia: interactive ? 'file' : 'stdin', prompt };
}

/** Runs a plan to the agent's end; returns its exit status (128 + n when a signal ended it). */
export async function runAgent(plan: AgentPlan, env: NodeJS.ProcessEnv): Promise<number> {
  if (plan.path === undefined) {
    throw new UnavailableError(`${plan.product} (\`${plan.binary}\`) is not installed, or not on PATH`, { hint: `install it: ${plan.install}` });
  }
  let dir: string | undefined;
  let args = plan.args;
  if (plan.promptVia === 'file') {
    dir = mkdtempSync(join(tmpdir(), 'trajstore-agent-'));
    const file = join(dir, 'prompt.md');
    writeFileSync(file, plan.prompt, { mode: 0o600 });
    args = args.map((arg) => arg.replaceAll(PROMPT_FILE, file));
  }
  try {
    const child = spawn(plan.path, args, { stdio: [plan.promptVia === 'stdin' ? 'pipe' : 'inherit', 'inherit', 'inherit'], env });
    if (plan.promptVia === 'stdin') {
      child.stdin?.on('error', () => undefined); // an agent that exits without reading it all
      child.stdin?.end(plan.prompt);
    }
    return await new Promise<number>((resolve, reject) => {
      child.once('error', (error) => reject(new UnavailableError(`${plan.binary}: could not start it (${(error as NodeJS.ErrnoException).code ?? error.message})`, { hint: `reinstall it: ${plan.install}` })));
      child.once('close', (code, signal) => resolve(code ?? 128 + (signal === 'SIGINT' ? 2 : signal === 'SIGTERM' ? 15 : 1)));
    });
  } finally {
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
}
