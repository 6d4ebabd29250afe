/**
 * Text shown in a terminal: its display width, clipping, and control characters escaped. Printable
 * ASCII is one column a character; anything else goes to string-width (graphemes, East Asian width,
 * emoji), loaded on first use because building its Unicode property regexes costs ~20 ms of start-up
 * that most commands never need.
 */
import { createRequire } from 'node:module';

const PRINTABLE_ASCII = /^[\x20-\x7e]*$/;
let stringWidth: ((text: string) => number) | undefined;

export function displayWidth(text: string): number {
  if (PRINTABLE_ASCII.test(text)) return text.length;
  stringWidth ??= (createRequire(import.meta.url)('string-width') as { default: (text: string) => number }).default;
  return stringWidth(text);
}

const ELLIPSIS = '…';
let graphemes: Intl.Segmenter | undefined;

/** `text` cut to at most `width` columns, ending in an ellipsis; cut between graphemes, never inside one. */
export function clipToWidth(text: string, width: number): string {
  if (displayWidth(text) <= width) return text;
  if (width <= 0) return '';
  const room = width - 1; // the ellipsis takes one column
  if (PRINTABLE_ASCII.test(text)) return text.slice(0, room) + ELLIPSIS;
  graphemes ??= new Intl.Segmenter(undefined, { granularity: 'grapheme' });
  let out = '';
  let used = 0;
  for (const { segment } of graphemes.segment(text)) {
    const w = displayWidth(segment);
    if (used + w > room) break;
    out += segment;
    used += w;
  }
  return out + ELLIPSIS;
}

/**
 * What a terminal must not be given raw from data:
 * - C0 controls, DEL and C1 controls (U+0080-U+009F): a terminal acts on them instead of showing
 *   them (ESC and the 8-bit CSI U+009B start sequences that move the cursor, clear the screen or
 *   write the clipboard);
 * - the bidirectional formatting characters (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069):
 *   invisible, they reorder what is shown around them, so that a name in one cell reads as another
 *   or moves the figures beside it ("Trojan Source").
 * Text from data is shown with them escaped.
 */
const CONTROL_CLASS = '[\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]';
const CONTROLS = new RegExp(CONTROL_CLASS, 'g');
const ANY_CONTROL = new RegExp(CONTROL_CLASS);
const NAMED_CONTROLS: Readonly<Record<string, string>> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/** Whether `text` holds a character `escapeControls` escapes. */
export const hasControls = (text: string): boolean => ANY_CONTROL.test(text);

/** How a control character is shown by default: `\n`, `\r`, `\t`, `\xNN` or `\uNNNN` (as C, and a shell's `$'...'`, write them). */
export const escapedControl = (ch: string): string => {
  const code = ch.charCodeAt(0);
  return NAMED_CONTROLS[ch] ?? (code > 0xff ? `\\u${code.toString(16).padStart(4, '0')}` : `\\x${code.toString(16).padStart(2, '0')}`);
};

/** `text` with each control character except those in `keep` shown as `shown` makes it (escaped by default). */
export function escapeControls(text: string, keep = '', shown: (ch: string) => string = escapedControl): string {
  return text.replace(CONTROLS, (ch) => (keep.includes(ch) ? ch : shown(ch)));
}
