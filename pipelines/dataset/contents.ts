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
 * column changes meaning. Parts written before layout 5 hold no references (and no escapes).
 */
import { hash } from 'node:crypto';
import type { Row } from './parquet.js';

/** Strings at least this long are kept in the content store (documented in the README). */
export const CONTENT_MIN_CHARS = 512;
export const CONTENT_MARK = '\u0001';
const MARK = 1;
/** The marker as JSON.stringify writes it at the start of a string: `"\u0001`. */
const JSON_MARK = '"\\u0001';

export const contentHash = (value: string): string => hash('sha256', value, 'base64url');

/** The `contents` rows of values first seen by a ContentRefs, to store before the rows that refer to them. */
export type ContentRow = { hash: string; value: string };

/**
 * Makes the stored form of cells, collecting the values it moves to the content store. `known`
 * hashes (stored already, or by an earlier file of this import) are referred to without storing
 * them again; `fresh` are the values this instance saw first, until `take()`.
 */
export class ContentRefs {
  private fresh: ContentRow[] = [];
  private readonly own = new Set<string>();
  /** References made since the last `take()`: one document holds a tool's output in three cells, hashed once. */
  private readonly recent = new Map<string, string>();

  constructor(private readonly known: ReadonlySet<string> = new Set()) {}

  /** A string as stored: a reference when it is large, escaped when it begins with the marker. */
  private string = (value: string): string => {
    if (value.length >= CONTENT_MIN_CHARS) {
      let reference = this.recent.get(value);
      if (reference === undefined) {
        const hash = contentHash(value);
        if (!this.known.has(hash) && !this.own.has(hash)) {
          this.own.add(hash);
          this.fresh.push({ hash, value });
        }
        this.recent.set(value, (reference = CONTENT_MARK + hash));
      }
      return reference;
    }
    return value.charCodeAt(0) === MARK ? CONTENT_MARK + value : value;
  };

  /** A text cell as stored. */
  text(value: string | null | undefined): string | null {
    return value === undefined || value === null ? null : this.string(value);
  }

  /** A JSON cell as stored: the value's JSON text, its large strings referred to. */
  json(value: unknown): string | null {
    return value === undefined || value === null ? null : JSON.stringify(this.substituted(value));
  }

  /**
   * The value with its strings as stored, copying only the arrays and objects on the way to a
   * string that changed (a walk and a native stringify cost far less than a stringify replacer).
   */
  private substituted(value: unknown): unknown {
    if (typeof value === 'string') return this.string(value);
    if (typeof value !== 'object' || value === null) return value;
    if (Array.isArray(value)) {
      let copy: unknown[] | undefined;
      for (let i = 0; i < value.length; i++) {
        const member = this.substituted(value[i]);
        if (member !== value[i]) (copy ??= value.slice())[i] = member;
      }
      return copy ?? value;
    }
    let copy: Record<string, unknown> | undefined;
    for (const key in value) {
      const original = (value as Record<string, unknown>)[key];
      const member = this.substituted(original);
      if (member !== original) (copy ??= { ...(value as Record<string, unknown>) })[key] = member;
    }
    return copy ?? value;
  }

  /** The same for JSON text (cells read back from parts written before the content store). */
  jsonText(text: string | null | undefined): string | null {
    if (text === undefined || text === null) return null;
    if (text.length < CONTENT_MIN_CHARS && !text.includes(JSON_MARK)) return text;
    return this.json(JSON.parse(text));
  }

  /** Hashes this instance has stored. */
  get hashes(): ReadonlySet<string> {
    return this.own;
  }

  /** The values first seen since the last call, as `contents` rows (call once per document). */
  take(): Row[] {
    const rows = this.fresh;
    this.fresh = [];
    this.recent.clear();
    return rows;
  }
}

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

/** A parsed stored JSON value with its references put back (in place: the value is the caller's own). */
export function resolveValue(value: unknown, lookup: ContentLookup): unknown {
  if (typeof value === 'string') return resolveText(value, lookup);
  if (typeof value !== 'object' || value === null) return value;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) value[i] = resolveValue(value[i], lookup);
  } else {
    for (const key in value) (value as Record<string, unknown>)[key] = resolveValue((value as Record<string, unknown>)[key], lookup);
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
