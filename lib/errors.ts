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
  cause?: unknown;
}

/** An error that the user can act on; its message names the offending input. */
export class ToolError extends Error {
  readonly hint: string | undefined;
  constructor(
    readonly exitCode: ExitCode,
    message: string,
    options: ToolErrorOptions = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.hint = options.hint;
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
