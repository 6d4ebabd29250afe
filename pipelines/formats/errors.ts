/** Errors about an input file, with the place in it: `file:line:column: reason` (exit 2, or 5 for a limit). */
import { ExitCode, ToolError } from '../../lib/errors.js';
import type { SourceFile } from './types.js';

export interface SourceLocation {
  relPath: string;
  line?: number;
  /** From 1, in characters (code points; lib/text-position.ts), not bytes. */
  column?: number;
  /** JSON Pointer inside the document, for schema problems. */
  pointer?: string;
}

export function formatLocation({ relPath, line, column, pointer }: SourceLocation): string {
  let where = relPath;
  if (line !== undefined) where += `:${line}`;
  if (line !== undefined && column !== undefined) where += `:${column}`;
  if (pointer !== undefined) where += ` at ${pointer === '' ? '/' : pointer}`;
  return where;
}

export interface SourceErrorOptions {
  hint?: string;
  cause?: unknown;
  /** Invalid input (2, the default), or a document past one of trajstore's limits (5). */
  exitCode?: typeof ExitCode.InvalidInput | typeof ExitCode.ResourceLimit;
}

export class SourceError extends ToolError {
  constructor(
    readonly location: SourceLocation,
    readonly reason: string,
    readonly options: SourceErrorOptions = {},
  ) {
    super(options.exitCode ?? ExitCode.InvalidInput, `${formatLocation(location)}: ${reason}`, options);
  }
}

/**
 * `error` naming `file` as the import's messages do (`file.name`). Readers and decoders locate a
 * problem by the file's relPath, which for a single file is its bare name (what the dataset stores).
 */
export function namingFile(error: unknown, file: SourceFile): unknown {
  if (!(error instanceof SourceError) || error.location.relPath !== file.relPath || file.name === file.relPath) return error;
  return new SourceError({ ...error.location, relPath: file.name }, error.reason, error.options);
}
