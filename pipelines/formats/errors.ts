/** Errors about an input file, with the place in it: `file:line:column: reason` (exit 2, or 5 for a limit). */
import { InvalidInputError, ResourceLimitError } from '../../lib/errors.js';

export interface SourceLocation {
  relPath: string;
  line?: number;
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

export class SourceError extends InvalidInputError {
  constructor(
    readonly location: SourceLocation,
    readonly reason: string,
    options?: { hint?: string; cause?: unknown },
  ) {
    super(`${formatLocation(location)}: ${reason}`, options);
  }
}

/** An input file holds something larger than trajstore takes (exit 5), with the place in it. */
export class SourceLimitError extends ResourceLimitError {
  constructor(
    readonly location: SourceLocation,
    readonly reason: string,
    options?: { hint?: string; cause?: unknown },
  ) {
    super(`${formatLocation(location)}: ${reason}`, options);
  }
}
