/** Schema pieces the routes share. */
import { Type } from '@sinclair/typebox';

/** One of fixed strings, as a JSON Schema `enum` (a union of literals would make a long error message). */
export const StringEnum = <T extends string>(values: readonly T[], description?: string) =>
  Type.Unsafe<T>({ type: 'string', enum: [...values], ...(description ? { description } : {}) });
