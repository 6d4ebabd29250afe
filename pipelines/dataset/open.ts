/**
 * Opening a dataset for reading: the manifest's current snapshot and a read-only SQLite index of
 * exactly that snapshot. A missing or stale index (its `index_meta.snapshot_id` differs from the
 * manifest's) is rebuilt from the Parquet parts first; when the dataset directory is not writable
 * the rebuilt index goes to `$XDG_CACHE_HOME/trajstore/index/<snapshot id>.sqlite`.
 */
import Database from 'better-sqlite3';
import { accessSync, constants, existsSync, mkdirSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { NotFoundError, UnavailableError } from '../../cli/kit/errors.js';
import { INDEX_FILE, readSnapshot, requireManifest, type DatasetKind, type Manifest, type Snapshot } from './layout.js';
import { indexSnapshotId, rebuildIndex } from './sqlite-index.js';
import { LocalObjectStore, type ObjectStore } from './store.js';

/** What `openDataset` accepts: a local path, or a resolved location (pins/resolve.ts `DatasetLocation`). */
export type DatasetRef = string | { kind: 'local'; path: string; display?: string } | { kind: 's3'; uri: string; display?: string };

export interface OpenDataset {
  uri: string;
  kind: DatasetKind;
  snapshotId: string;
  manifest: Manifest;
  snapshot: Snapshot;
  store: ObjectStore;
  /** better-sqlite3, read-only. */
  db: Database.Database;
  indexState: 'present' | 'rebuilt';
  close(): void;
}

export function localPathOf(ref: DatasetRef): string {
  if (typeof ref === 'string') return resolve(ref);
  if (ref.kind === 'local') return resolve(ref.path);
  throw new UnavailableError(`${ref.display ?? ref.uri}: object-store datasets are not supported by this build yet`);
}

function cacheIndexPath(env: NodeJS.ProcessEnv, snapshotId: string): string {
  const base = env.XDG_CACHE_HOME || join(env.HOME || homedir(), '.cache');
  const dir = join(base, 'trajstore', 'index');
  mkdirSync(dir, { recursive: true });
  return join(dir, `${snapshotId}.sqlite`);
}

function writable(dir: string): boolean {
  try {
    accessSync(dir, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

export async function openDataset(ref: DatasetRef, env: NodeJS.ProcessEnv = process.env): Promise<OpenDataset> {
  const root = localPathOf(ref);
  if (!existsSync(root) || !statSync(root).isDirectory()) throw new NotFoundError(`${root}: no such dataset`);
  const store = new LocalObjectStore(root);
  const manifest = await requireManifest(store);
  const snapshot = await readSnapshot(store, manifest.snapshot_id);
  let indexPath = join(root, INDEX_FILE);
  let indexState: OpenDataset['indexState'] = 'present';
  if (indexSnapshotId(indexPath) !== snapshot.id) {
    if (!writable(root)) indexPath = cacheIndexPath(env, snapshot.id);
    if (indexSnapshotId(indexPath) !== snapshot.id) {
      await rebuildIndex(store, snapshot, indexPath);
      indexState = 'rebuilt';
    }
  }
  const db = new Database(indexPath, { readonly: true, fileMustExist: true });
  db.pragma('query_only = 1');
  return {
    uri: root,
    kind: manifest.kind,
    snapshotId: snapshot.id,
    manifest,
    snapshot,
    store,
    db,
    indexState,
    close: () => db.close(),
  };
}
