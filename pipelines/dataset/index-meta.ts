/**
 * Which snapshot a dataset's SQLite index describes (`index_meta.snapshot_id`). Kept apart from
 * sqlite-index.ts, which builds indexes from the Parquet parts and is loaded only to build one.
 */
import Database from 'better-sqlite3';

/** The snapshot id recorded in an open index; undefined when it has none. */
export function snapshotIdOf(db: Database.Database): string | undefined {
  const row = db.prepare("SELECT value FROM index_meta WHERE key = 'snapshot_id'").get() as { value: string } | undefined;
  return row?.value;
}

/** The snapshot id an index file describes, or undefined when it is missing or unreadable. */
export function indexSnapshotId(path: string): string | undefined {
  let db: Database.Database | undefined;
  try {
    db = new Database(path, { readonly: true, fileMustExist: true });
    return snapshotIdOf(db);
  } catch {
    return undefined;
  } finally {
    db?.close();
  }
}
