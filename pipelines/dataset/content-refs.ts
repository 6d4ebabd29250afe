/**
 * Writing cells that refer to the content store (contents.ts says how): a string of at least
 * CONTENT_MIN_CHARS characters becomes a reference to its hash, and the values seen first go to the
 * `contents` relation.
 */
import { hash } from 'node:crypto';
import { CONTENT_MARK, CONTENT_MIN_CHARS, JSON_MARK, MARK } from './contents.js';
import type { Row } from './parquet.js';

export const contentHash = (value: string): string => hash('sha256', value, 'base64url');

/** The `contents` rows of values first seen by a ContentRefs, to store before the rows that refer to them. */
export type ContentRow = { hash: string; value: string };

/**
 * Makes the stored form of cells, collecting the values it moves to the content store: `fresh` are
 * the values this instance saw first, until `take()` (the index leaves out any the dataset holds).
 */
export class ContentRefs {
  private fresh: ContentRow[] = [];
  private readonly own = new Set<string>();
  /** References made since the last `take()`: one document holds a tool's output in three cells, hashed once. */
  private readonly recent = new Map<string, string>();


  /** A string as stored: a reference when it is large, escaped when it begins with the marker. */
  private string = (value: string): string => {
    if (value.length >= CONTENT_MIN_CHARS) {
      let reference = this.recent.get(value);
      if (reference === undefined) {
        const hash = contentHash(value);
        if (!this.own.has(hash)) {
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

  /** The values first seen since the last call, as `contents` rows (call once per document). */
  take(): Row[] {
    const rows = this.fresh;
    this.fresh = [];
    this.recent.clear();
    return rows;
  }
}
