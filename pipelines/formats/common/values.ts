/**
 * Typed reads from a source object. Fields that hold a value are read leniently: a value of the
 * expected type is returned; a value of another type is kept as an unknown field at its pointer (so
 * an encoder to the same format puts it back) and reported as a diagnostic, instead of failing the
 * import or breaking the closed Storyline. Optional fields that give the document its structure
 * (tool calls, observations) are strict: a value of the wrong shape fails the document.
 */
import type { Fail } from './elements.js';
import { isJsonObject, type JsonObject } from '../../../lib/json-object.js';
import { childPointer, type UnknownFields } from './unknown.js';
import { parsedExactly } from '../lines.js';

export type Guard<T> = (value: unknown) => value is T;

export const isString: Guard<string> = (v): v is string => typeof v === 'string';
export const isNonEmptyString: Guard<string> = (v): v is string => typeof v === 'string' && v !== '';
export const isStringOrNull: Guard<string | null> = (v): v is string | null => v === null || typeof v === 'string';
export const isBoolean: Guard<boolean> = (v): v is boolean => typeof v === 'boolean';
/** A count is stored as int64 and computed with as a JavaScript number: an exact integer from 0. */
export const isCount: Guard<number> = (v): v is number => Number.isSafeInteger(v) && (v as number) >= 0;
export const isCountOrNull: Guard<number | null> = (v): v is number | null => v === null || isCount(v);
export const isNumberOrNull: Guard<number | null> = (v): v is number | null => v === null || (typeof v === 'number' && Number.isFinite(v));
export const isDurationOrNull: Guard<number | null> = (v): v is number | null => v === null || (typeof v === 'number' && v >= 0);
export const isObjectValue: Guard<JsonObject> = (v): v is JsonObject => isJsonObject(v);
export const isArray: Guard<unknown[]> = (v): v is unknown[] => Array.isArray(v);
export const isIntArray: Guard<number[]> = (v): v is number[] => Array.isArray(v) && v.every((x) => Number.isInteger(x));
export const isTimestampOrNull: Guard<string | number | null> = (v): v is string | number | null =>
  v === null || (typeof v === 'string' && v !== '') || (typeof v === 'number' && Number.isFinite(v));
/** Storyline message content: a string or an array of content-part objects. */
export const isContent: Guard<string | JsonObject[]> = (v): v is string | JsonObject[] =>
  typeof v === 'string' || (Array.isArray(v) && v.every((p) => isJsonObject(p)));
export const isEffort: Guard<string | number | null> = (v): v is string | number | null =>
  v === null || typeof v === 'string' || (typeof v === 'number' && Number.isFinite(v));

/**
 * A number written as a string of decimal digits ("12", "1716800000.5"), as some exporters write
 * every value: the number, or undefined for any other value (hex, exponents, signs, spaces).
 */
export function numberInString(value: unknown): number | undefined {
  if (typeof value !== 'string' || !/^(?:0|[1-9]\d*)(?:\.\d+)?$/.test(value)) return undefined;
  const n = Number(value);
  return Number.isFinite(n) ? n : undefined;
}

/** A count, given as a number or as a string of decimal digits (`numberInString`). */
export function countOf(value: unknown): number | undefined {
  const n = typeof value === 'string' ? numberInString(value) : value;
  return isCount(n) ? n : undefined;
}

export class LenientReader {
  constructor(
    private readonly unknown: UnknownFields,
    private readonly report: (pointer: string, message: string) => void,
  ) {}

  /** `source[key]` when it passes `guard`; otherwise kept as an unknown field and `undefined`. */
  pick<T>(source: JsonObject, key: string, guard: Guard<T>, pointer: string): T | undefined {
    if (!Object.hasOwn(source, key)) return undefined;
    const value = source[key];
    if (guard(value)) return value;
    const at = childPointer(pointer, key);
    this.unknown.set(at, value);
    this.report(at, `unexpected ${value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value} value; kept as an unknown field`);
    return undefined;
  }

  /**
   * An optional field that carries structure: absent or `null` (kept as an unknown field, so it is
   * written back) gives undefined; a value that passes `guard` is returned; anything else fails the
   * document at the field with "<key> must be <expected>".
   */
  structure<T>(source: JsonObject, key: string, guard: Guard<T>, pointer: string, fail: Fail, expected: string): T | undefined {
    if (!Object.hasOwn(source, key)) return undefined;
    const value = source[key];
    if (value === null) {
      this.unknown.set(childPointer(pointer, key), null);
      return undefined;
    }
    if (guard(value)) return value;
    return fail(childPointer(pointer, key), `${key} must be ${expected}`);
  }
}

/** Plain text of message content: the string, or the text parts joined by newlines. */
export function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((part) => (isJsonObject(part) && typeof part.text === 'string' ? part.text : ''))
    .filter((t) => t !== '')
    .join('\n');
}

/**
 * Parses JSON text that should be an object or array; the text itself when it is not valid JSON,
 * nests deeper than a document may, or holds an integer parsing would round (kept as text, it still
 * exports as it came).
 */
export function parseArguments(text: string): { value: unknown; parsed: boolean } {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { value: text, parsed: false };
  }
  return parsedExactly(value, text) ? { value, parsed: true } : { value: text, parsed: false };
}

/** True when `text` is one valid JSON value. */
export const isJsonText = (text: string): boolean => parseArguments(text).parsed;

/** A file-name-safe form of an id, for `EncodedDocument.name`. */
export function safeFileName(id: string, suffix: string): string {
  const base = id.replace(/[^A-Za-z0-9._#-]+/g, '_').replace(/^\.+/, '_').slice(0, 180) || 'document';
  return `${base}${suffix}`;
}
