/**
 * Messages between the read-only SQL runner and its child process (Node IPC with the
 * `advanced` serialization, so bigints and Buffers cross unchanged).
 */

/** An index file attached under a schema name. The first mount is also the connection's `main`. */
export interface SqlMount {
  name: string;
  path: string;
}

export interface SqlRequest {
  mounts: SqlMount[];
  sql: string;
  /** Bound positionally; user values always travel here, never inside `sql`. */
  params: Array<string | number | bigint | null>;
  /** Rows to return at most; one more is read to tell whether there were more. */
  maxRows: number;
  /** Bytes of row data (as JSON) to return at most. */
  maxBytes: number;
}

export type WorkerMessage =
  | { type: 'columns'; columns: string[] }
  | { type: 'rows'; rows: unknown[][] }
  | { type: 'end'; truncated: 'rows' | 'bytes' | null; rowCount: number }
  /** `invalid`: SQLite refused the statement (syntax, unknown table...); `not-read-only`: it would write or does not return rows. */
  | { type: 'error'; kind: 'invalid' | 'not-read-only' | 'internal'; message: string };

/** Names a mount may take: an SQL identifier, never one of SQLite's own schemas. */
export const MOUNT_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
export const RESERVED_MOUNT_NAMES = new Set(['main', 'temp']);
