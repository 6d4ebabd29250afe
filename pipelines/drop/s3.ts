/**
 * `drop s3://bucket/prefix`: removes an object-store dataset. A whole bucket is refused, and so is a
 * prefix that holds anything but a dataset's keys (`trajstore.json`, `snapshots/`, `parts/`). The
 * commit point comes first: the manifest is replaced by a drop marker, only while it is the version
 * drop read (`commitDrop`); from then on the prefix is no dataset to any reader (one already reading
 * keeps its cached copy of the snapshot) and no writer commits there. Then every other key goes, the
 * marker last. A drop interrupted or failing after its commit leaves the marker, and a second drop
 * finishes it; objects without a manifest (an older drop's leftovers) it removes once no import can
 * be writing them (checkLeftovers).
 */
import { ConflictError, InvalidInputError, NotFoundError, ToolError, UnavailableError } from '../../lib/errors.js';
import { COMPACTION_DEFAULTS } from '../dataset/defaults.js';
import { DatasetBeingDropped, dropMarker, isDropMarker, isPartKey, isProbeKey, MANIFEST_KEY, parseSnapshot, partWrittenAt, snapshotIdOfKey, type Manifest } from '../dataset/layout.js';
import { currentManifest } from '../dataset/s3-cache.js';
import { S3ObjectStore, shownKey } from '../dataset/s3-store.js';
import type { S3Place } from '../pins/pins.js';

/**
 * Keys a dataset's writers make: the manifest, `snapshots/<id>.json`, `parts/<relation>/<name>.parquet`,
 * and a probe of the server's conditional writes that a killed writer left (layout.ts `probeKey`).
 * Anything else under `snapshots/` or `parts/` (a `..` segment, a NUL, a name past any a writer
 * makes) is someone else's object, and a key a server resolving dot segments would take for one
 * outside the prefix.
 */
const isDatasetKey = (key: string): boolean => key === MANIFEST_KEY || snapshotIdOfKey(key) !== undefined || isPartKey(key) || isProbeKey(key);

/** `signal`: the command's; it stops any request at once (S3ObjectStore). */
async function withStore<T>(place: S3Place, env: NodeJS.ProcessEnv, signal: AbortSignal | undefined, run: (store: S3ObjectStore) => Promise<T>): Promise<T> {
  if (place.prefix === '') throw new InvalidInputError(`${place.uri}: is a whole bucket; refusing to drop it`, { hint: 'name the dataset\'s prefix: s3://bucket/prefix' });
  const store = new S3ObjectStore(place, env, signal);
  try {
    return await run(store);
  } finally {
    store.close();
  }
}

/**
 * The dataset's manifest and keys, after checking that the prefix holds a dataset and nothing else;
 * no manifest when it holds only what a drop cut short left (leftovers), `dropping` when that drop
 * had committed (its marker is the manifest).
 */
async function checkPrefix(store: S3ObjectStore): Promise<{ current: { manifest: Manifest; etag: string } | undefined; dropping: boolean; keys: string[] }> {
  let dropping = false;
  const current = await currentManifest(store).catch((error: unknown) => {
    if (!(error instanceof DatasetBeingDropped)) throw error;
    dropping = true;
    return undefined;
  });
  const keys = await store.list('');
  if (!current && keys.length === 0) throw new NotFoundError(`${store.uri}: no such dataset`);
  // The listing is what the drop deletes: one that misses the manifest just read misses more.
  if (current && !keys.includes(MANIFEST_KEY)) {
    throw new UnavailableError(`${store.uri}: the object store's listing does not show the ${MANIFEST_KEY} it serves; refusing to drop from it`, { hint: 'try again; the server does not list what it holds' });
  }
  const strangers = keys.filter((key) => !isDatasetKey(key));
  if (strangers.length > 0) {
    const what = current ? 'holds objects that are not part of a dataset' : `is not a trajstore dataset (no ${MANIFEST_KEY})`;
    throw new InvalidInputError(`${store.uri}: ${what} (${strangers.slice(0, 5).map(shownKey).join(', ')}${strangers.length > 5 ? ', ...' : ''}); refusing to drop it`);
  }
  // Behind a marker no writer commits: what is there is the committed drop's to finish.
  if (!current && !dropping) await checkLeftovers(store, keys);
  return { current, dropping, keys };
}

/**
 * A prefix holding a dataset's keys but no manifest: what a drop cut short after its commit point
 * left, or the objects of an import creating a dataset there, whose manifest comes last. Objects
 * written within the reclamation grace may be the import's, and stay (exit 4 says until when);
 * older ones are a drop's leftovers, which this drop finishes.
 */
async function checkLeftovers(store: S3ObjectStore, keys: string[]): Promise<void> {
  const written = keys.map(partWrittenAt).filter((at): at is number => at !== undefined);
  for (const key of keys.filter((k) => snapshotIdOfKey(k) !== undefined)) {
    const created = createdAt(store.uri, key, await store.get(key));
    if (created !== undefined) written.push(created);
  }
  const newest = Math.max(-Infinity, ...written);
  const until = newest + COMPACTION_DEFAULTS.graceMs;
  if (until > Date.now()) {
    throw new ConflictError(`${store.uri}: holds ${keys.length} objects of a dataset but no ${MANIFEST_KEY}, the newest written at ${new Date(newest).toISOString()}: an import may be creating a dataset there`, {
      hint: `what an interrupted drop left is removed by a drop after ${new Date(until).toISOString()}, or replaced by an import there`,
    });
  }
}

/** When a snapshot descriptor says it was made; undefined for a torn one (its key's age is then unknown). */
function createdAt(uri: string, key: string, bytes: Buffer | undefined): number | undefined {
  const id = snapshotIdOfKey(key);
  if (!bytes || !id) return undefined;
  try {
    const at = Date.parse(parseSnapshot(uri, id, bytes).created_at);
    return Number.isFinite(at) ? at : undefined;
  } catch {
    return undefined;
  }
}

export function checkS3Drop(place: S3Place, env: NodeJS.ProcessEnv, signal?: AbortSignal): Promise<Manifest | undefined> {
  return withStore(place, env, signal, async (store) => (await checkPrefix(store)).current?.manifest);
}

export function dropS3Dataset(place: S3Place, env: NodeJS.ProcessEnv, signal?: AbortSignal): Promise<void> {
  return withStore(place, env, signal, async (store) => {
    const { current, dropping, keys } = await checkPrefix(store);
    const marker = current ? await commitDrop(store, current.etag) : undefined;
    // Leftovers of an older drop, whose commit point was deleting the manifest.
    if (!current && !dropping && keys.includes(MANIFEST_KEY)) await store.delete(MANIFEST_KEY);
    await store.deleteMany(keys.filter((key) => key !== MANIFEST_KEY)).catch((error: unknown) => {
      if (!(error instanceof ToolError)) throw error;
      // Past the commit point: what is left is no dataset, and a drop run again is how it goes.
      throw new ToolError(error.exitCode, error.summary, { hint: 'the dataset is dropped but objects of it are left: run drop again to remove them' });
    });
    // Last, the marker (this drop's own, or the one a drop cut short left). Nothing replaces a marker
    // (module comment), so a server that ignores the condition deletes the same.
    if (marker?.etag) await store.deleteIf(MANIFEST_KEY, marker.etag);
    else if (marker || dropping) await store.delete(MANIFEST_KEY);
  });
}

/**
 * Replaces the manifest drop read by a drop marker, the commit point, only while it is that version
 * (`If-Match`, which servers honour on PUT where some ignore it on DELETE: MinIO): an append that
 * committed since (its new manifest names parts the listing missed) would otherwise lose its runs
 * without a word, the append having said it committed. A 412 that answers the SDK's retry of this
 * put (its first answer lost) finds this drop's marker there. A manifest gone (404), or another
 * drop's marker, says another drop committed on the same keys: this drop goes on deleting them and
 * leaves the marker to that drop. One that answers no ETag leaves no version to check.
 * Returns this drop's marker, with its ETag, or undefined when the marker there is not its own.
 */
async function commitDrop(store: S3ObjectStore, etag: string): Promise<{ etag: string } | undefined> {
  const marker = dropMarker();
  try {
    return { etag: etag === '' ? (await store.put(MANIFEST_KEY, marker), '') : await store.putIf(MANIFEST_KEY, marker, { ifMatch: etag }) };
  } catch (error) {
    if (error instanceof NotFoundError) return undefined;
    if (!(error instanceof ConflictError)) throw error;
    const now = await store.getVersioned(MANIFEST_KEY);
    if (now?.bytes.toString('utf8') === marker) return { etag: now.etag };
    if (now && isDropMarker(now.bytes)) return undefined;
    throw new ConflictError(`${store.uri}: another writer committed to the dataset after drop read it; nothing was dropped`, { hint: 'run drop again to drop the dataset as it is now' });
  }
}
