/**
 * Which snapshot a dataset's SQLite index describes (`index_meta.snapshot_id`), whether it is of
 * the format this build reads, and whether its full-text index is there. Kept apart from sqlite-index.ts, which builds indexes from the
 * Parquet parts and is loaded only to build one.
 */
import { openDatabase, type SqliteDatabase } from './sqlite.js';

/**
 * The format of the derived index itself (its tables and tokenizer). An index of another format
 * describes no snapshot this build can use, so it is rebuilt like a stale one.
 * 1: FTS5 trigram; 2: unicode61 words with Chinese, Japanese and Korean per character (fts-text.ts);
 * 3: without the columns only export reads (relations.ts, `sql`); 4: with the usage columns of layout 4;
 * 5: the content store (`contents`, `<relation>_stored` tables under views, contents.ts);
 * 6: the `events` relation of gateway datasets.
 */
export const INDEX_FORMAT = '6';

/** The snapshot id recorded in an open index; undefined when it has none or is of another format. */
export function snapshotIdOf(db: SqliteDatabase): string | undefined {
  const rows = db.prepare("SELECT key, value FROM index_meta WHERE key IN ('snapshot_id', 'index_format')").all() as Array<{ key: string; value: string }>;
  const meta = new Map(rows.map((r) => [r.key, r.value]));
  return meta.get('index_format') === INDEX_FORMAT ? meta.get('snapshot_id') : undefined;
}

/** The snapshot id an index file describes, or undefined when it is missing, unreadable or of another format. */
export function indexSnapshotId(path: string): string | undefined {
  let db: SqliteDatabase | undefined;
  try {
    db = openDatabase(path, { readonly: true, fileMustExist: true });
    return snapshotIdOf(db);
  } catch {
    return undefined;
  } finally {
    db?.close();
  }
}

/** The full-text facts of an index: `index_meta` says what was built; the table must also be there. */
export function ftsInfo(db: SqliteDatabase): { available: boolean; tokenizer: string | null } {
  const meta = new Map(
    (db.prepare('SELECT key, value FROM index_meta').all() as Array<{ key: string; value: string }>).map((r) => [r.key, r.value]),
  );
  const table = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'steps_fts'").get() !== undefined;
  const available = table && meta.get('fts_available') === '1';
  return { available, tokenizer: available ? (meta.get('tokenizer') ?? null) : null };
}
