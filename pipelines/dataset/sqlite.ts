/**
 * better-sqlite3, loaded through `require`: it is CommonJS, and importing it as ESM makes Node
 * parse each of its files for named exports, which every read command paid for at start-up.
 */
import { createRequire } from 'node:module';
import type BetterSqlite3 from 'better-sqlite3';

export type SqliteDatabase = BetterSqlite3.Database;
export type SqliteStatement = BetterSqlite3.Statement;

export const Database = createRequire(import.meta.url)('better-sqlite3') as typeof BetterSqlite3;
