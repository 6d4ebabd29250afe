/**
 * Bounded previews of matched text: at most N bytes of UTF-8, cut only between code points, and
 * starting a little before the first search term found so the reason for the match is visible.
 */

const ELLIPSIS = '…';
const ELLIPSIS_BYTES = Buffer.byteLength(ELLIPSIS);
/** Code points of context kept before the first hit. */
const LEAD = 40;

/** The longest prefix of `text` that fits in `maxBytes` of UTF-8, never splitting a code point. */
export function clipUtf8(text: string, maxBytes: number): string {
  if (Buffer.byteLength(text) <= maxBytes) return text;
  let bytes = 0;
  let end = 0;
  for (const ch of text) {
    const size = Buffer.byteLength(ch);
    if (bytes + size > maxBytes) break;
    bytes += size;
    end += ch.length;
  }
  return text.slice(0, end);
}

/** White space runs become one space, so a preview stays on one line. */
function flatten(text: string): string {
  return text.replace(/\s+/gu, ' ').trim();
}

/**
 * A preview of at most `maxBytes` from the first candidate text that contains one of `terms`
 * (case-insensitively), else from the first non-empty candidate. Candidates are looked at in
 * order, each through `resolve` (find passes cells as stored and puts back only the text a preview
 * needs from the content store).
 */
export function buildPreview(
  candidates: ReadonlyArray<string | null | undefined>,
  terms: readonly string[],
  maxBytes: number,
  resolve: (text: string) => string = (text) => text,
): string {
  const lowered = terms.map((t) => flatten(t).toLowerCase()).filter((t) => t !== '');
  let first: string | undefined;
  let chosen: string | undefined;
  let hit = -1;
  for (const candidate of candidates) {
    if (typeof candidate !== 'string') continue;
    const text = flatten(resolve(candidate));
    if (text === '') continue;
    first ??= text;
    const lower = text.toLowerCase();
    const found = lowered.map((t) => lower.indexOf(t)).filter((i) => i >= 0);
    // toLowerCase keeps UTF-16 offsets for the texts we meet; clamp in case a character changed length.
    if (found.length > 0) {
      chosen = text;
      hit = Math.min(Math.min(...found), text.length);
      break;
    }
  }
  chosen ??= first ?? '';
  let start = 0;
  if (hit > 0) {
    const before = [...chosen.slice(0, hit)];
    if (before.length > LEAD) start = before.slice(0, before.length - LEAD).join('').length;
  }
  const lead = start > 0 ? ELLIPSIS : '';
  const rest = chosen.slice(start);
  if (Buffer.byteLength(lead) + Buffer.byteLength(rest) <= maxBytes) return lead + rest;
  const budget = maxBytes - Buffer.byteLength(lead) - ELLIPSIS_BYTES;
  if (budget <= 0) return clipUtf8(rest, maxBytes);
  return `${lead}${clipUtf8(rest, budget)}${ELLIPSIS}`;
}
