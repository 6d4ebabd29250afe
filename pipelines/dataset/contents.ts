/**
 * The content store: large text, kept once per dataset under the hash of its content. Agent logs
 * repeat themselves (a tool's output is the observation, the call's result and the source's own
 * record of the call; resumed sessions copy earlier turns; every Codex session repeats its CLI's
 * instructions), so a string of at least CONTENT_MIN_CHARS characters is stored as a row of the
 * `contents` relation (hash, value) and the cell holds a reference to it.
 *
 * The encoding, in Parquet parts and in the SQLite index alike:
 * - a text cell, or a string inside a JSON cell, that is a reference holds U+0001 followed by the
 *   value's hash (SHA-256, base64url, 43 characters);
 * - a string that itself begins with U+0001 is stored with one more U+0001 in front;
 * - anything else is stored as it is.
 * Readers put the values back (`resolveText`, `resolveJson`; the index's views do it in SQL), so no
 * column changes meaning. Parts written before layout 5 hold no references (and no escapes). This
 * module reads; content-refs.ts writes (it alone needs node:crypto, which costs readers start-up time).
 */

/** Strings at least this long are kept in the content store (documented in the README). */
export const CONTENT_MIN_CHARS = 512;
export const CONTENT_MARK = '\u0001';
export const MARK = 1;
/** The marker as JSON.stringify writes it at the start of a string: `"\u0001`. */
export const JSON_MARK = '"\\u0001';

/** The value of a hash, from wherever the content store is. */
export type ContentLookup = (hash: string) => string;

/** A stored text cell back as the source had it. */
export function resolveText(stored: unknown, lookup: ContentLookup): unknown {
  if (typeof stored !== 'string' || stored.charCodeAt(0) !== MARK) return stored;
  return stored.charCodeAt(1) === MARK ? stored.slice(1) : lookup(stored.slice(1));
}

/** A stored JSON cell back as the source had it. */
export function resolveJson(stored: unknown, lookup: ContentLookup): unknown {
  if (typeof stored !== 'string' || !stored.includes(JSON_MARK)) return stored;
  return JSON.stringify(resolveValue(JSON.parse(stored), lookup));
}

/** A stored JSON cell parsed, with its references put back (a cell without any is only parsed). */
export function parseStoredJson(stored: string, lookup: ContentLookup): unknown {
  const value: unknown = JSON.parse(stored);
  return stored.includes(JSON_MARK) ? resolveValue(value, lookup) : value;
}

/** A parsed stored JSON value with its references put back (in place: the value is the caller's own). */
export function resolveValue(value: unknown, lookup: ContentLookup): unknown {
  if (typeof value === 'string') return resolveText(value, lookup);
  if (typeof value !== 'object' || value === null) return value;
  // Members are written only where a reference was put back: most are left as they are.
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const member: unknown = value[i];
      const resolved = resolveValue(member, lookup);
      if (resolved !== member) value[i] = resolved;
    }
  } else {
    const members = value as Record<string, unknown>;
    for (const key in members) {
      const member = members[key];
      const resolved = resolveValue(member, lookup);
      if (resolved !== member) members[key] = resolved;
    }
  }
  return value;
}

/** The hashes a stored JSON cell refers to (for the index's views, which fetch them in SQL). */
export function jsonRefs(stored: string): string[] {
  const hashes: string[] = [];
  JSON.parse(stored, (_key, member: unknown) => {
    if (typeof member === 'string' && member.charCodeAt(0) === MARK && member.charCodeAt(1) !== MARK) hashes.push(member.slice(1));
    return member;
  });
  return hashes;
}

