/** Strict traversal of source arrays whose elements must be JSON objects (steps, tool calls, results). */
import { isJsonObject, type JsonObject } from '../../../lib/json-object.js';
import { childPointer } from './unknown.js';

/** Fails the document at a JSON Pointer (relative to the decoder's base) with a reason. */
export type Fail = (pointer: string, reason: string) => never;

/**
 * Decodes the elements of the source array at `pointer` in order, appending each result to `into`
 * before the next element is decoded (so a decoder may look at the ones before it). An element that
 * is not a JSON object fails the document at its own pointer: "<what> must be a JSON object".
 */
export function decodeObjects<T>(
  items: readonly unknown[],
  pointer: string,
  what: string,
  fail: Fail,
  decode: (item: JsonObject, itemPointer: string, index: number) => T,
  into: T[] = [],
): T[] {
  items.forEach((item, index) => {
    const itemPointer = childPointer(pointer, index);
    if (!isJsonObject(item)) fail(itemPointer, `${what} must be a JSON object`);
    into.push(decode(item as JsonObject, itemPointer, index));
  });
  return into;
}
