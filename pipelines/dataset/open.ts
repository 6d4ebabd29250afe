/**
 * Opening a dataset for reading: the manifest's current snapshot and a read-only SQLite index of
 * exactly that snapshot. A missing or stale index (its `index_meta.snapshot_id` differs from the
 * manifest's, or it is of an older index format) is rebuilt from the Parquet parts first: in the
 * dataset when this reader can take the dataset's writer lock at once (lock.ts), else (a writer is
 * at work, the directory is not writable, or `neverWrite`: serve) in
 * `$XDG_CACHE_HOME/trajstore/index/<dataset>-<snapshot id>.sqlite`. That cache is bounded (index-cache.ts): past
 * TRAJSTORE_INDEX_CACHE_MAX_BYTES, a rebuild there removes the indexes used least recently, never one
 * used in the last minute. A reader marks a cached index used before opening it and keeps it marked
 * while it holds it (`holdIndex`), so a serve's index is never evicted under it: were it gone,
 * `onDisk` would make serve open the dataset again and rebuild it.
 * A dataset that an interrupted replace left aside is read as recover.ts `readableRoot` says.
 */
import { openDatabase, type SqliteDatabase } from './sqlite.js';
import { accessSync, constants, existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { NotFoundError, UnavailableError } from '../../lib/errors.js';
import type { ProgressFactory } from '../../lib/progress.js';
import { localPathOf, placeOf, resolveDataset, type DatasetRef, type ResolveContext } from '../pins/resolve.js';
import { INDEX_FILE, MANIFEST_KEY, readManifest, readSnapshot, requireManifest, type DatasetKind, type Manifest, type Snapshot } from './layout.js';
import { holdInUse } from './cache-bound.js';
import { cachedIndexOf, evictIndexes, holdIndex } from './index-cache.js';
import { snapshotIdOf } from './index-meta.js';
import { tryWriterLock } from './lock.js';
import { canonicalPath, readableRoot } from './recover.js';
import { LocalObjectStore, type ObjectStore } from './store.js';

export interface OpenDataset {
  uri: string;
  kind: DatasetKind;
  snapshotId: string;
  manifest: Manifest;
  snapshot: Snapshot;
  store: ObjectStore;
  /** better-sqlite3, read-only. */
  db: SqliteDatabase;
  indexState: 'present' | 'rebuilt';
  /**
   * The snapshot the dataset's manifest names now, read where the dataset lives (an object-store
   * dataset's store, not the copy this reads): what tells a reader that stays open (serve) that a
   * writer has committed since, or dropped the dataset (undefined).
   */
  currentSnapshotId(): Promise<string | undefined>;
  /**
   * Whether the files this reads by path (the index, which SQL attaches anew; the dataset's manifest)
   * are still there: an object-store dataset's copy may be evicted from the cache, or the cache
   * deleted (which is safe at any time), under a reader that stays open (serve), which opens it again.
   */
  onDisk(): boolean;
  close(): void;
}

/** Where an object-store dataset's manifest is read now (s3-cache.ts `RemoteManifest`); a local dataset's is its directory's. */
export interface ManifestSource {
  currentSnapshotId(): Promise<string | undefined>;
  close(): void;
}

/** The index at `path`, opened read-only, when it describes `snapshotId`; undefined when missing, unreadable or stale. */
function openCurrentIndex(path: string, snapshotId: string): SqliteDatabase | undefined {
  let db: SqliteDatabase | undefined;
  try {
    db = openDatabase(path, { readonly: true, fileMustExist: true });
    // Held from the first read to the close: otherwise every statement takes and drops a file lock
    // and looks for a journal (three system calls; an export looks up a value from the content
    // store tens of thousands of times). Nothing writes an index in place (writers build a new file
    // and rename it), so holding it blocks no one.
    db.pragma('locking_mode = EXCLUSIVE');
    if (snapshotIdOf(db) === snapshotId) {
      db.pragma('query_only = 1');
      return db;
    }
  } catch {
    // Missing or unreadable: rebuilt by the caller.
  }
  db?.close();
  return undefined;
}

function writable(dir: string): boolean {
  try {
    accessSync(dir, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

export interface OpenOptions {
  /** Shows the rebuild of a missing or stale index. */
  progress?: ProgressFactory;
  /** Never write in the dataset, not even its index: a missing or stale index is rebuilt in the cache (`serve`). */
  neverWrite?: boolean;
  /** Stops the object-store requests of an s3:// dataset's opening. */
  signal?: AbortSignal;
}

/** Resolves a DATASET argument (a pin, a path, or the default dataset) and opens it for reading. */
export async function openDatasetArg(rc: ResolveContext, arg: string | undefined, options: OpenOptions = {}): Promise<OpenDataset> {
  const location = await resolveDataset(arg, { ...rc, purpose: 'read' });
  return openDataset(location, rc.env, { ...(rc.signal ? { signal: rc.signal } : {}), ...options });
}

/** Where a dataset is read from locally: its directory, or the cache's copy of an object-store dataset's current snapshot. */
export interface LocalRoot {
  root: string;
  /** The dataset as the user named it, for messages. */
  shown: string;
  /** Reads `root`; for an object-store dataset's copy, naming the store's objects and dropping a part a read finds damaged (s3-cache.ts `CachedCopyStore`). */
  store: ObjectStore;
  /** `root` is the dataset's own directory, not one an interrupted replace left aside: a reader may rebuild its index there. */
  own: boolean;
  /** For an object-store dataset: its manifest in the store (`root` holds the copy of one snapshot, which never changes). */
  source?: ManifestSource;
  /** For an object-store dataset: keeps its copy marked in use in the cache until the dataset is closed (cache-bound.ts `holdInUse`). */
  hold?: { release(): void };
}

export async function localRootOf(ref: DatasetRef, env: NodeJS.ProcessEnv = process.env, signal?: AbortSignal): Promise<LocalRoot> {
  if (typeof ref !== 'string' && ref.kind === 's3') {
    // Loaded only here: the AWS SDK costs every local command start-up time.
    const { localSnapshotOf, RemoteManifest } = await import('./s3-cache.js');
    const place = placeOf(ref);
    const { dir, store } = await localSnapshotOf(place, env, signal);
    return { root: dir, shown: ref.uri, store, own: true, source: new RemoteManifest(place, env), hold: holdInUse(dir) };
  }
  const shown = localPathOf(ref);
  const root = readableRoot(shown);
  return { root, shown, store: new LocalObjectStore(root), own: root === canonicalPath(shown) };
}

export async function openDataset(ref: DatasetRef, env: NodeJS.ProcessEnv = process.env, options: OpenOptions = {}): Promise<OpenDataset> {
  return openLocalRoot(await localRootOf(ref, env, options.signal), env, options);
}

/** `openDataset` of a dataset's local root (`localRootOf`); a root that cannot be opened is let go (its copy's hold released). */
export async function openLocalRoot(local: LocalRoot, env: NodeJS.ProcessEnv = process.env, options: OpenOptions = {}): Promise<OpenDataset> {
  try {
    return await openHeldRoot(local, env, options);
  } catch (error) {
    local.hold?.release();
    local.source?.close();
    throw error;
  }
}

async function openHeldRoot(local: LocalRoot, env: NodeJS.ProcessEnv, options: OpenOptions): Promise<OpenDataset> {
  const { root, shown, store } = local;
  if (!existsSync(root) || !statSync(root).isDirectory()) throw new NotFoundError(`${shown}: no such dataset`);
  let manifest = await requireManifest(store);
  let snapshot = await readSnapshot(store, manifest.snapshot_id);
  let indexPath = join(root, INDEX_FILE);
  let indexState: OpenDataset['indexState'] = 'present';
  let db = openCurrentIndex(indexPath, snapshot.id);
  /** Keeps an index in the cache marked used while this reader has it (index-cache.ts). */
  let indexHold: { release(): void } | undefined;
  if (!db) {
    // Rebuilt in the dataset only by a reader holding its writer lock, had at once; while a writer is
    // at work (or where this reader may not write) it goes to the cache, as readers never wait.
    const lock = !options.neverWrite && local.own && writable(root) ? tryWriterLock(root, 'rebuilding the index') : undefined;
    try {
      let cacheBound: number | undefined;
      if (lock) {
        // A writer may have committed since the manifest was read: this is the index of what is current now.
        manifest = await requireManifest(store);
        snapshot = await readSnapshot(store, manifest.snapshot_id);
        db = openCurrentIndex(indexPath, snapshot.id);
      } else {
        const cached = cachedIndexOf(env, canonicalPath(root), snapshot.id);
        indexPath = cached.path;
        cacheBound = cached.maxBytes;
        indexHold = holdIndex(indexPath);
        db = openCurrentIndex(indexPath, snapshot.id);
      }
      if (!db) {
        // Loaded only here: building reads the Parquet parts, which costs start-up time an open index never needs.
        const { rebuildIndex } = await import('./sqlite-index.js');
        await rebuildIndex(store, snapshot, indexPath, options.progress);
        indexState = 'rebuilt';
        if (cacheBound !== undefined) evictIndexes(indexPath, cacheBound);
        db = openCurrentIndex(indexPath, snapshot.id);
        if (!db) throw new UnavailableError(`${indexPath}: the index was rebuilt but cannot be opened`);
      }
    } catch (error) {
      indexHold?.release();
      throw error;
    } finally {
      lock?.release();
    }
  }
  const index = db;
  return {
    uri: shown,
    kind: manifest.kind,
    snapshotId: snapshot.id,
    manifest,
    snapshot,
    store,
    db: index,
    indexState,
    currentSnapshotId: async () => (local.source ? local.source.currentSnapshotId() : (await readManifest(store))?.snapshot_id),
    onDisk: () => existsSync(index.name) && existsSync(join(root, MANIFEST_KEY)),
    close: () => {
      index.close();
      indexHold?.release();
      local.source?.close();
      local.hold?.release();
    },
  };
}
