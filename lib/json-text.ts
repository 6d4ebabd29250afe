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

export function jsonText(value: unknown, indent?: number): string {
  const text = JSON.stringify(value, null, indent);
  // Only a run of 16 digits can be such a number; text without one is written by the fast path alone.
  return /\d{16}/.test(text) ? JSON.stringify(value, exponentForUnsafe, indent) : text;
}
