/**
 * Display width of text in a terminal. Printable ASCII is one column a character; anything else
 * goes to string-width (graphemes, East Asian width, emoji), loaded on first use because building
 * its Unicode property regexes costs ~20 ms of start-up that most commands never need.
 */
import { createRequire } from 'node:module';

const PRINTABLE_ASCII = /^[\x20-\x7e]*$/;
let stringWidth: ((text: string) => number) | undefined;

export function displayWidth(text: string): number {
  if (PRINTABLE_ASCII.test(text)) return text.length;
  stringWidth ??= (createRequire(import.meta.url)('string-width') as { default: (text: string) => number }).default;
  return stringWidth(text);
}
