/**
 * JSON text that reads back as the same values under trajstore's own import. JSON.stringify writes
 * a number with an integral value below 1e21 as digits alone, so a float beyond ±(2^53 - 1) that a
 * source wrote with an exponent (`1e16`, a byte count) comes out as `10000000000000000`: an integer
 * literal, which import refuses because parsing would round it. Such numbers are written with an
 * exponent again (`1e+16`), which parses to the same float.
 */
const rawJSON = (JSON as unknown as { rawJSON(text: string): unknown }).rawJSON;

const exponentForUnsafe = (_key: string, value: unknown): unknown =>
  typeof value === 'number' && Number.isInteger(value) && !Number.isSafeInteger(value) ? rawJSON(value.toExponential()) : value;

const isDigit = (code: number): boolean => code >= 48 && code <= 57;
const isSpace = (code: number): boolean => code === 32 || code === 10 || code === 13 || code === 9;

/**
 * Whether `text` (JSON) may hold a number token of 16 digits or more: a run of digits at the start
 * or after `:`, `[` or `,` (the white space of an indent, a minus between). Digits inside a string, such as a hex id
 * (`toolu_aeb7a4c54918334259669392`), are not one; a string that holds such a pattern only costs the
 * slow path, which is exact either way. Any run of 16 characters covers one index in 16, so only
 * those are looked at first: an export spends a few milliseconds here per 100 MB, where a regular
 * expression looking at every character took ~90.
 */
function mayHoldLongNumber(text: string): boolean {
  for (let i = 15; i < text.length; i += 16) {
    if (!isDigit(text.charCodeAt(i))) continue;
    let start = i;
    while (start > 0 && isDigit(text.charCodeAt(start - 1))) start--;
    let end = i + 1;
    while (end < text.length && isDigit(text.charCodeAt(end))) end++;
    if (end - start < 16) continue;
    let before = start - 1;
    if (text.charCodeAt(before) === 45 /* - */) before--;
    while (before >= 0 && isSpace(text.charCodeAt(before))) before--;
    // The text's start: the value is that number.
    if (before < 0) return true;
    const opener = text[before];
    if (opener === ':' || opener === '[' || opener === ',') return true;
  }
  return false;
}

export function reimportableJson(value: unknown, indent?: number): string {
  const text = JSON.stringify(value, null, indent);
  // Only such a token can be an integral float past 2^53; text without one is written by the fast path alone.
  return mayHoldLongNumber(text) ? JSON.stringify(value, exponentForUnsafe, indent) : text;
}
