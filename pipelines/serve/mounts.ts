/**
 * The datasets `serve` mounts, each opened read-only and kept open between requests. Every request
 * reads the dataset's manifest first, where the dataset lives (an object-store dataset's in the
 * store, not in the local copy being read): when a writer has committed a new snapshot since, the mount
 * opens that snapshot for this and later requests, and closes the old one once the requests still
 * reading it are done. So one request sees one snapshot, and new snapshots need no restart.
 *
 * The same happens when the files the open snapshot is read from are gone (an object-store dataset's
 * copy removed from the local cache): the next request opens it again rather than fail.
 *
 * Opening never writes to the dataset (`neverWrite`): a missing or stale index is rebuilt in the cache.
 */
import { InvalidInputError, NotFoundError, UnavailableError } from '../../lib/errors.js';
import { openDatasetArg, type OpenDataset } from '../dataset/open.js';
import type { ResolveContext } from '../pins/resolve.js';
import { MOUNT_NAME } from '../search/sql/connection.js';
import { RESERVED_SERVE_NAMES } from './names.js';

export interface MountSpec {
  name: string;
  /** A DATASET argument: a path, a pin, or undefined for the default dataset. */
  dataset: string | undefined;
}

interface Handle {
  dataset: OpenDataset;
  users: number;
  retired: boolean;
}

class Mount {
  private current: Handle | undefined;
  private opening: Promise<Handle> | undefined;

  constructor(
    readonly spec: MountSpec,
    private readonly rc: ResolveContext,
  ) {}

  /** The handle of the dataset's current snapshot, opening it when the snapshot changed. */
  async acquire(): Promise<Handle> {
    const current = this.current;
    if (current) {
      // A store that is unavailable (an object store past its retries) fails the request: opening
      // the dataset again would read the manifest through another round of retries, and fail the
      // same way. Anything else wrong with the manifest is for the opening to tell.
      const id = await current.dataset.currentSnapshotId().catch((error: unknown) => {
        if (error instanceof UnavailableError) throw error;
        return undefined;
      });
      // A copy gone from the cache (evicted, or the cache deleted) is fetched again, as on a new snapshot.
      if (id === current.dataset.snapshotId && current.dataset.onDisk()) {
        current.users++;
        return current;
      }
    }
    this.opening ??= this.open().finally(() => (this.opening = undefined));
    const handle = await this.opening;
    handle.users++;
    return handle;
  }

  release(handle: Handle): void {
    handle.users--;
    if (handle.retired && handle.users === 0) handle.dataset.close();
  }

  /** Forgets the open snapshot: the next request opens the dataset again (`reload` on the control listener). */
  reload(): void {
    if (this.current) this.retire(this.current);
    this.current = undefined;
  }

  close(): void {
    this.reload();
  }

  private async open(): Promise<Handle> {
    const dataset = await openDatasetArg(this.rc, this.spec.dataset, { neverWrite: true });
    const handle: Handle = { dataset, users: 0, retired: false };
    if (this.current) this.retire(this.current);
    this.current = handle;
    return handle;
  }

  private retire(handle: Handle): void {
    handle.retired = true;
    if (handle.users === 0) handle.dataset.close();
  }
}

/** Checks the mount list: valid, distinct names, none reserved. */
function checkMounts(specs: readonly MountSpec[]): void {
  const seen = new Set<string>();
  for (const { name } of specs) {
    if (!MOUNT_NAME.test(name)) throw new InvalidInputError(`invalid mount name ${JSON.stringify(name)}`, { hint: 'a mount name is a letter or _ then letters, digits or _ (at most 64)' });
    if (RESERVED_SERVE_NAMES.has(name)) throw new InvalidInputError(`the mount name ${JSON.stringify(name)} is reserved`, { hint: 'choose another NAME in NAME=DATASET' });
    if (seen.has(name)) throw new InvalidInputError(`the mount name ${JSON.stringify(name)} is given twice`);
    seen.add(name);
  }
}

export class Mounts {
  private readonly mounts: Map<string, Mount>;

  constructor(specs: readonly MountSpec[], rc: ResolveContext) {
    checkMounts(specs);
    this.mounts = new Map(specs.map((spec) => [spec.name, new Mount(spec, rc)]));
  }

  names(): string[] {
    return [...this.mounts.keys()];
  }

  has(name: string): boolean {
    return this.mounts.has(name);
  }

  /** Runs `work` on the current snapshot of mount `name`; the snapshot stays open until `work` settles. */
  async use<T>(name: string, work: (dataset: OpenDataset) => T | Promise<T>): Promise<T> {
    const mount = this.mounts.get(name);
    if (!mount) throw new NotFoundError(`no mount named ${JSON.stringify(name)}`, { hint: `mounts: ${this.names().join(', ')}` });
    const handle = await mount.acquire();
    try {
      return await work(handle.dataset);
    } finally {
      mount.release(handle);
    }
  }

  /** Forgets the open snapshot of every mount, or of the one named: the next request opens it again. */
  reload(name?: string): void {
    for (const [n, mount] of this.mounts) if (name === undefined || n === name) mount.reload();
  }

  close(): void {
    for (const mount of this.mounts.values()) mount.close();
  }
}
