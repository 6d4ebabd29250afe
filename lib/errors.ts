/**
 * Typed errors and the exit codes shared by all three tools (spec/trajstore.md, "Errors").
 * Any module may throw these; only the program runner turns them into an exit status.
 */

export const ExitCode = {
  Ok: 0,
  Internal: 1,
  InvalidInput: 2,
  NotFound: 3,
  Conflict: 4,
  ResourceLimit: 5,
  Unavailable: 6,
  /** 128 + the signal's number, as a shell reports a process that a signal ended. */
  Interrupted: 130,
  Terminated: 143,
} as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

export interface ToolErrorOptions {
  /** One line telling the user what to do about it. */
  hint?: string;
  /** Lines laid out under the message (an expression with a caret under the fault), each shown as a line of its own. */
  detail?: string;
  cause?: unknown;
}

/**
 * An error that the user can act on; its message names the offending input. The message is one
 * line, whatever the input it quotes holds (a file name may hold a line break): it is shown with
 * its control characters escaped, and any lines meant to follow it are its `detail`, which the
 * message ends with (`summary`, then the detail).
 */
export class ToolError extends Error {
  readonly hint: string | undefined;
  readonly detail: string | undefined;
  /** The message without its detail. */
  readonly summary: string;
  constructor(
    readonly exitCode: ExitCode,
    message: string,
    options: ToolErrorOptions = {},
  ) {
    super(options.detail === undefined ? message : `${message}\n${options.detail}`, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.hint = options.hint;
    this.detail = options.detail;
    this.summary = message;
  }
}

export class InvalidInputError extends ToolError {
  constructor(message: string, options?: ToolErrorOptions) {
    super(ExitCode.InvalidInput, message, options);
  }
}

export class NotFoundError extends ToolError {
  constructor(message: string, options?: ToolErrorOptions) {
    super(ExitCode.NotFound, message, options);
  }
}

export class ConflictError extends ToolError {
  constructor(message: string, options?: ToolErrorOptions) {
    super(ExitCode.Conflict, message, options);
  }
}

/** A listening address another process holds: a conflict, named by `subject` (the flag and the address given). */
export function addressInUse(subject: string): ConflictError {
  return new ConflictError(`${subject} is in use by another process`, { hint: 'choose another port (0 picks a free one)' });
}

/** Why an address could not be bound, in words, by the error's code. */
const BIND_ERRORS: Readonly<Record<string, string>> = {
  EADDRNOTAVAIL: 'cannot bind: not an address of this machine',
  EACCES: 'cannot bind: permission denied (a port below 1024 needs privileges)',
};

/** A listener that could not start, named by `subject`: an address in use is a conflict, any other failure the input's. */
export function listenFailure(subject: string, error: unknown): ToolError {
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'EADDRINUSE') return addressInUse(subject);
  // Own keys only (a code is input). Not ownValue: this module imports nothing, as both bundles load it unbundled (scripts/bundle.ts).
  const why = code !== undefined && Object.hasOwn(BIND_ERRORS, code) ? BIND_ERRORS[code] : `cannot listen (${code ?? (error as Error).message})`;
  return new InvalidInputError(`${subject}: ${why}`, { cause: error });
}

export class ResourceLimitError extends ToolError {
  constructor(message: string, options?: ToolErrorOptions) {
    super(ExitCode.ResourceLimit, message, options);
  }
}

/** A timeout, or a dependency (server, module, device) that is not there right now. */
export class UnavailableError extends ToolError {
  constructor(message: string, options?: ToolErrorOptions) {
    super(ExitCode.Unavailable, message, options);
  }
}

export type StopSignal = 'SIGINT' | 'SIGTERM';

/** Stopped by SIGINT (Ctrl-C) or SIGTERM after a clean abort: nothing was left half-written. */
export class InterruptedError extends ToolError {
  constructor(readonly signal: StopSignal = 'SIGINT') {
    super(signal === 'SIGTERM' ? ExitCode.Terminated : ExitCode.Interrupted, signal === 'SIGTERM' ? 'terminated (SIGTERM)' : 'interrupted');
  }
}

/** The exit code for anything thrown: typed errors carry theirs, the rest are internal. */
export function exitCodeOf(error: unknown): ExitCode {
  return error instanceof ToolError ? error.exitCode : ExitCode.Internal;
}

/**
 * Node's fs errors that say a path cannot be used as given: the user's input or the machine's
 * state, not a bug. Each with its exit code and words; `CODE syscall` entries are read first.
 */
const PATH_ERRORS: Readonly<Record<string, readonly [ExitCode, string]>> = {
  EACCES: [ExitCode.InvalidInput, 'permission denied'],
  EPERM: [ExitCode.InvalidInput, 'operation not permitted'],
  EROFS: [ExitCode.InvalidInput, 'read-only file system'],
  ENOTDIR: [ExitCode.InvalidInput, 'not a directory'],
  EISDIR: [ExitCode.InvalidInput, 'is a directory'],
  ELOOP: [ExitCode.InvalidInput, 'too many levels of symbolic links'],
  ENAMETOOLONG: [ExitCode.InvalidInput, 'file name too long'],
  EEXIST: [ExitCode.Conflict, 'already exists'],
  ENOSPC: [ExitCode.ResourceLimit, 'no space left on device'],
  EDQUOT: [ExitCode.ResourceLimit, 'disk quota exceeded'],
  EFBIG: [ExitCode.ResourceLimit, 'file too large'],
  // SQLite's word for ENOSPC (its error carries no errno), met writing an index.
  SQLITE_FULL: [ExitCode.ResourceLimit, 'no space left on device (database or disk is full)'],
  ENOENT: [ExitCode.NotFound, 'no such file or directory'],
  // Writers make missing parents, so a directory that cannot be made is in a place that takes no
  // new directories (`/proc/x`): the place is wrong, nothing is missing.
  'ENOENT mkdir': [ExitCode.InvalidInput, 'cannot make a directory there'],
};

/**
 * A Node fs error about a path (`EACCES: permission denied, mkdir '/x/.ds.lock-1'`) as the typed
 * error it is (`/x/.ds.lock-1: permission denied`, exit 2), named by `subject` when given (the error
 * of a read names no path). Anything else is returned as it is.
 */
export function pathError(error: unknown, subject?: string): unknown {
  if (error instanceof ToolError || !(error instanceof Error)) return error;
  const { code, syscall, path, dest } = error as NodeJS.ErrnoException & { dest?: string };
  const known = PATH_ERRORS[`${code} ${syscall}`] ?? PATH_ERRORS[String(code)];
  const named = subject ?? (path === undefined ? undefined : dest === undefined ? path : `${path} -> ${dest}`);
  if (!known) return error;
  // A full disk is a resource limit wherever it struck, and a write's error names no path.
  if (named === undefined) return known[0] === ExitCode.ResourceLimit ? new ToolError(known[0], known[1], { cause: error }) : error;
  return new ToolError(known[0], `${named}: ${known[1]}`, { cause: error });
}
