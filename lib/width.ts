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
 * C0 controls, DEL and C1 controls (U+0080-U+009F): a terminal acts on them instead of showing them
 * (ESC and the 8-bit CSI U+009B start sequences that move the cursor, clear the screen or write the
 * clipboard), so text from data is shown with them escaped.
 */
const CONTROLS = /[\u0000-\u001f\u007f-\u009f]/g;
const NAMED_CONTROLS: Readonly<Record<string, string>> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/** How a control character is shown by default: `\n`, `\r`, `\t` or `\xNN` (as C, and a shell's `$'...'`, write them). */
export const escapedControl = (ch: string): string => NAMED_CONTROLS[ch] ?? `\\x${ch.charCodeAt(0).toString(16).padStart(2, '0')}`;

/** `text` with each control character except those in `keep` shown as `shown` makes it (escaped by default). */
export function escapeControls(text: string, keep = '', shown: (ch: string) => string = escapedControl): string {
  return text.replace(CONTROLS, (ch) => (keep.includes(ch) ? ch : shown(ch)));
}
