/** Reading parts that refer to the content store (contents.ts): row groups with their references put back. */
import { resolveJson, resolveText, type ContentLookup } from './contents.js';
import type { Snapshot } from './layout.js';
import { relationParts, type Row } from './parquet.js';
import { REFERRING_RELATIONS, holdsContent, type ColumnDef, type Relation } from './relations.js';
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

/**
 * The row groups of a relation with their cells as the source had them: the columns that may refer
 * to the content store put back, in the parts that refer to it (older parts hold whole values).
 */
export async function* resolvedRowGroups(store: ObjectStore, snapshot: Snapshot, relation: Relation, columns: readonly ColumnDef[], lookup: ContentLookup): AsyncGenerator<Row[]> {
  const referring = REFERRING_RELATIONS.has(relation) ? columns.filter(holdsContent) : [];
  for await (const rows of storedRowGroups(store, snapshot, relation, columns.map((c) => c.name))) {
    for (const row of rows) {
      if (!(row as { [REFERS]?: true })[REFERS]) continue;
      for (const column of referring) row[column.name] = column.type === 'json' ? resolveJson(row[column.name], lookup) : resolveText(row[column.name], lookup);
    }
    yield rows;
  }
}
