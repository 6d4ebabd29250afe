/**
 * `trajstore agent`: starts a local coding agent on a dataset. `agenta` is Codex CLI (`codex`),
 * `agentb` is Claude Code (`claude`). The prompt (agent/prompt.ts) never goes on the command line,
 * where `ps` shows it to everyone and where its length is bounded:
 * - with a question, the agent runs once, non-interactively, reading the prompt on its stdin
 *   (`codex exec -`, `claude -p`);
 * - without one, the agent starts its interactive session on the terminal; the prompt is in a
 *   private file (0600, in a 0700 directory, removed when the agent exits) and the agent's first
 *   message only names that file.
 * Either way the agent is read-only (Codex in its read-only sandbox; Claude Code with trajstore's
 * reading commands allowed and file edits denied), and the user's object-store and pin keys stay
 * out of its environment unless the dataset is read with them.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { configEnvVar } from '../../lib/config.js';
import { InterruptedError, InvalidInputError, UnavailableError } from '../../lib/errors.js';
import { resolveDataset, type DatasetLocation, type ResolveContext } from '../pins/resolve.js';
import { openDataset } from '../dataset/open.js';
import { reportOf } from '../stats/index.js';
import { REPORTS, type ReportName } from '../stats/reports.js';
import type { ReportRow } from '../stats/index.js';
import { agentPrompt } from './prompt.js';
import type { AgentName } from './names.js';


/** trajstore's commands that only read: the ones the prompt teaches. */
const READING_COMMANDS = ['stats', 'find', 'query', 'show'];

interface AgentCli {
  binary: string;
  product: string;
  install: string;
  /** Arguments that keep the agent from changing the user's files, whatever its own settings say. */
  readOnly(trajstore: string): string[];
}

const CLIS: Record<AgentName, AgentCli> = {
  agenta: {
    binary: 'codex',
    product: 'Codex CLI',
    install: 'npm install -g @openai/codex (https://github.com/openai/codex)',
    // Its config.toml may ask for workspace-write or more; the flag wins.
    readOnly: () => ['--sandbox', 'read-only'],
  },
  agentb: {
    binary: 'claude',
    product: 'Claude Code',
    install: 'npm install -g @anthropic-ai/claude-code (https://docs.anthropic.com/en/docs/claude-code)',
    // `default` overrides a settings' mode (acceptEdits, bypassPermissions); with `-p` nothing can be
    // asked, so the reading commands are allowed up front, and deny rules (which beat allow rules)
    // take away file edits and `query --output`, which writes a file.
    readOnly: (t) => [
      '--permission-mode', 'default',
      '--allowedTools', ...READING_COMMANDS.map((c) => `Bash(${t} ${c} *)`),
      '--disallowedTools', 'Edit', 'Write', 'NotebookEdit', `Bash(${t} * --output*)`,
    ],
  },
};

/** Keys in the user's environment that only trajstore's own writing commands (`dataset pin`, `serve catalog`) read. */
const PIN_KEYS = ['TRAJSTORE_ACCESS_KEY', 'TRAJSTORE_SECRET_KEY'];
/** Object-store keys: the agent's trajstore needs them only for a dataset read with them. */
const OBJECT_STORE_KEYS = ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN'];

/**
 * The agent's environment: the user's, less the keys it does not need. The object-store keys stay
 * for an s3 dataset without keys of its own (a bare s3:// uri, a pin without --ak/--sk), and for
 * Claude Code on Amazon Bedrock, which signs its own requests with them. The configuration this
 * trajstore read (`-c FILE` included) is named, so that the pin the agent is given resolves there too.
 */
function agentEnv(agent: AgentName, rc: ResolveContext, location: DatasetLocation): NodeJS.ProcessEnv {
  const storeNeedsKeys = location.kind === 's3' && location.credentials === undefined;
  const agentNeedsKeys = agent === 'agentb' && Boolean(rc.env.CLAUDE_CODE_USE_BEDROCK);
  const dropped = storeNeedsKeys || agentNeedsKeys ? PIN_KEYS : [...PIN_KEYS, ...OBJECT_STORE_KEYS];
  const kept = Object.fromEntries(Object.entries(rc.env).filter(([name]) => !dropped.includes(name)));
  return { ...kept, [configEnvVar('trajstore')]: rc.config.path };
}

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
  /** The agent's environment (agentEnv). */
  env: NodeJS.ProcessEnv;
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

/** How the agent names the dataset: a pin as given (its keys stay in the configuration), anything else as the absolute place it resolves to. */
function datasetForAgent(arg: string | undefined, location: DatasetLocation): string {
  if (arg?.startsWith('@')) return arg;
  return location.kind === 'local' ? location.path : location.uri;
}

/** The command line, before the prompt's place: Codex's non-interactive `exec` needs no git repository when it cannot write. */
function agentArgs(agent: AgentName, readOnly: string[], interactive: boolean): string[] {
  if (interactive) return [...readOnly, '--', `Read the file ${PROMPT_FILE} and follow the instructions in it.`];
  return agent === 'agenta' ? ['exec', ...readOnly, '--skip-git-repo-check', '-'] : ['-p', ...readOnly];
}

export async function planAgent(rc: ResolveContext, request: AgentRequest): Promise<AgentPlan> {
  const cli = CLIS[request.agent];
  if (request.question !== undefined && request.question.trim() === '') throw new InvalidInputError('the question is empty');
  const location = await resolveDataset(request.dataset, { ...rc, purpose: 'read' });
  // Opening the dataset checks that it exists and is a trajstore dataset (exit 3, starting no
  // agent), with the overview or without; one opening serves all the reports (one snapshot).
  const opened = await openDataset(location, rc.env, rc.signal ? { signal: rc.signal } : {});
  let overview: Partial<Record<ReportName, ReportRow[]>> | undefined;
  try {
    if (request.overview) overview = Object.fromEntries(REPORTS.map((name) => [name, reportOf(opened, name).rows]));
  } finally {
    opened.close();
  }
  const dataset = datasetForAgent(request.dataset, location);
  const prompt = agentPrompt({ trajstore: request.trajstore, dataset, ...(overview ? { overview } : {}), ...(request.question !== undefined ? { question: request.question } : {}) });
  const interactive = request.question === undefined;
  const args = agentArgs(request.agent, cli.readOnly(request.trajstore), interactive);
  return {
    agent: request.agent, product: cli.product, binary: cli.binary, path: onPath(cli.binary, rc.env), install: cli.install,
    args, promptVia: interactive ? 'file' : 'stdin', prompt, env: agentEnv(request.agent, rc, location),
  };
}

/** How an agent's end reads: its exit status, or the signal that killed it. */
export type AgentEnd = { status: number } | { signal: NodeJS.Signals };

/**
 * Runs a plan to the agent's end. A SIGINT or SIGTERM that stops trajstore (`stop`) is passed on
 * to the agent, and trajstore exits once the agent has (130 or 143); should trajstore exit first
 * (a second signal), the agent is killed with it: it never outlives trajstore, nor does its prompt file.
 */
export async function runAgent(plan: AgentPlan, stop?: AbortSignal): Promise<AgentEnd> {
  const path = plan.path;
  if (path === undefined) {
    throw new UnavailableError(`${plan.product} (\`${plan.binary}\`) is not installed, or not on PATH`, { hint: `install it: ${plan.install}` });
  }
  stop?.throwIfAborted();
  let dir: string | undefined;
  let args = plan.args;
  if (plan.promptVia === 'file') {
    dir = mkdtempSync(join(tmpdir(), 'trajstore-agent-'));
    const file = join(dir, 'prompt.md');
    writeFileSync(file, plan.prompt, { mode: 0o600 });
    args = args.map((arg) => arg.replaceAll(PROMPT_FILE, file));
  }
  let child: ChildProcess | undefined;
  const passOn = (): void => {
    child?.kill(stop?.reason instanceof InterruptedError ? stop.reason.signal : 'SIGTERM');
  };
  const atExit = (): void => {
    if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    if (dir) rmSync(dir, { recursive: true, force: true });
  };
  stop?.addEventListener('abort', passOn, { once: true });
  process.once('exit', atExit);
  try {
    const running = spawn(path, args, { stdio: [plan.promptVia === 'stdin' ? 'pipe' : 'inherit', 'inherit', 'inherit'], env: plan.env });
    child = running;
    if (plan.promptVia === 'stdin') {
      running.stdin?.on('error', () => undefined); // an agent that exits without reading it all
      running.stdin?.end(plan.prompt);
    }
    const end = await new Promise<AgentEnd>((resolve, reject) => {
      running.once('error', (error) => reject(new UnavailableError(`${plan.binary} (${path}): could not start it (${(error as NodeJS.ErrnoException).code ?? error.message})`, { hint: `reinstall it: ${plan.install}` })));
      running.once('close', (code, signal) => resolve(signal ? { signal } : { status: code ?? 1 }));
    });
    stop?.throwIfAborted();
    return end;
  } finally {
    stop?.removeEventListener('abort', passOn);
    process.off('exit', atExit);
    atExit();
  }
}
