/**
 * The watchdog's functions (watchdog.c) that run on a connection of the thread's own rather than
 * on the connection of the statement they concern: tickets and cancels, by which `serve`'s event
 * loop stops the statement its SQL thread runs (thread/client.ts), and why a statement was stopped,
 * which its own connection cannot be asked, as it is interrupted again and again until it closes.
 */
import { openDatabase, type SqliteDatabase, type SqliteStatement } from '../../dataset/sqlite.js';
import { sqlExtension } from './native.js';

interface Control {
  ticket: SqliteStatement;
  cancel: SqliteStatement;
  reason: SqliteStatement;
}

/** Opened on first use: the command line needs it only for a statement that was stopped. */
let control: Control | undefined;

function controlConnection(): Control {
  if (!control) {
    const db = openDatabase(':memory:');
    // better-sqlite3 takes the entry point as a second argument, which its type declarations leave out.
    const loadExtension = db.loadExtension as unknown as (this: SqliteDatabase, path: string, entryPoint: string) => SqliteDatabase;
    loadExtension.call(db, sqlExtension('watchdog'), 'sqlite3_watchdog_control_init');
    control = {
      ticket: db.prepare('SELECT trajstore_sql_ticket()').pluck(),
      cancel: db.prepare('SELECT trajstore_sql_cancel(?)'),
      reason: db.prepare('SELECT trajstore_sql_stop_reason()').pluck(),
    };
  }
  return control;
}

/** A ticket to run a statement with (SqlStatement.ticket): one the process has not handed out before. */
export function nextSqlTicket(): number {
  return Number(controlConnection().ticket.get());
}

/** Stops the statement of `ticket` at once, or as soon as it starts; one that ended is not affected, nor is any other. */
export function cancelSql(ticket: number): void {
  controlConnection().cancel.get(ticket);
}

export type StopReason = 'timeout' | 'signal' | 'memory' | 'cancel';

/** Why the watchdog armed on this thread stopped its statement; null while it has not. */
export function stopReason(): StopReason | null {
  return controlConnection().reason.get() as StopReason | null;
}
