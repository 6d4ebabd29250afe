/**
 * Unknown-field bookkeeping shared by the format modules: what a source carries that the Storyline
 * has no field for is kept at `unknown_fields.sources[format].fields[<JSON Pointer in the source>]`,
 * and an encoder for the same format puts it back at that pointer. Decoders also use it for source
 * values the Storyline can only hold in a normalised form (a `null` message kept as `""`, an id that
 * had to be renamed): the encoder writes the normalised value and the restore puts the original back.
 */
import { isJsonObject, type JsonObject } from '../../../lib/json-object.js';
import { setOwn } from '../../../lib/own-property.js';
import type { Storyline } from '../../storyline/schema.js';
import { escapePointerToken } from '../../storyline/validate.js';

/** `pointer` + one reference token. */
export const childPointer = (pointer: string, token: string | number): string => `${pointer}/${escapePointerToken(token)}`;

export function parsePointer(pointer: string): string[] {
  if (pointer === '') return [];
  return pointer
    .slice(1)
    .split('/')
    .map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'));
}

/** Collects source values by their JSON Pointer. */
export class UnknownFields {
  readonly fields: JsonObject = {};

  set(pointer: string, value: unknown): void {
    this.fields[pointer] = value;
  }

  /** Every key of `source` not in `known`, at `pointer`/key. */
  collect(source: JsonObject, known: ReadonlySet<string>, pointer: string): void {
    for (const [key, value] of Object.entries(source)) {
      if (!known.has(key)) this.set(childPointer(pointer, key), value);
    }
  }

  get size(): number {
    return Object.keys(this.fields).length;
  }

  /** Stores the collected fields on the Storyline under `format` (nothing when empty). */
  attach(storyline: Storyline, format: string): void {
    if (this.size === 0) return;
    const sources = storyline.unknown_fields?.sources ?? {};
    sources[format] = { fields: { ...(sources[format]?.fields ?? {}), ...this.fields } };
    storyline.unknown_fields = { sources };
  }
}

/** The unknown fields a Storyline keeps for `format`. */
export function unknownFieldsOf(storyline: Storyline, format: string): JsonObject {
  return storyline.unknown_fields?.sources[format]?.fields ?? {};
}

/**
 * Puts each value back at its pointer inside `target` (relative to `prefix`, which is removed from
 * the pointers that start with it; others are skipped). Missing intermediate objects are created;
 * a pointer into a missing array element is skipped (the document no longer has that element).
 */
export function restoreUnknown(target: JsonObject, fields: JsonObject, prefix = ''): void {
  for (const [pointer, value] of Object.entries(fields)) {
    if (prefix !== '' && !pointer.startsWith(`${prefix}/`)) continue;
    const tokens = parsePointer(pointer.slice(prefix.length));
    if (tokens.length === 0) continue;
    let node: unknown = target;
    let ok = true;
    for (const token of tokens.slice(0, -1)) {
      if (Array.isArray(node)) {
        node = node[Number(token)];
      } else if (isJsonObject(node)) {
        // Own properties only: `node.__proto__` of a plain object is Object.prototype, and a key
        // restored into it would reach every object of the process, not the document.
        if (!Object.hasOwn(node, token) || node[token] === undefined) setOwn(node, token, {});
        node = node[token];
      } else {
        ok = false;
        break;
      }
    }
    const last = tokens[tokens.length - 1] as string;
    if (!ok) continue;
    if (Array.isArray(node)) {
      const index = Number(last);
      if (Number.isInteger(index) && index >= 0 && index <= node.length) node[index] = value;
    } else if (isJsonObject(node)) {
      setOwn(node, last, value);
    }
  }
}

/**
 * `meta.synthesized`: Storyline JSON Pointers of values a decoder invented because the source had
 * none (a session id, a tool call id). Encoders back to the same format leave them out.
 */
export function markSynthesized(storyline: Storyline, pointer: string): void {
  const meta = (storyline.meta ??= {});
  const list = Array.isArray(meta.synthesized) ? (meta.synthesized as string[]) : [];
  list.push(pointer);
  meta.synthesized = list;
}

/**
 * The first of `id#2`, `id#3`, ... not in `used`: the new id of a tool call whose id an earlier call
 * of the document took (Storyline call ids are unique per document; sources' are not always).
 */
export function renumberedId(id: string, used: ReadonlySet<string>): string {
  let n = 2;
  while (used.has(`${id}#${n}`)) n += 1;
  return `${id}#${n}`;
}

export function synthesizedSet(storyline: Storyline): Set<string> {
  const list = storyline.meta?.synthesized;
  return new Set(Array.isArray(list) ? list.filter((p): p is string => typeof p === 'string') : []);
}

/** Copies the defined properties of `source` (drops `undefined` values, keeps `null`). */
export function defined<T extends JsonObject>(source: T): T {
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(source)) if (value !== undefined) setOwn(out, key, value);
  return out as T;
}

/**
 * Sets the defined properties of `values` on `target` in their order (drops `undefined` values,
 * keeps `null`): a lenient read that found nothing leaves the field absent rather than `undefined`.
 */
export function assignDefined<T extends object>(target: T, values: Partial<T>): void {
  for (const [key, value] of Object.entries(values)) if (value !== undefined) setOwn(target as JsonObject, key, value);
}

/**
 * A value of the source as a message shows it: JSON, cut to `max` characters with `…`, so a
 * 100 KB string or a structure nested 500 deep never makes a 100 KB error line.
 */
export function shown(value: unknown, max = 80): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = Array.isArray(value) ? 'an array' : typeof value;
  }
  return text.length > max ? `${text.slice(0, max)}…` : text;
}
