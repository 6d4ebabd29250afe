import { escapeControls, escapedControl, hasControls } from './width.js';

/**
 * Arguments written the way a POSIX shell reads them back: as they are when safe, else in single
 * quotes; one with characters a terminal must not get raw (lib/width.ts: a newline, ESC, the 8-bit
 * CSI U+009B, a bidirectional override) in ANSI-C quotes (`$'a\nb'`, bash, zsh, ksh and
 * POSIX.1-2024 sh), so that the line shown holds none of them raw: they would break it, act on the
 * terminal that shows it, or reorder what it shows.
 */
export function shellQuote(arg: string): string {
  if (/^[\w@%+=:,./-]+$/.test(arg)) return arg;
  if (!hasControls(arg)) return `'${arg.replaceAll("'", `'\\''`)}'`;
  return `$'${escapeControls(arg.replace(/[\\']/g, '\\$&'), '', shellEscaped)}'`;
}

/** `$'\xNN'` is one byte: a character past ASCII is written as the bytes of its UTF-8 (`\xc2\x9b`). */
function shellEscaped(ch: string): string {
  if (ch <= '\u007f') return escapedControl(ch);
  return [...Buffer.from(ch, 'utf8')].map((byte) => `\\x${byte.toString(16)}`).join('');
}
