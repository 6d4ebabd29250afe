/**
 * `drop`: permanently removes a dataset, a local directory or an object-store prefix (s3.ts). Before
 * anything is touched a local target must be a directory holding a trajstore manifest and nothing
 * but dataset files, and must not be a filesystem root or the home directory. Removal holds the
 * dataset's writer lock (checking the target again under it: it may have changed since it was
 * confirmed) and first renames the directory to a hidden sibling, the commit point, so an
 * interrupted drop never leaves a half-deleted dataset that still looks like one; the next writer
 * of the path removes what an interrupted deletion left (dataset/recover.ts).
 */
import { accessSync, constants, lstatSync, readdirSync, realpathSync, rmSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, parse, resolve } from 'node:path';
import { InvalidInputError, NotFoundError } from '../../lib/errors.js';
import { INDEX_FILE, MANIFEST_KEY, SYNC_STATE_FILE, GATEWAY_STATE_DIR, readManifest, type Manifest } from '../dataset/layout.js';
import { lockOptions, withWriterLock, type LockWait } from '../dataset/lock.js';
import { scratchPathOf, readableRoot, recoverBeside } from '../dataset/recover.js';
import { LocalObjectStore } from '../dataset/store.js';
import { localPathOf, placeOf, resolveDataset, type ResolveContext } from '../pins/resolve.js';
import type { S3Place } from '../pins/pins.js';
import { TEMP_MARKER, renameDurably } from '../../lib/durable.js';

/** Top-level entries a dataset directory may hold (the layout of layout.ts, plus the index's own files and temporaries). */
const DATASET_ENTRIES = new Set([MANIFEST_KEY, 'snapshots', 'parts', INDEX_FILE, SYNC_STATE_FILE, GATEWAY_STATE_DIR]);
const isDatasetEntry = (name: string): boolean => DATASET_ENTRIES.has(name) || name.startsWith(INDEX_FILE) || name.includes(TEMP_MARKER);

export interface DropTarget {
  /** The local directory, or the object-store dataset's uri. */
  path: string;
  /** Undefined for what an interrupted object-store drop left (s3.ts): objects of a dataset, no manifest. */
  manifest: Manifest | undefined;
  /** An object-store dataset (s3.ts), with the environment its client is made from. */
  remote?: { place: S3Place; env: NodeJS.ProcessEnv };
}

/** Checks that a DATASET argument may be dropped; throws (exit 2 refused, exit 3 missing) and says why otherwise. */
export async function checkDropTarget(rc: ResolveContext, arg: string): Promise<DropTarget> {
  const env = rc.env;
  const location = await resolveDataset(arg, { ...rc, purpose: 'write' });
  if (location.kind === 's3') {
    // Loaded only here: the AWS SDK costs every local command start-up time.
    const { checkS3Drop } = await import('./s3.js');
    const place = placeOf(location);
    return { path: place.uri, manifest: await checkS3Drop(place, env, rc.signal), remote: { place, env } };
  }
  const target = localPathOf(location);
  // A replace killed part-way may have left the dataset aside: put back, it is what is dropped.
  readableRoot(target);
  const stat = statOf(target);
  if (stat.isSymbolicLink()) throw new InvalidInputError(`${target}: is a symbolic link; refusing to drop through it`, { hint: 'name the dataset directory itself' });
  if (!stat.isDirectory()) throw new InvalidInputError(`${target}: is not a directory, so not a dataset; refusing to drop it`);
  const real = realpathSync(target);
  if (real === parse(real).root) throw new InvalidInputError(`${target}: is a filesystem root; refusing to drop it`);
  const homes = [env.HOME, homedir()].filter((h): h is string => !!h).map((h) => {
    try {
      return realpathSync(h);
    } catch {
      return resolve(h);
    }
  });
  if (homes.includes(real)) throw new InvalidInputError(`${target}: is the home directory; refusing to drop it`);
  return { path: real, manifest: await checkContents(target, real) };
}

function statOf(path: string) {
  try {
    return lstatSync(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') throw new NotFoundError(`${path}: no such dataset`);
    throw error;
  }
}

/** The dataset's manifest, after checking that the directory holds a dataset and nothing else. */
async function checkContents(shown: string, real: string): Promise<Manifest> {
  const manifest = await readManifest(new LocalObjectStore(real)).catch((error: unknown) => {
    throw new InvalidInputError(`${shown}: is not a trajstore dataset (${(error as Error).message}); refusing to drop it`);
  });
  if (!manifest) throw new InvalidInputError(`${shown}: is not a trajstore dataset (no ${MANIFEST_KEY}); refusing to drop it`);
  const strangers = readdirSync(real).filter((name) => !isDatasetEntry(name));
  if (strangers.length > 0) {
    const shownNames = strangers.slice(0, 5).join(', ') + (strangers.length > 5 ? `, ... (${strangers.length} in all)` : '');
    throw new InvalidInputError(`${shown}: holds files that are not part of a dataset (${shownNames}); refusing to drop it`, {
      hint: 'move them out first, or remove the directory yourself',
    });
  }
  return manifest;
}

export type DropOptions = LockWait;

/**
 * Refuses a dataset that could be renamed aside but not deleted: a directory in it this user may
 * not change (a read-only copy) would otherwise leave the dataset gone from its path and its files
 * kept under a hidden name, the drop half done.
 */
function assertRemovable(dir: string): void {
  try {
    accessSync(dir, constants.W_OK | constants.X_OK);
  } catch {
    throw new InvalidInputError(`${dir}: permission denied: its files cannot be deleted, so nothing was dropped`);
  }
  for (const entry of readdirSync(dir, { withFileTypes: true })) if (entry.isDirectory()) assertRemovable(join(dir, entry.name));
}

/** Removes a checked dataset under its writer lock: renamed aside (the commit point), then deleted. */
export async function dropDataset(target: DropTarget, options: DropOptions = {}): Promise<void> {
  if (target.remote) {
    const { dropS3Dataset } = await import('./s3.js');
    return dropS3Dataset(target.remote.place, target.remote.env, options.signal);
  }
  await withWriterLock(target.path, lockOptions('drop', options), async () => {
    for (const note of recoverBeside(target.path)) options.log?.info(note);
    if (!statOf(target.path).isDirectory()) throw new InvalidInputError(`${target.path}: is no longer a directory; refusing to drop it`);
    await checkContents(target.path, target.path);
    assertRemovable(target.path);
    const aside = scratchPathOf(target.path);
    renameDurably(target.path, aside);
    rmSync(aside, { recursive: true, force: true });
  });
}
