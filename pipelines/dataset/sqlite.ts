/**
 * better-sqlite3, opened the quick way: given the path of its native addon, because left to find
 * it, it reads /proc/self/maps to tell glibc from musl, which every read command paid for at
 * start-up. Should that addon not load (a musl system), its own lookup runs. (Imported statically
 * so that the tools' bundles hold its JavaScript: loading its fifteen files one by one cost more.)
 */
import Database from 'better-sqlite3';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { jsonRefs, resolveJson } from './contents.js';

export type SqliteDatabase = Database.Database;
export type SqliteStatement = Database.Statement;

const require = createRequire(import.meta.url);

/** The addon a build or the prebuilt package of this platform provides; undefined leaves it to better-sqlite3. */
function addonPath(): string | undefined {
  const root = dirname(require.resolve('better-sqlite3/package.json'));
  for (const path of [join(root, 'build', 'Release', 'better_sqlite3.node'), join(root, 'prebuilds', `${process.platform}-${process.arch}.node`)]) {
    if (existsSync(path)) return path;
  }
  return undefined;
}

let addon: string | undefined | null = null;

/** Opens a database with the functions the index's views call (contentFunctions). */
export function openDatabase(path: string, options: Database.Options = {}): SqliteDatabase {
  const db = connect(path, options);
  contentFunctions(db);
  return db;
}

function connect(path: string, options: Database.Options): SqliteDatabase {
  if (addon === null) addon = addonPath();
  if (addon === undefined) return new Database(path, options);
  try {
    return new Database(path, { ...options, nativeBinding: addon });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ERR_DLOPEN_FAILED') throw error;
    addon = undefined;
    return new Database(path, options);
  }
}

/**
 * The views of the index (sqlite-index.ts) put large strings back from the `contents` table: text
 * cells in plain SQL, JSON cells with these two functions, which touch no table (SQL fetches the
 * values they need): `trajstore_refs(json)` lists the hashes a stored JSON cell refers to, and
 * `trajstore_json(json, values)` puts in the values of an object of hash -> value.
 */
function contentFunctions(db: SqliteDatabase): void {
  db.function('trajstore_refs', { deterministic: true }, (stored: unknown) => (typeof stored === 'string' ? JSON.stringify(jsonRefs(stored)) : '[]'));
  db.function('trajstore_json', { deterministic: true }, (stored: unknown, values: unknown) => {
    const byHash = JSON.parse(typeof values === 'string' ? values : '{}') as Record<string, string>;
    return resolveJson(stored, (hash) => {
      const value = byHash[hash];
      if (value === undefined) throw new Error(`the content store has no value ${hash}`);
      return value;
    }) as string | null;
  });
}

