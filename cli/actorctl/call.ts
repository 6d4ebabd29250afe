/**
 * `actorctl call NAME METHOD [ARGS_JSON]`: calls a named actor from the shell, without joining the
 * cluster. stdout gets the reply as one line of JSON (an ask), nothing (a tell), or one line of
 * JSON per item (a stream). The call's error code becomes the exit code.
 */
import { createReadStream } from 'node:fs';
import type { Readable } from 'node:stream';
import { ExitCode, InterruptedError, InvalidInputError, NotFoundError, ResourceLimitError, ToolError } from '../../lib/errors.js';
import { readBounded } from '../../lib/streams.js';
import { callActor, isActorError, type ActorErrorCode, type ClientCallMode } from '../../framework/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { defineCommand } from '../kit/program.js';
import { SEEDS_OPTION, inspectOptions, nodeAddresses, type InspectFlags } from './common.js';
import { CLUSTER_OPTION, TLS_OPTIONS, connectFlags } from './settings.js';

const MODES: readonly ClientCallMode[] = ['ask', 'tell', 'stream'];

interface CallFlags {
  name: string;
  method: string;
  /** ARGS_JSON as given (`@FILE` reads a file, `@-` stdin); parsed in `run`. */
  args: string | undefined;
  mode: ClientCallMode;
  inspect: InspectFlags;
}

function flags(args: ParsedArgs): CallFlags {
  return {
    name: args.requiredPositional(0, 'NAME'),
    method: args.requiredPositional(1, 'METHOD'),
    args: args.positional(2),
    mode: args.choice('--mode', MODES, 'ask'),
    // A call goes to one member: there is nothing to do on a best effort.
    inspect: { seeds: nodeAddresses(args, '--seeds', { lenient: true }), timeoutMs: args.seconds('--timeout', 10, 0.001), bestEffort: false, connect: connectFlags(args) },
  };
}

/**
 * The most ARGS_JSON read from `@FILE` or `@-`: far past what a node takes in one call (4 MiB by
 * default), and a bound on what `yes | actorctl call ... @-` or `@/dev/zero` would otherwise read
 * into memory until the process aborts.
 */
const MAX_ARGS_BYTES = 64 * 1024 * 1024;

/** ARGS_JSON's bytes, read from `@FILE` or `@-` (stdin) up to MAX_ARGS_BYTES. */
async function readArgsFile(file: string, stdin: Readable): Promise<Buffer> {
  const shown = file === '-' ? 'stdin' : file;
  let bytes: Buffer | undefined;
  try {
    bytes = await readBounded(file === '-' ? stdin : createReadStream(file), MAX_ARGS_BYTES);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw code === 'ENOENT' ? new NotFoundError(`ARGS_JSON file ${file} does not exist`) : new InvalidInputError(`ARGS_JSON file ${file}: ${code ?? 'unreadable'}`);
  }
  if (bytes === undefined) throw new ResourceLimitError(`ARGS_JSON (${shown}) is over ${MAX_ARGS_BYTES / 1024 / 1024} MiB`, { hint: 'pass large data by reference (a path or URL the actor reads)' });
  return bytes;
}

/** Throws unless `json` (ARGS_JSON, from `file` when it was read from one) is the text of a JSON array. */
function checkArray(json: string, file: string | undefined): void {
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch (error) {
    throw new InvalidInputError(`ARGS_JSON${file === undefined ? '' : ` (${file === '-' ? 'stdin' : file})`} is not JSON: ${(error as Error).message}`);
  }
  if (!Array.isArray(value)) throw new InvalidInputError('ARGS_JSON must be a JSON array of the arguments, e.g. \'["hello", 2]\'');
}

/**
 * ARGS_JSON: a JSON array of the method's arguments, given as it is, or (as curl's `-d @file`) read
 * from `@FILE` or `@-` (stdin). Its bytes go out as they are once checked (the values the check
 * parses are dropped): encoded again, then copied into a body, a large document was held twice more.
 */
async function argsJson(text: string | undefined, stdin: Readable): Promise<Buffer> {
  if (text === undefined) return Buffer.from('[]');
  const file = text.startsWith('@') ? text.slice(1) : undefined;
  const bytes = file === undefined ? Buffer.from(text) : await readArgsFile(file, stdin);
  checkArray(file === undefined ? text : bytes.toString('utf8'), file);
  return bytes;
}

/** How each error of a call ends the command. */
const EXIT_OF: Record<ActorErrorCode, ExitCode> = {
  failed: ExitCode.Internal,
  'no-method': ExitCode.NotFound,
  'not-found': ExitCode.NotFound,
  'not-stream': ExitCode.InvalidInput,
  'is-stream': ExitCode.InvalidInput,
  'bad-request': ExitCode.InvalidInput,
  forbidden: ExitCode.InvalidInput,
  'too-large': ExitCode.ResourceLimit,
  overloaded: ExitCode.ResourceLimit,
  stopped: ExitCode.Unavailable,
  timeout: ExitCode.Unavailable,
  unreachable: ExitCode.Unavailable,
  cancelled: ExitCode.Interrupted,
};

const HINT_OF: Partial<Record<ActorErrorCode, string>> = {
  'is-stream': 'the method streams its reply: use --mode stream',
  'not-stream': 'the method does not stream: use --mode ask',
  'no-method': 'run `actorctl inspect actors --endpoint <node> --all_actors True --format json` to see the actors',
  forbidden: 'the node is of another cluster, or needs another certificate: check --cluster and --tls-*',
};

export const callCommand = defineCommand({
  name: 'call <name> <method> [argsJson]',
  description: 'call a method of a named actor from the shell (without joining the cluster) and print its reply as JSON; ARGS_JSON is a JSON array of the arguments, or @FILE / @- (stdin) holding one',
  options: [
    SEEDS_OPTION,
    { flags: '--mode <mode>', description: 'ask (print the reply), tell (fire and forget) or stream (one JSON line per item)', default: 'ask' },
    { flags: '--timeout <seconds>', description: 'how long to wait for the reply (a stream: for it to start)', default: '10.0' },
    CLUSTER_OPTION,
    ...TLS_OPTIONS,
  ],
  examples: [
    'actorctl call echo echo \'["hello"]\' --seeds 127.0.0.1:8000',
    'actorctl call echo stream \'[5]\' --mode stream --seeds 127.0.0.1:8000',
    'echo \'[{"big": "document"}]\' | actorctl call echo echo @- --seeds 127.0.0.1:8000',
  ],
  flags,
  async run(ctx, f) {
    const args = await argsJson(f.args, ctx.stdin);
    const options = inspectOptions(ctx, f.inspect);
    try {
      const reply = await callActor({ ...options, name: f.name, method: f.method, argsJson: args, mode: f.mode, signal: ctx.signal }, (item) => ctx.stdout.write(`${JSON.stringify(item)}\n`));
      if (f.mode === 'ask') ctx.stdout.write(`${JSON.stringify(reply ?? null)}\n`);
    } catch (error) {
      if (!isActorError(error)) throw error;
      if (error.code === 'cancelled' && ctx.signal.aborted) throw ctx.signal.reason as InterruptedError;
      const hint = HINT_OF[error.code];
      throw new ToolError(EXIT_OF[error.code], `${f.name}.${f.method}: ${error.code}: ${error.message}`, hint === undefined ? {} : { hint });
    }
  },
});
