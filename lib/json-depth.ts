/**
 * How deep JSON text nests arrays and objects, counted on its bytes without parsing and stopping
 * past `limit`: JSON.parse takes seconds over megabytes of `[`, and JSON.stringify of what it builds
 * overflows the stack a few thousand levels down. Shared by the actor calls (framework/core/codec.ts)
 * and the gateway's request bodies.
 */
export function jsonDepthExceeds(raw: Buffer, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < raw.length; i++) {
    const c = raw[i]!;
    if (inString) {
      if (c === 0x5c) i++; // backslash: skip the escaped byte
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > limit) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
}
