/**
 * The read-only connection user and planner SQL runs on: the first mount's index opened read-only
 * (it is also `main`), every mount attached under its name, then `PRAGMA query_only`. Memory-mapped
 * reads make the large FTS doclists of a phrase query cheaper to walk.
 */
import Database from 'better-sqlite3';
import { MOUNT_NAME, RESERVED_MOUNT_NAMES, type SqlMount } from './protocol.js';

const MMAP_BYTES = 1024 * 1024 * 1024;

export function openReadOnly(mounts: readonly SqlMount[]): Database.Database {
  const [first] = mounts;
  if (!first) throw new Error('no dataset mounted');
  const db = new Database(first.path, { readonly: true, fileMustExist: true });
  try {
    db.pragma(`mmap_size = ${MMAP_BYTES}`);
    for (const mount of mounts) {
      // Validated by the caller too; checked here because the names are spliced in as identifiers.
      if (!MOUNT_NAME.test(mount.name) || RESERVED_MOUNT_NAMES.has(mount.name.toLowerCase())) throw new Error(`invalid mount name ${mount.name}`);
      db.prepare(`ATTACH DATABASE ? AS "${mount.name}"`).run(mount.path);
    }
    db.pragma('query_only = 1');
    return db;
  } catch (error) {
    db.close();
    throw error;
  }
}
