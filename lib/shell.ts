import { escapedControl } from './width.js';

/**
 * Arguments written the way a POSIX shell reads them back: as they are when safe, else in single
 * quotes; one with control characters (a newline, ESC, the 8-bit CSI U+009B) in ANSI-C quotes
 * (`$'a\nb'`, bash, zsh, ksh and POSIX.1-2024 sh), so that the line shown holds none of them raw:
 * they would break it, or act on the terminal that shows it.
 */
export function shellQuote(arg: string): string {
  if (/^[\w@%+=:,./-]+$/.test(arg)) return arg;
  if (!CONTROLS.test(arg)) return `'${arg.replaceAll("'", `'\\''`)}'`;
  return `$'${arg.replace(/[\\']/g, '\\$&').replace(CONTROLS_ALL, shellEscaped)}'`;
}

/** C0 controls, DEL and C1 controls, as lib/width.ts escapes for a terminal. */
const CONTROLS = /[\u0000-\u001f\u007f-\u009f]/;
const CONTROLS_ALL = /[\u0000-\u001f\u007f-\u009f]/g;

/** `$'\xNN'` is one byte: a C1 character is written as the two bytes of its UTF-8 (`\xc2\x9b`). */
function shellEscaped(ch: string): string {
  if (ch <= '\u007f') return escapedControl(ch);
  return [...Buffer.from(ch, 'utf8')].map((byte) => `\\x${byte.toString(16)}`).join('');
}
