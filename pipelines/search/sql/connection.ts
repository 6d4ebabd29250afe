/**
 * The read-only connection user and planner SQL runs on: the first mount's index opened read-only
 * (it is also `main`), the watchdog extension (watchdog.c) loaded so that the statement can be
 * stopped, every mount attached under its name, then `PRAGMA query_only`, and last the PRAGMA guard
 * (pragma-guard.c), which from then on refuses pragma assignments SQLite counts as read-only. Pages are read
 * through SQLite's small page cache, not memory-mapped: a statement that scans a relation would
 * otherwise map all of it and count it in the process's resident memory (the peak RSS of a
 * group-by over `steps` grew with the dataset: 114 MB against 71 MB on a 200 MB corpus), while
 * `find` was no slower without (bench/find-query).
 */
import { openDatabase, type SqliteDatabase } from '../../dataset/sqlite.js';
import { sqlExtension } from './native.js';

/** An index file attached under a schema name. The first mount is also the connection's `main`. */
export interface SqlMount {
  name: string;
  path: string;
}

/** Names a mount may take: an SQL identifier, never one of SQLite's own schemas. */
export const MOUNT_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
export const RESERVED_MOUNT_NAMES = new Set(['main', 'temp']);

export function openReadOnly(mounts: readonly SqlMount[]): SqliteDatabase {
  const [first] = mounts;
  if (!first) throw new Error('no dataset mounted');
  const [watchdog, pragmaGuard] = [sqlExtension('watchdog'), sqlExtension('pragma-guard')];
  const db = openDatabase(first.path, { readonly: true, fileMustExist: true });
  try {
    db.loadExtension(watchdog);
    for (const mount of mounts) {
      // Validated by the caller too; checked here because the names are spliced in as identifiers.
      if (!MOUNT_NAME.test(mount.name) || RESERVED_MOUNT_NAMES.has(mount.name.toLowerCase())) throw new Error(`invalid mount name ${mount.name}`);
      db.prepare(`ATTACH DATABASE ? AS "${mount.name}"`).run(mount.path);
    }
    db.pragma('query_only = 1');
    db.loadExtension(pragmaGuard);
    return db;
  } catch (error) {
    db.close();
    throw error;
  }
}
