/**
 * The front door shared by trajstore, actorctl and sandboxd: parses arguments with cac,
 * adds the global options, runs one command and turns what it throws into an exit code.
 *
 * Commands may have two words (`dataset pin`); cac matches only one, so the two words are
 * joined into one argument before cac sees them.
 */
import { cac, type CAC } from 'cac';
import type { Readable } from 'node:stream';
import { configEnvVar, locateConfig, type ConfigLocation } from '../../lib/config.js';
import { Settings, loadSettings, type ConfigSchema } from './config-file.js';
import { ToolError, ExitCode, InterruptedError, InvalidInputError, exitCodeOf, pathError, type StopSignal } from '../../lib/errors.js';
import { LOG_LEVELS, Logger, diagnosticText, parseLogLevel } from '../../lib/log.js';
import { ParsedArgs, camelCase, flagsOf, type OptionSpec } from './flags.js';
import { closest } from './suggest.js';
import { installation } from '../../lib/install.js';
import { stderr, stdout, type Output } from '../../lib/stdio.js';

export type { OptionSpec } from './flags.js';

export interface CommandContext {
  tool: string;
  log: Logger;
  config: ConfigLocation;
  stdin: Readable;
  /** Results and exported content; `.stream` where a Node stream is needed (piping with backpressure). */
  stdout: Output;
  /** Diagnostics, progress and prompts; `.stream` for a prompt. */
  stderr: Output;
  env: NodeJS.ProcessEnv;
  /** Aborted on the first SIGINT/SIGTERM; commands stop cleanly and leave nothing half-written. */
  signal: AbortSignal;
  /** The tool's configuration file, read and checked against the tool's `config` schema (empty for a tool without one). */
  settings: Settings;
}

/** A command: its syntax and options for cac and --help, a reader of its typed flags, and its work. */
export interface CommandSpec<Flags = unknown> {
  /** cac command syntax with up to two words: `find [dataset]`, `dataset pin <name> <uri>`. */
  name: string;
  description: string;
  aliases?: string[];
  options?: OptionSpec[];
  examples?: string[];
  /** For commands that pass options through (e.g. `-- --key value`); off by default. */
  allowUnknownOptions?: boolean;
  /**
   * The words after `--` are the command's to pass on as they are (`args.rest`: an actor's
   * parameters, an image's command). Otherwise they are operands, as `--` means to POSIX tools:
   * `stats -- -odd-name` names a dataset `-odd-name`.
   */
  takesRest?: boolean;
  /**
   * Options that --help lists beyond `options`, which depend on the command's arguments (`actor
   * CLASS --help` lists the class's constructor parameters). Called only when this command's help
   * is asked for, with the arguments after the command words (up to `--`).
   */
  helpOptions?(words: readonly string[]): Promise<OptionSpec[]>;
  /** Reads the command's options into one typed object; every check of a flag value happens here. */
  flags(args: ParsedArgs): Flags;
  run(ctx: CommandContext, flags: Flags): Promise<void> | void;
}

export interface ToolSpec {
  name: string;
  description: string;
  commands: CommandSpec[];
  /** The keys its configuration file takes; the file is then read (and checked) before any command runs. */
  config?: ConfigSchema;
}

/** Declares a command with its own flags type (a list of commands holds them as `CommandSpec`). */
export function defineCommand<Flags>(spec: CommandSpec<Flags>): CommandSpec {
  return spec as CommandSpec;
}

export interface ToolIO {
  stdin: Readable;
  stdout: Output;
  stderr: Output;
  env: NodeJS.ProcessEnv;
}

const GLOBAL_OPTIONS_WITH_VALUES = new Set(['-c', '--config', '--log-level']);
const HELP_FLAGS = new Set(['-h', '--help']);

/** The command words of a spec: `dataset pin <name> <uri>` -> `dataset pin`. */
function commandWords(spec: CommandSpec): string {
  return spec.name
    .split(' ')
    .filter((w) => !w.startsWith('<') && !w.startsWith('['))
    .join(' ');
}

/**
 * Whether an argument that follows an option taking a value, and starts with `-`, is that value:
 * `-`, a negative number, text with white space in it (SQL opening with a comment), or a word that
 * is none of the tool's flags (`--ask -x`), as git and gh take it. A flag the tool knows (`--sql
 * --json`: the value was forgotten) stays a flag, and so does any `--word` (a misspelt flag), so
 * that both are reported rather than taken as text. `known` holds every flag of the tool.
 */
function isDashedValue(arg: string, known: ReadonlySet<string>): boolean {
  if (arg === '-' || /^-(\d|\.\d)/.test(arg) || (arg.startsWith('-') && /\s/.test(arg))) return true;
  if (arg.startsWith('--')) return false;
  // mri reads `-abc` as the short flags -a, -b and -c: a flag when each of them is one.
  const letters = [...arg.slice(1).split('=')[0]!];
  return !known.has(arg.split('=')[0]!) && !letters.every((letter) => known.has(`-${letter}`));
}

/** Index of the first argument that is not a global option or its value. */
function firstPositional(argv: readonly string[]): number {
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] ?? '';
    if (arg === '--') return -1;
    if (GLOBAL_OPTIONS_WITH_VALUES.has(arg)) i++;
    else if (!arg.startsWith('-')) return i;
  }
  return -1;
}

class Tool {
  private readonly names: Map<string, CommandSpec>;
  private readonly groups: Map<string, string[]>;

  constructor(
    private readonly spec: ToolSpec,
    private readonly io: ToolIO,
  ) {
    this.names = new Map();
    this.groups = new Map();
    for (const command of spec.commands) {
      const words = commandWords(command);
      for (const name of [words, ...(command.aliases ?? [])]) this.names.set(name, command);
      const [group, sub] = words.split(' ');
      if (group !== undefined && sub !== undefined) this.groups.set(group, [...(this.groups.get(group) ?? []), sub]);
    }
  }

  async run(argv: string[]): Promise<number> {
    let log = new Logger('warn', this.io.stderr);
    // The command the arguments name, once known: its options are the ones a misspelling is matched against.
    let matched: CommandSpec | undefined;
    try {
      const joined = this.joinCommandWords(this.attachDashValues(argv));
      // Only the command asked for is given to cac (all of them for the tool's help or an unknown
      // command): cac parses the arguments once per command it knows.
      const first = joined[firstPositional(joined)];
      matched = first === undefined ? undefined : this.names.get(first);
      const cli = this.buildCac(matched ? [matched] : this.spec.commands, await this.helpOptions(joined));
      cli.parse(['node', this.spec.name, ...joined], { run: false });
      const options = cli.options as Record<string, unknown>;
      this.restoreLiteralValues(joined, options, matched ? [matched] : this.spec.commands);
      if (options.help || options.version) return ExitCode.Ok;
      log = new Logger(parseLogLevel(options.logLevel), this.io.stderr);
      if (!cli.matchedCommand) return this.noCommand(cli.args[0]);
      if (matched && !matched.takesRest) {
        // Operands after `--` continue those before it (cac would hold them apart, as words to pass on).
        cli.args = [...cli.args, ...((options['--'] as string[] | undefined) ?? [])];
        options['--'] = [];
      }

      const controller = new AbortController();
      const io = this.io;
      const config = locateConfig(this.spec.name, options.config, this.io.env);
      const ctx: CommandContext = {
        tool: this.spec.name,
        log,
        config,
        settings: this.spec.config ? await loadSettings(config, this.spec.config) : new Settings({}, undefined),
        // A getter: process.stdin is created on first use, which costs start-up time most commands never need.
        get stdin() {
          return io.stdin;
        },
        stdout: this.io.stdout,
        stderr: this.io.stderr,
        env: this.io.env,
        signal: controller.signal,
      };
      // The first signal asks the command to stop cleanly; a second one ends the process at once.
      const stopOnSignal = (signal: StopSignal): void => {
        const stop = new InterruptedError(signal);
        if (controller.signal.aborted) process.exit(stop.exitCode);
        controller.abort(stop);
      };
      // `on`, not `once`, for as long as the command runs: signal-exit (node-llama-cpp loads it through
      // proper-lockfile) listens too, and kills the process with the signal when it finds itself the
      // signal's only listener, which it did once a `once` listener had removed itself on the first signal.
      process.on('SIGINT', stopOnSignal).on('SIGTERM', stopOnSignal);
      try {
        this.pending = ctx;
        await cli.runMatchedCommand();
      } catch (error) {
        throw await this.interruption(controller.signal, error);
      } finally {
        process.off('SIGINT', stopOnSignal).off('SIGTERM', stopOnSignal);
      }
      return ExitCode.Ok;
    } catch (error) {
      return this.report(this.translate(error, matched), log);
    }
  }

  /**
   * A command that fails while a signal stops it failed because of the signal (an interrupted SQL
   * statement, a worker told to stop), so it exits 130 or 143. The signal may still be on its way:
   * a statement interrupted by the watchdog returns before Node's own handler has run, so one turn
   * of the event loop lets it arrive.
   */
  private async interruption(signal: AbortSignal, error: unknown): Promise<unknown> {
    if (!signal.aborted) await new Promise((resolve) => setImmediate(resolve));
    return signal.aborted && signal.reason instanceof InterruptedError ? signal.reason : error;
  }

  /**
   * Long and short flags of every option of `commands` that takes a value (`<x>` or `[x]`), by cac's
   * camel-cased name. Of the command being run only: another command may give the same long flag
   * another short one (`sync --to` has no `-t`), and the last one read would win.
   */
  private valueFlags(commands: readonly CommandSpec[]): Map<string, string[]> {
    const byName = new Map<string, string[]>([['config', ['-c', '--config']], ['logLevel', ['--log-level']]]);
    for (const option of commands.flatMap((c) => c.options ?? [])) {
      if (!/[<[]/.test(option.flags)) continue;
      const flags = flagsOf(option);
      const long = flags.find((f) => f.startsWith('--'));
      if (long) byName.set(camelCase(long.slice(2)), flags);
    }
    return byName;
  }

  /**
   * mri (under cac) turns every option value that looks like a number into one (`--session-id 0123`
   * would arrive as 123, `--sql '  '` as 0) and loses repeats that mix a flag's forms (`-i a --id b`).
   * So the values of options that take one are taken from the arguments as typed: text, one value
   * or, when repeated, an array in order.
   */
  private restoreLiteralValues(argv: readonly string[], options: Record<string, unknown>, commands: readonly CommandSpec[]): void {
    const end = argv.indexOf('--');
    const args = end < 0 ? argv : argv.slice(0, end);
    for (const [name, flags] of this.valueFlags(commands)) {
      const typed: string[] = [];
      args.forEach((arg, i) => {
        const flag = flags.find((f) => arg === f || arg.startsWith(`${f}=`));
        if (flag === undefined) return;
        const value = arg === flag ? args[i + 1] : arg.slice(flag.length + 1);
        // Like mri, a following flag is not a value (`--opt --yes`): cac saw no value there either.
        if (value !== undefined && !(arg === flag && value.startsWith('-'))) typed.push(value);
      });
      if (typed.length === 0) continue;
      const value = typed.length === 1 ? typed[0] : typed;
      for (const key of [name, ...flags.map((f) => camelCase(f.replace(/^--?/, '')))]) options[key] = value;
    }
  }

  /**
   * cac (mri) takes an argument that starts with `-` for a flag of its own, never an option's value:
   * a lone `-` (stdin/stdout: `import -f -`), a negative number (`--max-results -1` would be the
   * unknown flag `-1`), SQL that opens with a comment (`--sql '-- why\nSELECT 1'`), or a question
   * that starts with a dash (`agent --ask -x`). For options that take a value, `--opt VALUE`
   * becomes `--opt=VALUE` when VALUE is one of those (`isDashedValue`); a flag of the tool is still
   * a flag (`--opt --yes`).
   */
  private attachDashValues(argv: string[]): string[] {
    const takesValue = new Set(GLOBAL_OPTIONS_WITH_VALUES);
    const known = new Set([...GLOBAL_OPTIONS_WITH_VALUES, ...HELP_FLAGS, '-V', '--version']);
    for (const option of this.spec.commands.flatMap((c) => c.options ?? [])) {
      for (const flag of flagsOf(option)) {
        known.add(flag);
        if (/[<[]/.test(option.flags)) takesValue.add(flag);
      }
    }
    const out: string[] = [];
    for (let i = 0; i < argv.length; i++) {
      const arg = argv[i] ?? '';
      if (arg === '--') return [...out, ...argv.slice(i)];
      const next = argv[i + 1];
      if (takesValue.has(arg) && next !== undefined && isDashedValue(next, known)) {
        out.push(`${arg}=${next}`);
        i++;
      } else out.push(arg);
    }
    return out;
  }

  /** The context handed to the command action that cac is about to call. */
  private pending: CommandContext | undefined;

  /** What a command adds to its --help from its arguments, when its help is asked for. */
  private async helpOptions(argv: readonly string[]): Promise<Map<CommandSpec, OptionSpec[]>> {
    const end = argv.indexOf('--');
    const words = end < 0 ? argv : argv.slice(0, end);
    const at = firstPositional(words);
    const spec = at < 0 ? undefined : this.names.get(words[at] ?? '');
    if (!spec?.helpOptions || !words.some((w) => HELP_FLAGS.has(w))) return new Map();
    return new Map([[spec, await spec.helpOptions(words.slice(at + 1))]]);
  }

  private buildCac(commands: readonly CommandSpec[], helpOptions: ReadonlyMap<CommandSpec, OptionSpec[]>): CAC {
    const cli = cac(this.spec.name);
    cli.option('-c, --config <file>', `configuration file (or $${configEnvVar(this.spec.name)})`);
    cli.option('--log-level <level>', `stderr diagnostics: ${LOG_LEVELS.join('|')} (default: warn)`);
    for (const spec of commands) {
      // cac's help lists a command by its name only: its aliases would be found by nobody.
      const aliases = spec.aliases?.length ? ` (also: ${spec.aliases.join(', ')})` : '';
      const command = cli.command(spec.name, spec.description + aliases);
      for (const alias of spec.aliases ?? []) command.alias(alias);
      for (const option of [...(spec.options ?? []), ...(helpOptions.get(spec) ?? [])]) {
        command.option(option.flags, option.description, option.default === undefined ? undefined : { default: option.default });
      }
      for (const example of spec.examples ?? []) command.example(example);
      if (spec.allowUnknownOptions) command.allowUnknownOptions();
      command.action((...values: unknown[]) => {
        const options = values.pop() as Record<string, unknown>;
        const rest = (options['--'] as string[] | undefined) ?? [];
        const ctx = this.pending;
        if (!ctx) throw new Error('command context missing');
        const args = new ParsedArgs(values as Array<string | string[] | undefined>, options, rest, spec.options ?? []);
        return spec.run(ctx, spec.flags(args));
      });
    }
    cli.usage('<command> [options]');
    cli.help((sections) => [{ body: this.spec.description }, ...sections.map(withoutNegatedDefaults)]);
    cli.version(installation().version, '-V, --version');
    return cli;
  }

  /**
   * Whether the word after a group that is a command of its own is that command's operand rather
   * than a member's name: a member that takes words of its own (`serve catalog dataset add ...`)
   * followed by none is the operand (`serve catalog --listen ...` serves a directory named catalog).
   */
  private wordIsOperand(group: string, joined: string, next: string | undefined): boolean {
    const member = this.names.get(joined);
    return this.names.has(group) && member !== undefined && member.name.includes('[...') && (next === undefined || (next.startsWith('-') && !HELP_FLAGS.has(next)));
  }

  /** `dataset pin x` -> `"dataset pin" x`, and the errors and help for a bare or unknown group member. */
  private joinCommandWords(argv: string[]): string[] {
    const at = firstPositional(argv);
    const group = argv[at];
    if (at < 0 || group === undefined || !this.groups.has(group)) return argv;
    const sub = argv[at + 1];
    const joined = `${group} ${sub}`;
    if (sub !== undefined && this.names.has(joined) && !this.wordIsOperand(group, joined, argv[at + 2])) return [...argv.slice(0, at), joined, ...argv.slice(at + 2)];
    if (this.names.has(group)) return argv; // the group word is also a command of its own (`stats`)
    const members = this.groups.get(group) ?? [];
    if (argv.some((a) => HELP_FLAGS.has(a))) {
      this.io.stdout.write(this.groupHelp(group));
      throw new HelpShown();
    }
    if (sub === undefined || sub.startsWith('-')) {
      throw new InvalidInputError(`\`${this.spec.name} ${group}\` needs a subcommand`, { hint: `one of: ${members.join(', ')}` });
    }
    const guess = closest(sub, members);
    throw new InvalidInputError(`unknown command \`${group} ${sub}\``, {
      hint: guess ? `did you mean \`${group} ${guess}\`?` : `\`${group}\` takes one of: ${members.join(', ')}`,
    });
  }

  private groupHelp(group: string): string {
    const members = this.spec.commands.filter((c) => commandWords(c).startsWith(`${group} `));
    const width = Math.max(...members.map((c) => c.name.length));
    const lines = members.map((c) => `  ${c.name.padEnd(width)}  ${c.description}`);
    return `Usage:\n  $ ${this.spec.name} ${group} <command> [options]\n\nCommands:\n${lines.join('\n')}\n\nRun \`${this.spec.name} ${group} <command> --help\` for a command's options.\n`;
  }

  private noCommand(given: string | undefined): number {
    if (given === undefined) {
      throw new InvalidInputError('no command given', { hint: `run \`${this.spec.name} --help\` for the commands` });
    }
    const guess = closest(given, [...this.names.keys()]);
    throw new InvalidInputError(`unknown command \`${given}\``, {
      hint: guess ? `did you mean \`${guess}\`?` : `run \`${this.spec.name} --help\` for the commands`,
    });
  }

  /** cac reports misuse as plain errors named CACError; they are all invalid input. So is a path that cannot be used (pathError). */
  private translate(error: unknown, running: CommandSpec | undefined): unknown {
    if (!(error instanceof Error) || error.name !== 'CACError') return pathError(error);
    const unknownOption = /^Unknown option `(.+)`$/.exec(error.message);
    const command = this.spec.commands.find((c) => error.message.includes(c.name));
    if (unknownOption?.[1]) {
      // cac names the option camel-cased (`--secretKey` for the `--secret-key` typed); a capital
      // the user typed (`--Format`) has no lower-case letter before it.
      const given = unknownOption[1].replace(/(?<=[a-z0-9])[A-Z]/g, (c) => `-${c.toLowerCase()}`);
      const flags = (running ? [running] : this.spec.commands).flatMap((c) => c.options ?? []).flatMap((o) => flagsOf(o));
      const guess = closest(given, [...flags, '--config', '--log-level', '--help', '--version']);
      // Never a flag as a better spelling of itself (one of another command, or a case the user typed).
      return new InvalidInputError(`unknown option \`${given}\``, {
        hint: guess && guess !== given ? `did you mean \`${guess}\`?` : `run with --help for the options`,
      });
    }
    return new InvalidInputError(error.message, { hint: command ? `usage: ${this.spec.name} ${command.name}` : 'run with --help for usage' });
  }

  private report(error: unknown, log: Logger): number {
    if (error instanceof HelpShown) return ExitCode.Ok;
    const name = this.spec.name;
    // Each line escaped on its own: a line break the message quotes shows as `\n` and forges no line.
    const lines = (text: string): string => text.split('\n').map(diagnosticText).join('\n');
    if (error instanceof ToolError) {
      this.io.stderr.write(`${name}: error: ${diagnosticText(error.summary)}\n`);
      if (error.detail !== undefined) this.io.stderr.write(`${lines(error.detail)}\n`);
      if (error.hint) this.io.stderr.write(`${name}: hint: ${diagnosticText(error.hint)}\n`);
    } else {
      const message = error instanceof Error ? error.message : String(error);
      this.io.stderr.write(`${name}: internal error: ${diagnosticText(message)}\n`);
      if (!log.enabled('debug')) this.io.stderr.write(`${name}: hint: run with --log-level debug for a stack trace\n`);
    }
    // The stack's head (`Name: message`) on one line like the message, then its frames.
    if (log.enabled('debug') && error instanceof Error && error.stack) {
      const frames = error.stack.split('\n').filter((line) => /^\s+at /.test(line));
      this.io.stderr.write(`${diagnosticText(`${error.name}: ${error.message}`)}\n${lines(frames.join('\n'))}\n`);
    }
    return exitCodeOf(error);
  }
}

/**
 * cac gives each `--no-x` option the default `true` (that is how `x` is on unless `--no-x`) and
 * prints it, so `--no-pager ... (default: true)` read as if not paging were the default; the
 * option lines also end in a space. The `--x` line says which is the default.
 */
function withoutNegatedDefaults(section: { title?: string; body: string }): { title?: string; body: string } {
  if (section.title !== 'Options') return section;
  const lines = section.body.split('\n').map((line) => (/^\s+--no-/.test(line) ? line.replace(/ \(default: true\)\s*$/, '') : line).trimEnd());
  return { ...section, body: lines.join('\n') };
}

/** Thrown after printing a group's help, to end the run with success. */
class HelpShown extends Error {}

export function runTool(spec: ToolSpec, argv: string[], io: ToolIO): Promise<number> {
  return new Tool(spec, io).run(argv);
}

/** Entry point of an executable: runs with the process's arguments and sets its exit code. */
export async function main(spec: ToolSpec): Promise<void> {
  const io: ToolIO = {
    get stdin() {
      return process.stdin;
    },
    stdout,
    stderr,
    env: process.env,
  };
  process.exitCode = await runTool(spec, process.argv.slice(2), io);
}
