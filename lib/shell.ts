import { escapedControl } from './width.js';

/**
 * Arguments written the way a POSIX shell reads them back: as they are when safe, else in single
 * quotes; one with control characters (a newline, ESC) in ANSI-C quotes (`$'a\nb'`, bash, zsh, ksh
 * and POSIX.1-2024 sh), so that the line shown holds none of them raw: they would break it, or act
 * on the terminal that shows it.
 */
export function shellQuote(arg: string): string {
  if (/^[\w@%+=:,./-]+$/.test(arg)) return arg;
  if (!CONTROLS.test(arg)) return `'${arg.replaceAll("'", `'\\''`)}'`;
  return `$'${arg.replace(/[\\']/g, '\\$&').replace(CONTROLS_ALL, escapedControl)}'`;
}

/** C0 controls and DEL (`$'\xNN'` is a byte: C1 characters, two bytes in UTF-8, stay in single quotes). */
const CONTROLS = /[\u0000-\u001f\u007f]/;
const CONTROLS_ALL = /[\u0000-\u001f\u007f]/g;
