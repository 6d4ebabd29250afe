/**
 * Diagnostics on stderr, filtered by --log-level. Nothing here ever writes to stdout:
 * stdout belongs to results and exported content.
 */
import { InvalidInputError } from './errors.js';
import { redactUserInfo } from './redact.js';
import { escapeControls } from './width.js';

export const LOG_LEVELS = ['error', 'warn', 'info', 'debug'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export const DEFAULT_LOG_LEVEL: LogLevel = 'warn';

export function parseLogLevel(value: unknown): LogLevel {
  if (value === undefined) return DEFAULT_LOG_LEVEL;
  if (typeof value === 'string' && (LOG_LEVELS as readonly string[]).includes(value)) return value as LogLevel;
  throw new InvalidInputError(`invalid --log-level ${JSON.stringify(String(value))}`, {
    hint: `use one of: ${LOG_LEVELS.join(', ')}`,
  });
}

/**
 * A message as it may reach stderr, on one line: no credential in a URI, and no control character
 * from the data it quotes (a file name, a model id) that would drive the terminal or, a line break,
 * forge a diagnostic line of its own. Every control shows escaped (`\n`, `\x1b`); text escaped
 * before stays as it is (a backslash is no control).
 */
export function diagnosticText(message: string): string {
  return escapeControls(redactUserInfo(message));
}

export interface LogSink {
  write(chunk: string): unknown;
}

export class Logger {
  private readonly rank: number;
  constructor(
    readonly level: LogLevel,
    private readonly sink: LogSink = process.stderr,
  ) {
    this.rank = LOG_LEVELS.indexOf(level);
  }

  enabled(level: LogLevel): boolean {
    return LOG_LEVELS.indexOf(level) <= this.rank;
  }

  error(message: string): void {
    this.emit('error', message);
  }
  warn(message: string): void {
    this.emit('warn', message);
  }
  info(message: string): void {
    this.emit('info', message);
  }
  debug(message: string): void {
    this.emit('debug', message);
  }

  private emit(level: LogLevel, message: string): void {
    if (this.enabled(level)) this.sink.write(`${level}: ${diagnosticText(message)}\n`);
  }
}
