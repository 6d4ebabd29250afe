/** Messages between a dataset writer and its storage thread (client.ts, worker.ts). */
import type { DatasetKind, PartRef } from '../layout.js';
import type { Relation } from '../relations.js';
import type { RelationColumns } from '../sqlite-index.js';

/** `workerData.role` of a storage thread, so the thread's module knows what it was started for. */
export const STORAGE_THREAD_ROLE = 'trajstore-storage';

export interface StorageThreadData {
  role: typeof STORAGE_THREAD_ROLE;
  setup: StorageSetup;
}

export interface StorageSetup {
  /** Root of the dataset being written (parts go under `parts/<relation>/`). */
  root: string;
  /** The index file the new index will replace (a copy of it is extended when `freshIndex` is false). */
  indexPath: string;
  freshIndex: boolean;
  kind: DatasetKind;
  columns: RelationColumns;
  /** Part names are `<partStamp>-<sequence>`. */
  partStamp: string;
  /** Key-value metadata of every part besides `trajstore.relation`. */
  partMetadata: Array<{ key: string; value: string }>;
  /** A part is closed and a new one started past this size. */
  partBytes: number;
}

export type StorageBody =
  | { op: 'write'; relation: Relation; cells: unknown[]; spaced: boolean }
  | { op: 'retire'; relation: Relation; keys: string[] }
  | { op: 'closeParts' }
  | { op: 'finishIndex'; snapshotId: string }
  | { op: 'publishIndex' }
  | { op: 'abort' };
export type StorageRequest = StorageBody & { id: number };
/**
 * `closed`: parts finished by the request (a write past `partBytes`, or `closeParts`). A failure
 * carries its message and its code (`ENOSPC`, `SQLITE_FULL`): an error's own fields do not cross
 * threads, and without the code a full disk would be no resource limit to the writer (pathError).
 */
export type StorageReply = { id: number; closed?: Array<{ relation: Relation; ref: PartRef }>; error?: StorageFailure };
export interface StorageFailure {
  message: string;
  code?: string;
  syscall?: string;
}

export function storageFailure(error: unknown): StorageFailure {
  const { code, syscall } = error as NodeJS.ErrnoException;
  return { message: error instanceof Error ? error.message : String(error), ...(typeof code === 'string' ? { code } : {}), ...(syscall ? { syscall } : {}) };
}

/** The failure as an error again, with its code, on the writer's side. */
export function failureError(failure: StorageFailure): Error {
  return Object.assign(new Error(failure.message), failure.code ? { code: failure.code } : {}, failure.syscall ? { syscall: failure.syscall } : {});
}
