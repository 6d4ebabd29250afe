/** Identities of traces (agent, session, root session, `{user}`): one path-safe segment each, as a trace is stored under them. */

/**
 * At most this many bytes of UTF-8: a segment is also a file name (the capture gateway's
 * `markdown/<agent>/<session>.md`), and file names stop at 255 bytes; 200 leaves room for a suffix.
 */
export const MAX_SEGMENT_BYTES = 200;

/**
 * Characters a segment may not hold: `/` and `\` (they would make two segments), C0 and C1 controls,
 * and the bidirectional overrides and isolates, which make a name display as another (U+202E shows
 * `exe.txt` for `txt.exe`).
 */
// eslint-disable-next-line no-control-regex
const UNSAFE = /[/\\\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;
/** Nothing a reader can see: only spaces and characters that render as nothing (zero-width space, joiners, BOM...). */
const INVISIBLE = /^[\p{White_Space}\p{Default_Ignorable_Code_Point}]*$/u;

const utf8 = new TextEncoder();

/** Why `value` is not one path-safe segment, or undefined when it is. */
export function pathSegmentProblem(value: string): string | undefined {
  if (value === '') return 'it is empty';
  if (value === '.' || value === '..') return 'it is . or ..';
  if (INVISIBLE.test(value)) return 'it has no visible character';
  const bytes = Buffer.byteLength(value, 'utf8');
  if (bytes > MAX_SEGMENT_BYTES) return `it is ${bytes} bytes of UTF-8 (at most ${MAX_SEGMENT_BYTES})`;
  const unsafe = value.match(UNSAFE)?.[0];
  if (unsafe !== undefined) return `it holds ${unsafe === '/' || unsafe === '\\' ? unsafe : `U+${unsafe.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`} (no / or \\, control characters or bidirectional overrides)`;
  if (value.trim() !== value) return 'it has a space at one end';
  // A lone surrogate is stored as U+FFFD, so it would share its path with another name.
  if (!value.isWellFormed()) return 'it holds a lone surrogate';
  return undefined;
}

/** Whether `value` is one path-safe segment (see pathSegmentProblem). */
export const isPathSafe = (value: string): boolean => pathSegmentProblem(value) === undefined;

/** The longest start of `value` that fits in MAX_SEGMENT_BYTES of UTF-8, cut between characters. */
function withinBytes(value: string): string {
  const { read } = utf8.encodeInto(value, new Uint8Array(MAX_SEGMENT_BYTES));
  return value.slice(0, read);
}

/** A value made path-safe: characters a segment may not hold become `_` (a lone surrogate U+FFFD), cut to its byte bound; undefined when nothing safe is left. */
export function safeSegment(value: string): string | undefined {
  const cleaned = withinBytes(value.replace(UNSAFE, '_').toWellFormed()).trim();
  return isPathSafe(cleaned) ? cleaned : undefined;
}
