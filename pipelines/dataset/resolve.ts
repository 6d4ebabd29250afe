/** Reading parts that may refer to the content store (contents.ts): row groups marked with whether they do. */
import type { Snapshot } from './layout.js';
import { relationParts, type Row } from './parquet.js';
import type { Relation } from './relations.js';
import type { ObjectStore } from './store.js';

/** Set on a row read by `storedRowGroups` from a part that refers to the content store. */
export const REFERS = Symbol('refers to the content store');

/** The row groups of a relation as stored, each row of a part that refers to the content store marked REFERS. */
export async function* storedRowGroups(store: ObjectStore, snapshot: Snapshot, relation: Relation, names: readonly string[]): AsyncGenerator<Row[]> {
  for await (const part of relationParts(store, snapshot, relation)) {
    for await (const rows of part.rowGroups([...names])) {
      if (part.refersToContents) for (const row of rows) (row as { [REFERS]?: true })[REFERS] = true;
      yield rows;
    }
  }
}
