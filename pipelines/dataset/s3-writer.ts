/**
 * Writing a dataset at `s3://bucket/prefix`: the dataset is written locally by the local writer
 * (writer.ts), in scratch under the cache (s3-cache.ts), then published:
 *
 * 1. the new parts are uploaded (multipart past the threshold), under fresh names no other writer uses;
 * 2. the new snapshot descriptor is put (immutable, named by its content's hash);
 * 3. the manifest is put conditionally: `If-None-Match: *` for a create, `If-Match: <ETag of the
 *    manifest the append started from>` for an append. This put is the commit point, and it is the
 *    lock: of two writers on two machines that started from the same manifest exactly one wins; the
 *    other gets 412 and exits 4 (ConflictError), having changed nothing anyone reads: its parts and
 *    snapshot are unreferenced, to be reclaimed after a grace period by the next writer. There is no
 *    writer lock to wait for (lock.ts locks a local directory's writers only); a loser runs again.
 *    A 412 can also answer the SDK's retry of a put that succeeded but whose answer was lost (the
 *    connection cut): so on a 412 the manifest is read back, and one that names this writer's
 *    snapshot (its id is a hash of its content, parts included), or a snapshot descending from it
 *    (another writer committed on top meanwhile), shows this writer's commit. An append that finds
 *    no manifest to match (404), or a drop's marker (layout.ts `dropMarker`), the dataset having
 *    been dropped meanwhile, removes what it uploaded.
 *
 * Until the manifest put, readers (and a crash, or the server going away part-way) see the previous
 * snapshot. After it, the local build becomes the cache's copy of the new snapshot, index and all.
 * A server that ignores conditional writes would let the last writer win: it is refused before
 * anything is uploaded (s3-conditions.ts), unless the user says there is one writer.
 *
 * `--mode replace` of an existing object-store dataset is refused (spec/trajstore.md, "import and
 * export rules"): there is no rename to swap a prefix atomically. Of no dataset it is a create.
 */
import { copyFileSync, existsSync, linkSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { ConflictError, InvalidInputError, NotFoundError, ToolError } from '../../lib/errors.js';
import { randomSuffix } from '../../lib/durable.js';
import type { S3Place } from '../pins/pins.js';
import { DatasetBeingDropped, INDEX_FILE, MANIFEST_KEY, readManifest, readSnapshot, snapshotKey, type Manifest, type Snapshot } from './layout.js';
import type { Row } from './parquet.js';
import type { Relation } from './relations.js';
import { addToPool, cacheFailure, currentManifest, localCopyOf, partKeysOf, publishCopy, s3CacheRoot, snapshotCopyOf, startBuild } from './s3-cache.js';
import { S3ObjectStore } from './s3-store.js';
import { DatasetWriter, type DatasetSink, type DatasetWriterOptions } from './writer.js';
import { reclaimProbes, reclaimSuperseded } from './compaction.js';
import { COMPACTION_DEFAULTS } from './defaults.js';

/** How far down the parents a refused commit looks for its own snapshot: commits landing meanwhile, one per writer racing it. */
const MAX_PARENTS_WALKED = 64;

export interface S3WriterOptions extends Omit<DatasetWriterOptions, 'path'> {
  remote: S3Place;
  env: NodeJS.ProcessEnv;
}

export class S3DatasetWriter implements DatasetSink {
  private constructor(
    private readonly options: S3WriterOptions,
    private readonly store: S3ObjectStore,
    /** Scratch of this writer, removed at the end. */
    private readonly scratch: string,
    /** The local dataset being written (inside `scratch`). */
    private readonly build: string,
    private readonly inner: DatasetWriter,
    /** The manifest the append started from, with its version; undefined for a create. */
    private readonly previous: { manifest: Manifest; etag: string; snapshot: Snapshot } | undefined,
  ) {}

  static async begin(options: S3WriterOptions): Promise<S3DatasetWriter> {
    const { remote, mode } = options;
    if (remote.prefix === '') throw new InvalidInputError(`${remote.uri}: a dataset needs a prefix inside the bucket (s3://bucket/prefix)`);
    const store = new S3ObjectStore(remote, options.env, options.signal);
    const root = s3CacheRoot(options.env);
    const scratch = join(root, 'builds', randomSuffix());
    const build = join(scratch, 'dataset');
    try {
      startBuild(root, scratch);
      const current = await currentManifest(store).catch((error: unknown) => {
        // A create there would fail at its commit, the marker being an object.
        throw error instanceof DatasetBeingDropped && mode !== 'append' ? new ConflictError(error.summary, error.hint === undefined ? {} : { hint: error.hint }) : error;
      });
      if (mode === 'append') {
        if (!current) throw new NotFoundError(`${remote.uri}: no dataset to append to`, { hint: 'use --mode create for a new dataset' });
        if (current.manifest.kind !== options.kind) throw new InvalidInputError(`${remote.uri}: is a ${current.manifest.kind} dataset; --mode append needs a ${options.kind} dataset`);
      } else if (current) {
        if (mode === 'create') throw new ConflictError(`${remote.uri}: already exists`, { hint: 'choose a new prefix, or use --mode append' });
        throw new InvalidInputError(`${remote.uri}: an existing object-store dataset cannot be replaced in place`, {
          hint: 'import into a new prefix, then drop the old one (trajstore drop URI)',
        });
      }
      // The commit is a conditional put: a server that would ignore it is refused before anything is fetched or uploaded.
      await store.requireConditionalWrites();
      let previous: { manifest: Manifest; etag: string; snapshot: Snapshot } | undefined;
      if (mode === 'append' && current) {
        // The copy of the snapshot this append starts from; its manifest version is what the commit must still find.
        const local = await localCopyOf(store, remote, options.env, current);
        previous = local;
        copySnapshot(local.dir, build, local.snapshot);
      }
      const inner = await DatasetWriter.begin({ ...options, path: build, mode: mode === 'append' ? 'append' : 'create', shownAs: `${remote.uri}: its build in the local cache` });
      return new S3DatasetWriter(options, store, scratch, build, inner, previous);
    } catch (error) {
      rmSync(scratch, { recursive: true, force: true });
      store.close();
      throw cacheFailure(error, `${remote.uri}: its build in the local cache`, root);
    }
  }

  existingDocumentIds(): Set<string> {
    return this.inner.existingDocumentIds();
  }

  retireSources(paths: readonly string[]): Promise<void> {
    return this.inner.retireSources(paths);
  }

  add(relation: Relation, rows: readonly Row[]): Promise<void> {
    return this.inner.add(relation, rows);
  }

  /**
   * Whether the store took the commit of `id` after all (its put refused, perhaps a retry of its own
   * whose answer was lost): the current snapshot is it, or descends from it, another writer having
   * committed on top meanwhile. The walk down the parents stops at this writer's own base, which
   * another commit on it would have come from instead.
   */
  private async tookCommit(id: string): Promise<boolean> {
    let current = (await readManifest(this.store))?.snapshot_id;
    for (let steps = 0; current !== undefined && steps < MAX_PARENTS_WALKED; steps++) {
      if (current === id) return true;
      if (current === this.previous?.snapshot.id) return false;
      // A descriptor gone (reclaimed) ends the walk; a stop or an outage is what it is.
      const snapshot = await readSnapshot(this.store, current).catch((error: unknown) => {
        if (error instanceof NotFoundError) return undefined;
        throw error;
      });
      current = snapshot?.parent ?? undefined;
    }
    return false;
  }

  /**
   * The error of an append whose manifest was gone at its commit (If-Match on no object: 404): the
   * dataset was dropped meanwhile. What this writer uploaded is its own (fresh part names, a snapshot
   * no manifest names) and goes, so the dropped prefix is left empty rather than holding objects that
   * no drop takes (they are no dataset).
   */
  private async dropped(snapshotId: string, uploaded: readonly string[]): Promise<NotFoundError> {
    const { remote } = this.options;
    await this.store.deleteMany([...uploaded, snapshotKey(snapshotId)]).catch((error: unknown) =>
      this.options.log?.warn(`${remote.uri}: could not remove what this import uploaded: ${(error as Error).message}`),
    );
    return new NotFoundError(`${remote.uri}: the dataset was dropped while this import ran; nothing was committed`, { hint: 'use --mode create to make it again' });
  }

  /** Writes the dataset locally, uploads what is new and commits by the conditional manifest put (see the module comment). */
  async commit(): Promise<Snapshot> {
    const snapshot = await this.inner.commit();
    const { remote } = this.options;
    const before = new Set(this.previous ? partKeysOf(this.previous.snapshot) : []);
    const added = partKeysOf(snapshot).filter((key) => !before.has(key));
    for (const key of added) await this.store.upload(key, join(this.build, ...key.split('/')));
    this.options.signal?.throwIfAborted();
    await this.store.put(snapshotKey(snapshot.id), readFileSync(join(this.build, snapshotKey(snapshot.id))));
    const manifest = readFileSync(join(this.build, MANIFEST_KEY));
    try {
      await this.store.putIf(MANIFEST_KEY, manifest, this.previous ? { ifMatch: this.previous.etag } : { ifNoneMatch: '*' });
    } catch (error) {
      if (this.options.signal?.aborted) {
        // Stopped while the put was on its way: the server may have taken it before the cut.
        this.options.log?.warn(`${remote.uri}: stopped while committing snapshot ${snapshot.id}; the server may have taken the commit: check (trajstore list ${remote.uri}) before importing again`);
        throw error;
      }
      if (error instanceof NotFoundError && this.previous) throw await this.dropped(snapshot.id, added);
      if (!(error instanceof ConflictError)) throw error;
      // Refused, perhaps by this writer's own put: a retry of one whose answer was lost (module comment);
      // or by a drop's marker, the drop having committed first.
      const took = await this.tookCommit(snapshot.id).catch(async (failure: unknown) => {
        throw failure instanceof DatasetBeingDropped ? await this.dropped(snapshot.id, added) : failure;
      });
      if (!took) {
        throw new ConflictError(
          this.previous
            ? `${remote.uri}: another writer committed to the dataset after this import started from snapshot ${this.previous.snapshot.id}; nothing was committed`
            : `${remote.uri}: another writer created the dataset meanwhile; nothing was committed`,
          { hint: `run the import again (its ${added.length} uploaded part(s) are unreferenced and reclaimed later)` },
        );
      }
    }
    // Committed. What earlier losers of a race and superseded snapshots left, and the probes of
    // killed writers, are reclaimed once past the grace period (which also covers a writer still
    // uploading: its parts are younger). The commit stands whatever happens here; anything left
    // over is reclaimed by the next writer.
    await reclaimSuperseded(this.store, snapshot.id, COMPACTION_DEFAULTS.graceMs)
      .then(() => reclaimProbes(this.store, COMPACTION_DEFAULTS.graceMs))
      .catch((error: unknown) =>
        this.options.log?.warn(`${remote.uri}: committed snapshot ${snapshot.id}, but reclaiming superseded objects failed (the next writer tries again): ${(error as Error).message}`),
      );
    // The local build is the cache's copy of the new snapshot. The commit stands whatever happens
    // here too: a cache that cannot keep it only means that a reader fetches it.
    const root = s3CacheRoot(this.options.env);
    try {
      for (const key of partKeysOf(snapshot)) addToPool(root, remote, key, join(this.build, ...key.split('/')));
      mkdirSync(join(root, 'snapshots'), { recursive: true });
      publishCopy(this.build, snapshotCopyOf(root, remote, snapshot.id));
    } catch (error) {
      const failure = cacheFailure(error, `${remote.uri}: committed snapshot ${snapshot.id}; keeping its copy in the local cache failed`, root) as Error;
      this.options.log?.warn(failure instanceof ToolError && failure.hint ? `${failure.message} (${failure.hint})` : failure.message);
    }
    this.finish();
    return snapshot;
  }

  async abort(): Promise<void> {
    try {
      await this.inner.abort();
    } finally {
      this.finish();
    }
  }

  private finish(): void {
    rmSync(this.scratch, { recursive: true, force: true });
    this.store.close();
  }
}

/** A writable copy of a cached snapshot: its parts linked (never written to), its manifest, descriptor and index copied. */
function copySnapshot(from: string, to: string, snapshot: Snapshot): void {
  for (const key of partKeysOf(snapshot)) {
    const target = join(to, ...key.split('/'));
    mkdirSync(join(target, '..'), { recursive: true });
    linkSync(join(from, ...key.split('/')), target);
  }
  mkdirSync(join(to, 'snapshots'), { recursive: true });
  for (const key of [MANIFEST_KEY, snapshotKey(snapshot.id), INDEX_FILE]) if (existsSync(join(from, key))) copyFileSync(join(from, key), join(to, key));
}
