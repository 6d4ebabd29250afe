/**
 * Object-store datasets are read through local copies of their snapshots: a reader takes the
 * manifest once, and everything after reads the snapshot it named, whole and unchanging (readers see
 * one snapshot from start to end, whatever writers commit meanwhile). The copy is a local dataset of
 * that one snapshot, so every reader (list, stats, find, query, export) opens it as it opens a local
 * dataset, SQLite index and all.
 *
 *   $XDG_CACHE_HOME/trajstore/s3/                (default ~/.cache/trajstore/s3)
 *     parts/<store>/<part key>      parts as downloaded, shared by every snapshot of a dataset
 *                                   (<store>: a hash of endpoint, bucket and prefix)
 *     snapshots/<store>-<snapshot id>/  one snapshot of one store as a local dataset: trajstore.json, snapshots/<id>.json,
 *                                   parts/... (hard links into parts/<store>/), index.sqlite (built on
 *                                   first open)
 *     builds/<random>/              a writer's scratch (s3-writer.ts), with `owner.json` naming its
 *                                   process: a killed writer's is removed by the next command using
 *                                   the cache (`startBuild`, `removeAbandonedBuilds`)
 *
 * Only the parts a snapshot lacks are fetched: an append's new snapshot links the parts of the old
 * one and downloads its new parts. A cached part is what the snapshot lists: a download is checked
 * against its size and SHA-256 (PartRef.sha256), and every open checks that no one wrote the copy's
 * parts since (CHECKED_MTIME_S); one changed and no longer what the snapshot lists is dropped and
 * fetched again (`repairCopy`), so a cache damaged on disk mends itself instead of failing every read.
 * Damage that leaves a part's size and time alone (a disk's silent error) is seen only by a read that
 * fails on it: the copy is read through `CachedCopyStore`, which drops that part there (the next open
 * fetches it again) and names the object, not the cache, in the error.
 * Concurrent commands are safe: a part is downloaded under a temporary name and renamed into place
 * (and linked into a copy the same way), a snapshot's copy is built in a temporary directory and
 * renamed into place (the loser of two racing builds drops its own), and nothing is changed in place.
 *
 * Bounded: past TRAJSTORE_S3_CACHE_MAX_BYTES (default DEFAULT_CACHE_MAX_BYTES) the snapshots used
 * least recently are removed, then the parts no remaining snapshot links. A snapshot used in the last
 * minute (another command may be opening it, and a reader holding one open marks it used every few
 * seconds: cache-bound.ts `holdInUse`) and the one being opened stay, so the cache may exceed the
 * bound by what those hold.
 */
import { createHash } from 'node:crypto';
import { closeSync, createReadStream, existsSync, fstatSync, linkSync, mkdirSync, openSync, readdirSync, readSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { cacheHome } from '../../lib/config.js';
import { dirname, join } from 'node:path';
import { limitFromEnv } from '../../lib/env-limit.js';
import { InvalidInputError, NotFoundError, pathError, ToolError, UnavailableError } from '../../lib/errors.js';
import { randomSuffix, TEMP_MARKER } from '../../lib/durable.js';
import { walkFiles } from '../../lib/walk.js';
import { makeOwnedScratch, removeIfAbandoned } from '../../lib/owned-scratch.js';
import type { S3Place } from '../pins/pins.js';
import { cacheEntries, evictLeastRecentlyUsed, markUsed } from './cache-bound.js';
import { MANIFEST_KEY, parseManifest, parseSnapshot, snapshotKey, type Manifest, type PartRef, type Snapshot } from './layout.js';
import { S3ObjectStore } from './s3-store.js';
import { LocalObjectStore } from './store.js';

/** 10 GiB: a few snapshots of a large dataset with their indexes. */
export const DEFAULT_CACHE_MAX_BYTES = 10 * 1024 ** 3;

export function s3CacheRoot(env: NodeJS.ProcessEnv): string {
  return join(cacheHome(env), 'trajstore', 's3');
}

/** TRAJSTORE_S3_CACHE_MAX_BYTES, else DEFAULT_CACHE_MAX_BYTES; another value than a whole number of bytes is refused (exit 2). */
const cacheMaxBytes = (env: NodeJS.ProcessEnv): number => limitFromEnv(env, 'TRAJSTORE_S3_CACHE_MAX_BYTES', DEFAULT_CACHE_MAX_BYTES, 'bytes');

/**
 * A failure of the local cache (a directory that cannot be written, a full disk) while it serves
 * `subject` (`s3://bucket/prefix: its copy in the local cache`): named by the dataset or object the
 * user gave, as the cache's own paths (hashed store names, temporary names) are none the user knows;
 * the hint says where the cache is. Any other error is returned as it is.
 */
export function cacheFailure(error: unknown, subject: string, root: string): unknown {
  const typed = pathError(error, subject);
  if (typed === error || !(typed instanceof ToolError)) return error;
  return new ToolError(typed.exitCode, typed.message, { hint: `the local cache is ${root} (XDG_CACHE_HOME moves it)`, cause: error });
}

/** What names a store in the cache: a hash of its endpoint, bucket and prefix. */
const storeIdOf = (place: S3Place): string => createHash('sha256').update(`${place.endpoint ?? ''}\n${place.bucket}\n${place.prefix}`).digest('hex').slice(0, 16);

/** The cache directory of a store's parts: one per endpoint, bucket and prefix. */
export const partsPoolOf = (root: string, place: S3Place): string => join(root, 'parts', storeIdOf(place));

/**
 * The copy of one snapshot of one store. A snapshot id names the same descriptor everywhere, but
 * not the same part bytes: another prefix may list the same keys with other contents (a copy of
 * the dataset, or a bucket made to look like one), so a copy is never shared between stores.
 */
export const snapshotCopyOf = (root: string, place: S3Place, snapshotId: string): string => join(root, 'snapshots', `${storeIdOf(place)}-${snapshotId}`);

/** The object-store dataset's current manifest, with its version for a conditional put; exit 3 when there is none. */
export async function currentManifest(store: S3ObjectStore): Promise<{ manifest: Manifest; etag: string } | undefined> {
  const got = await store.getVersioned(MANIFEST_KEY);
  return got && { manifest: parseManifest(store, got.bytes), etag: got.etag };
}

export interface LocalSnapshot {
  /** A local dataset holding exactly this snapshot. */
  dir: string;
  /** What reads `dir`: named by the object store, dropping a part a read finds damaged. */
  store: CachedCopyStore;
  manifest: Manifest;
  /** The manifest's version (ETag) when it was read. */
  etag: string;
  snapshot: Snapshot;
}

/** The current snapshot of an object-store dataset as a local dataset, fetching the parts the cache lacks. */
export async function localSnapshotOf(place: S3Place, env: NodeJS.ProcessEnv, signal?: AbortSignal): Promise<LocalSnapshot> {
  const store = new S3ObjectStore(place, env, signal);
  try {
    const current = await currentManifest(store);
    if (!current) throw new NotFoundError(`${place.uri}: not a trajstore dataset (no ${MANIFEST_KEY})`);
    return await localCopyOf(store, place, env, current);
  } finally {
    store.close();
  }
}

/** The local copy of the snapshot a manifest just read from `store` names, built when the cache lacks it; a failure of the cache is named by the dataset (`cacheFailure`). */
export async function localCopyOf(store: S3ObjectStore, place: S3Place, env: NodeJS.ProcessEnv, current: { manifest: Manifest; etag: string }): Promise<LocalSnapshot> {
  const root = s3CacheRoot(env);
  try {
    return await copyInCache(store, place, env, root, current);
  } catch (error) {
    throw cacheFailure(error, `${place.uri}: its copy in the local cache`, root);
  }
}

/** `localCopyOf` inside the cache at `root`. */
async function copyInCache(store: S3ObjectStore, place: S3Place, env: NodeJS.ProcessEnv, root: string, current: { manifest: Manifest; etag: string }): Promise<LocalSnapshot> {
  // Read first: a bound the user mistyped stops the command before it downloads anything.
  const maxBytes = cacheMaxBytes(env);
  const id = current.manifest.snapshot_id;
  const dir = snapshotCopyOf(root, place, id);
  // A copy is published whole (publishCopy) and a descriptor never changes (its name is its hash):
  // a cached copy's descriptor is the store's, without asking the store for it again.
  const cached = await new LocalObjectStore(dir).get(snapshotKey(id));
  if (cached) markUsed(dir);
  const snapshotBytes = cached ?? (await store.get(snapshotKey(id)));
  if (!snapshotBytes) throw new NotFoundError(`${place.uri}: snapshot ${id} named by the manifest is missing`);
  const snapshot = parseSnapshot(place.uri, id, snapshotBytes);
  removeAbandonedBuilds(root);
  if (!cached) await buildSnapshotCopy(store, place, root, dir, current.manifest, snapshotBytes, snapshot);
  else await repairCopy(store, partsPoolOf(root, place), root, dir, snapshot);
  evict(root, maxBytes, dir);
  return { dir, store: new CachedCopyStore(dir, place.uri, partsPoolOf(root, place)), ...current, snapshot };
}

/**
 * An object-store dataset's manifest as the store holds it now, for a reader that stays open (serve)
 * to see commits and drops: its client is made at the first read and kept until `close`.
 */
export class RemoteManifest {
  private store: S3ObjectStore | undefined;
  constructor(
    private readonly place: S3Place,
    private readonly env: NodeJS.ProcessEnv,
  ) {}

  async currentSnapshotId(): Promise<string | undefined> {
    this.store ??= new S3ObjectStore(this.place, this.env);
    return (await currentManifest(this.store))?.manifest.snapshot_id;
  }

  close(): void {
    this.store?.close();
    this.store = undefined;
  }
}

/**
 * A snapshot copy read as a local dataset (s3-cache.ts): messages name the object store (`uri`), and
 * a part that a read finds damaged, which only the cache can have damaged (every part was checked
 * against the snapshot when it came in), is dropped from the copy and the pool, so the next open
 * fetches it again (`repairCopy` finds it missing). The read in progress cannot be mended under the
 * reader (it may have written output already): it fails with exit 6, as a run again succeeds.
 */
export class CachedCopyStore extends LocalObjectStore {
  constructor(
    dir: string,
    /** The dataset's s3:// URI. */
    private readonly source: string,
    /** The parts pool the copy links into. */
    private readonly pool: string,
  ) {
    super(dir);
  }

  override get uri(): string {
    return this.source;
  }

  damagedPart(key: string, damage: string): Error {
    dropFromPool(this.pool, this.root, key);
    rmSync(this.pathOf(key), { force: true });
    return new UnavailableError(`${this.source}/${key}: its copy in the local cache was damaged (${damage}) and has been dropped`, {
      hint: 'run the command again: it fetches the part from the object store',
    });
  }
}

/** Every part of a snapshot. */
const partsOf = (snapshot: Snapshot): PartRef[] => Object.values(snapshot.relations).flatMap((parts) => parts ?? []);

/** Every part key of a snapshot. */
export function partKeysOf(snapshot: Snapshot): string[] {
  return partsOf(snapshot).map((part) => part.key);
}

/**
 * The modification time (s since the epoch) of a cached part checked against what the snapshot
 * lists: a fixed instant long past, which anything writing the file afterwards (another process, a
 * tool) replaces with its own time. So a check costs a stat per part on every open, and a part is
 * read through again (hashed) only once something has written it. A change that leaves the time as
 * it is (a disk's silent error) is not seen here, only by a read that fails (`CachedCopyStore`).
 */
const CHECKED_MTIME_S = 946_684_800;

/** Marks a cached part as checked (CHECKED_MTIME_S); a file that cannot be marked is only checked again next time. */
function markChecked(file: string): void {
  try {
    utimesSync(file, new Date(), CHECKED_MTIME_S);
  } catch {
    // Not ours to change (or gone): read through again next time.
  }
}

/**
 * What is wrong with the cached copy of `part` at `root` (a snapshot copy or the parts pool), or
 * undefined when it is whole: present, of the listed size, and checked since it was last written
 * (CHECKED_MTIME_S) or found now to have the SHA-256 the snapshot lists (a part listed without one,
 * written before it was: to open as Parquet).
 */
async function cachedDamage(root: string, part: PartRef): Promise<string | undefined> {
  const file = join(root, ...part.key.split('/'));
  const stat = statSync(file, { throwIfNoEntry: false });
  if (!stat) return 'missing';
  if (stat.size !== part.bytes) return `${stat.size} bytes, the snapshot lists ${part.bytes}`;
  if (stat.mtimeMs === CHECKED_MTIME_S * 1000) return undefined;
  const damage = part.sha256 === undefined ? await parquetDamage(root, part.key) : (await sha256Of(file)) === part.sha256 ? undefined : 'not the SHA-256 the snapshot lists';
  if (damage === undefined) markChecked(file);
  return damage;
}

async function sha256Of(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/**
 * What makes the file of `key` at `root` no Parquet part: no `PAR1` at its start and end, or a
 * footer that does not parse. Undefined when it opens.
 */
async function parquetDamage(root: string, key: string): Promise<string | undefined> {
  const file = join(root, ...key.split('/'));
  const fd = openSync(file, 'r');
  const head = Buffer.alloc(4);
  const tail = Buffer.alloc(4);
  try {
    const size = fstatSync(fd).size;
    readSync(fd, head, 0, 4, 0);
    readSync(fd, tail, 0, 4, Math.max(0, size - 4));
  } finally {
    closeSync(fd);
  }
  if (head.toString('latin1') !== 'PAR1' || tail.toString('latin1') !== 'PAR1') return 'not a Parquet file (no PAR1 at its start and end)';
  // Loaded only here: a part without a SHA-256 is checked by opening it.
  const { openPart } = await import('./parquet.js');
  return openPart(new LocalObjectStore(root), key).then(
    () => undefined,
    (error: unknown) => {
      if (!(error instanceof InvalidInputError)) throw error;
      return 'not a readable Parquet file';
    },
  );
}

/**
 * Puts the part into the snapshot copy at `into`, as a link to the parts pool: the pool's copy when
 * it is whole (`cachedDamage`), else one downloaded now (checked against the size and SHA-256 the
 * snapshot lists; without a SHA-256, as Parquet). What is in the copy already is replaced at once
 * (a link renamed over it): a reader that has it open keeps reading what it had. A download that is
 * still no Parquet part is damaged in the bucket (its size and ETag matched what the server holds):
 * it leaves the cache at once, so that the bucket, once mended, is read again, and the message names
 * the object, not the cache.
 */
async function linkPart(store: S3ObjectStore, pool: string, part: PartRef, into: string): Promise<void> {
  const cached = join(pool, ...part.key.split('/'));
  const target = join(into, ...part.key.split('/'));
  mkdirSync(dirname(target), { recursive: true });
  for (let attempt = 0; ; attempt++) {
    if ((await cachedDamage(pool, part)) !== undefined) {
      await store.download(part.key, cached, part);
      const damage = part.sha256 === undefined ? await parquetDamage(pool, part.key) : undefined;
      if (damage !== undefined) {
        rmSync(cached, { force: true });
        throw new InvalidInputError(`${store.uri}/${part.key}: ${damage}: the dataset is damaged`);
      }
      markChecked(cached);
    }
    const temp = `${target}${TEMP_MARKER}${randomSuffix()}`;
    try {
      linkSync(cached, temp);
      renameSync(temp, target);
      return;
    } catch (error) {
      rmSync(temp, { force: true });
      // Evicted by another command between the check and the link: once more.
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT' || attempt > 0) throw error;
    }
  }
}

/**
 * Makes a cached snapshot copy whole again: a part changed since it was checked (another process
 * wrote it, or it went missing) and not what the snapshot lists is fetched again once (`linkPart`).
 * Only the object store's own bytes, bad too, make the dataset damaged, named by its object.
 */
async function repairCopy(store: S3ObjectStore, pool: string, root: string, dir: string, snapshot: Snapshot): Promise<void> {
  for (const part of partsOf(snapshot)) {
    if ((await cachedDamage(dir, part)) === undefined) continue;
    try {
      dropFromPool(pool, dir, part.key);
      await linkPart(store, pool, part, dir);
    } catch (error) {
      throw cacheFailure(error, `${store.uri}/${part.key}: its copy in the local cache`, root);
    }
  }
}

/** Drops the pool's file of `key` when it is the copy's (a link); when the pool's was replaced meanwhile, that one is checked when next linked. */
function dropFromPool(pool: string, dir: string, key: string): void {
  const [inCopy, inPool] = [dir, pool].map((at) => statSync(join(at, ...key.split('/')), { throwIfNoEntry: false }));
  if (inCopy && inPool && inCopy.ino === inPool.ino && inCopy.dev === inPool.dev) rmSync(join(pool, ...key.split('/')), { force: true });
}

async function buildSnapshotCopy(store: S3ObjectStore, place: S3Place, root: string, dir: string, manifest: Manifest, snapshotBytes: Buffer, snapshot: Snapshot): Promise<void> {
  const pool = partsPoolOf(root, place);
  const temp = join(dirname(dir), `.${snapshot.id}${TEMP_MARKER}${randomSuffix()}`);
  mkdirSync(temp, { recursive: true });
  try {
    for (const part of partsOf(snapshot)) {
      await linkPart(store, pool, part, temp).catch((error: unknown) => {
        throw cacheFailure(error, `${store.uri}/${part.key}: its copy in the local cache`, root);
      });
    }
    mkdirSync(join(temp, 'snapshots'));
    writeFileSync(join(temp, snapshotKey(snapshot.id)), snapshotBytes);
    writeFileSync(join(temp, MANIFEST_KEY), `${JSON.stringify(manifest, null, 2)}\n`);
    publishCopy(temp, dir);
  } finally {
    rmSync(temp, { recursive: true, force: true });
  }
}

/** Renames a finished copy into place; when another command got there first, its copy (the same snapshot) stays and this one is dropped by the caller. */
export function publishCopy(temp: string, dir: string): void {
  try {
    renameSync(temp, dir);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw error;
  }
}

/**
 * Adds a local file to the parts cache as `key` (a writer's upload: no need to fetch it back),
 * checked: its SHA-256 in the snapshot was taken from the bytes as they were written.
 */
export function addToPool(root: string, place: S3Place, key: string, file: string): void {
  const cached = join(partsPoolOf(root, place), ...key.split('/'));
  mkdirSync(dirname(cached), { recursive: true });
  try {
    linkSync(file, cached);
    markChecked(cached);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  }
}

function bytesUnder(path: string, skipLinked: boolean): number {
  let total = 0;
  walkFiles(path, (_rel, _entry, full) => {
    const stat = statSync(full, { throwIfNoEntry: false });
    // A snapshot copy's parts are links into the pool, counted there.
    if (stat && !(skipLinked && stat.nlink > 1)) total += stat.size;
  });
  return total;
}

/** Removes the parts of the pool that no snapshot copy links; returns the bytes freed. */
function dropUnlinkedParts(path: string): number {
  let freed = 0;
  walkFiles(path, (_rel, entry, full) => {
    const stat = statSync(full, { throwIfNoEntry: false });
    if (stat && stat.nlink === 1 && !entry.name.includes(TEMP_MARKER)) {
      rmSync(full, { force: true });
      freed += stat.size;
    }
  });
  return freed;
}

/**
 * Makes `dir` (under `builds/`) a writer's build, named by this process, after removing the builds
 * of writers that were killed (`removeAbandonedBuilds`).
 */
export function startBuild(root: string, dir: string): void {
  removeAbandonedBuilds(root);
  makeOwnedScratch(dir);
}

/**
 * Removes the builds whose writer is gone (lib/owned-scratch.ts), which nothing else ever would:
 * each holds a copy of a snapshot, and its links keep the pool's parts from eviction. Called by
 * every command that opens a snapshot's copy or starts a build.
 */
export function removeAbandonedBuilds(root: string): void {
  const builds = join(root, 'builds');
  let names: string[];
  try {
    names = readdirSync(builds);
  } catch {
    return;
  }
  for (const name of names) removeIfAbandoned(join(builds, name));
}

/** Keeps the cache under `maxBytes` (see the module comment); `keep` is the copy being opened. */
export function evict(root: string, maxBytes: number, keep: string): void {
  const snapshotsDir = join(root, 'snapshots');
  const partsDir = join(root, 'parts');
  if (!existsSync(snapshotsDir)) return;
  const copies = cacheEntries(snapshotsDir, (dir) => bytesUnder(dir, true));
  const total = copies.reduce((n, c) => n + c.bytes, 0) + bytesUnder(partsDir, false);
  evictLeastRecentlyUsed(snapshotsDir, copies, total, maxBytes, keep, () => dropUnlinkedParts(partsDir));
}
