/**
 * Why the watchdog (watchdog.c) stopped the statement it guards, read on a connection of the
 * thread's own: once the statement is stopped, the guarded connection is interrupted again and
 * again until it closes, so no statement could ask there.
 */
import { openDatabase, type SqliteDatabase, type SqliteStatement } from '../../dataset/sqlite.js';
import { sqlExtension } from './native.js';

/** The statement of the thread's connection (opened on first use: only a stopped statement needs it). */
let reasonStatement: SqliteStatement | undefined;

export type StopReason = 'timeout' | 'signal' | 'memory';

/** Why the watchdog armed on this thread stopped its statement; null while it has not. */
export function stopReason(): StopReason | null {
  if (!reasonStatement) {
    const db = openDatabase(':memory:');
    // better-sqlite3 takes the entry point as a second argument, which its type declarations leave out.
    const loadExtension = db.loadExtension as unknown as (this: SqliteDatabase, path: string, entryPoint: string) => SqliteDatabase;
    loadExtension.call(db, sqlExtension('watchdog'), 'sqlite3_watchdog_control_init');
    reasonStatement = db.prepare('SELECT trajstore_sql_stop_reason()').pluck();
  }
  return reasonStatement.get() as StopReason | null;
}
