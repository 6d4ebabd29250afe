/**
 * Sets `key` on `target` as an own, enumerable property, even when the key is `__proto__`: plain
 * assignment of that key replaces the object's prototype instead, so a key that came from input
 * would vanish from the data and lend the object inherited fields.
 */
export function setOwn(target: Record<string, unknown>, key: string, value: unknown): void {
  if (key === '__proto__') Object.defineProperty(target, key, { value, writable: true, enumerable: true, configurable: true });
  else target[key] = value;
}

/** Object.assign with every key of `source` set as setOwn sets it (Object.assign would take `__proto__` as the prototype). */
export function assignOwn<T extends Record<string, unknown>>(target: T, source: Record<string, unknown>): T {
  for (const [key, value] of Object.entries(source)) setOwn(target, key, value);
  return target;
}

/**
 * `table[key]` when `key` is the table's own property, else undefined. A key from input may name an
 * inherited member (`constructor`, `toString`, `__proto__`): indexing with it would hand back a
 * function or a prototype where the table holds data.
 */
export function ownValue<T>(table: Readonly<Record<string, T>>, key: string): T | undefined {
  return Object.hasOwn(table, key) ? table[key] : undefined;
}
