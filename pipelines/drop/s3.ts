/**
 * `drop s3://bucket/prefix`: removes an object-store dataset. A whole bucket is refused, and so is a
 * prefix that holds anything but a dataset's keys (`trajstore.json`, `snapshots/`, `parts/`). The
 * manifest goes first, the commit point: from then on the prefix is no dataset to any reader (one
 * already reading keeps its cached copy of the snapshot), and a drop interrupted after it leaves only
 * unreferenced objects, which a second drop, or an import there, sees as no dataset.
 */
import { InvalidInputError, NotFoundError } from '../../lib/errors.js';
import { MANIFEST_KEY, type Manifest } from '../dataset/layout.js';
import { currentManifest } from '../dataset/s3-cache.js';
import { S3ObjectStore } from '../dataset/s3-store.js';
import type { S3Place } from '../pins/pins.js';

const isDatasetKey = (key: string): boolean => key === MANIFEST_KEY || key.startsWith('snapshots/') || key.startsWith('parts/');

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

/** The dataset's manifest and keys, after checking that the prefix holds a dataset and nothing else. */
async function checkPrefix(store: S3ObjectStore): Promise<{ manifest: Manifest; keys: string[] }> {
  const current = await currentManifest(store);
  const keys = await store.list('');
  if (!current) {
    if (keys.length === 0) throw new NotFoundError(`${store.uri}: no such dataset`);
    throw new InvalidInputError(`${store.uri}: is not a trajstore dataset (no ${MANIFEST_KEY}); refusing to drop it`);
  }
  const strangers = keys.filter((key) => !isDatasetKey(key));
  if (strangers.length > 0) {
    throw new InvalidInputError(`${store.uri}: holds objects that are not part of a dataset (${strangers.slice(0, 5).join(', ')}${strangers.length > 5 ? ', ...' : ''}); refusing to drop it`);
  }
  return { manifest: current.manifest, keys };
}

export function checkS3Drop(place: S3Place, env: NodeJS.ProcessEnv, signal?: AbortSignal): Promise<Manifest> {
  return withStore(place, env, signal, async (store) => (await checkPrefix(store)).manifest);
}

export function dropS3Dataset(place: S3Place, env: NodeJS.ProcessEnv, signal?: AbortSignal): Promise<void> {
  return withStore(place, env, signal, async (store) => {
    const { keys } = await checkPrefix(store);
    await store.delete(MANIFEST_KEY);
    await store.deleteMany(keys.filter((key) => key !== MANIFEST_KEY));
  });
}
