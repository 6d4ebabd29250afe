/** Identities of traces (agent, session, root session, `{user}`): one path-safe segment each, as a trace is stored under them. */

/**
 * Whether `value` is one path-safe segment: not empty, not `.` or `..`, no `/` or `\`, no control
 * characters, no space at either end, at most 200 characters, well-formed Unicode (a lone surrogate
 * is stored as U+FFFD, so it would share its path with another name).
 */
export function isPathSafe(value: string): boolean {
  // eslint-disable-next-line no-control-regex
  return value.length > 0 && value.length <= 200 && value !== '.' && value !== '..' && !/[/\\\u0000-\u001f\u007f]/.test(value) && value.trim() === value && value.isWellFormed();
}

/** A value made path-safe: characters a segment may not hold become `_` (a lone surrogate U+FFFD); undefined when nothing safe is left. */
export function safeSegment(value: string): string | undefined {
  // eslint-disable-next-line no-control-regex
  const cleaned = value.replace(/[/\\\u0000-\u001f\u007f]/g, '_').trim().slice(0, 200).toWellFormed();
  return isPathSafe(cleaned) ? cleaned : undefined;
}
