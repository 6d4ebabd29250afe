/**
 * The dataset layout (ARCHITECTURE.md, trajstore):
 *   trajstore.json                     the manifest: kind, layout version, current snapshot id
 *   snapshots/<id>.json                immutable snapshot descriptors: the parts of each relation
 *   parts/<relation>/<part>.parquet    immutable Parquet parts, the truth
 *   index.sqlite                       derived SQLite index (local datasets), rebuilt when missing or stale
 *   sync-state.json                    what `sync` last converted (local datasets it writes; sync/state.ts)
 *   gateway/                           the state of `serve --gateway` writing this dataset (its event log;
 *                                      serve/gateway/gateway.ts), unless `--gateway-state` put it elsewhere
 *
 * A snapshot id is the first 20 hex digits of the SHA-256 of the descriptor's canonical JSON
 * (without the id): it never changes once written and names exactly one set of parts.
 */
import { randomSuffix } from '../../lib/durable.js';
import { InvalidInputError, NotFoundError } from '../../lib/errors.js';
import type { Relation } from './relations.js';
import type { ObjectStore } from './store.js';

export const MANIFEST_KEY = 'trajstore.json';
/**
 * 2: `runs.storyline_json` (the whole document again) became `runs.document_json` (the document
 * without its turns) plus `steps.turn_json`.
 * 3: an observation result's content that is its call's `tool_calls.result_json` is stored there only
 * (`steps.observation_json` holds a marker in its place, import/rows.ts).
 * 4: `steps.cache_write_tokens`, `steps.response_id` and `runs.cache_write_tokens` (usage accounting).
 * 5: the content store: strings of 512 characters and more kept once in `contents` and referred to
 * (contents.ts); parts compressed with zstd. Each part says whether it refers to the store.
 * Datasets of versions 2 to 4 read as they are (their parts lack the new columns: NULL; their
 * values are whole), and an append to them is written at the current version. Compact record stores did not change, so they
 * open at any version; a version 1 Storyline dataset is refused with a hint to import it again.
 */
export const LAYOUT_VERSION = 5;
/** The layout versions this build reads, by kind. */
const READABLE_VERSIONS: Record<DatasetKind, readonly number[]> = { storyline: [2, 3, 4, 5], compact: [1, 2, 3, 4, 5] };
export const INDEX_FILE = 'index.sqlite';
export const SYNC_STATE_FILE = 'sync-state.json';
/** The directory of the gateway's state, in `--gateway-state` (by default the dataset's own directory). */
export const GATEWAY_STATE_DIR = 'gateway';
export type DatasetKind = 'storyline' | 'compact';

export interface Manifest {
  kind: DatasetKind;
  layout_version: number;
  snapshot_id: string;
  updated_at: string;
}

export interface PartRef {
  /** Key of the part in the store: `parts/<relation>/<name>.parquet`. */
  key: string;
  /** Rows the part holds (retired ones included). */
  rows: number;
  bytes: number;
  /**
   * The SHA-256 of the part's bytes (hex), as its writer wrote them: what a download (whose ETag is
   * no digest of the bytes when the part went up in parts) and a cached copy are checked against.
   * Optional, without a new layout version: snapshots written before it lack it and read as they did
   * (their parts checked by size and as Parquet), and a build that knows no such field ignores it.
   */
  sha256?: string;
  /**
   * Values of the relation's RETIRE_KEY (relations.ts) whose rows in this part are not in the
   * snapshot: a source converted again replaces its earlier runs (sync), without rewriting the part.
   * The snapshot that lists the part first has none; compaction drops the rows for good.
   */
  retired?: string[];
}

/** A user column of a compact record store (`--column NAME=JSON_PATH`). */
export interface CompactColumn {
  name: string;
  path: string;
}

export interface Snapshot {
  id: string;
  kind: DatasetKind;
  layout_version: number;
  parent: string | null;
  created_at: string;
  /** Parts per relation, in row order. */
  relations: Partial<Record<Relation, PartRef[]>>;
  /** Row counts per relation (retired rows not counted). */
  rows: Partial<Record<Relation, number>>;
  /** Compact stores: the id/timestamp paths and the user JSON columns, in column order. */
  compact?: { id_path: string; timestamp_path: string; columns: CompactColumn[] };
}

export const snapshotKey = (id: string): string => `snapshots/${id}.json`;
/** What snapshotIdOf makes: 20 hex digits. */
const SNAPSHOT_ID = /^[0-9a-f]{20}$/;

/** The id of the snapshot descriptor `key` is (`snapshots/<id>.json`); undefined for any other key. */
export function snapshotIdOfKey(key: string): string | undefined {
  const id = /^snapshots\/(.+)\.json$/.exec(key)?.[1];
  return id !== undefined && SNAPSHOT_ID.test(id) ? id : undefined;
}

/**
 * The stamp that starts the names of the parts one writer writes (`<stamp>-<sequence>`): the time
 * in base 36 and a random tag. Reclamation (compaction.ts) reads a part's age from it, which works
 * for any store (an object store's listing need not say when an object was written).
 */
export async function newPartStamp(): Promise<string> {
  const { randomBytes } = await import('node:crypto');
  return `${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
}

/** When the part at `key` was started (ms since the epoch), from its name; undefined for a name without a stamp. */
export function partWrittenAt(key: string): number | undefined {
  const name = key.slice(key.lastIndexOf('/') + 1);
  const m = /^([0-9a-z]{6,10})-[0-9a-f]{8}-/.exec(name);
  return m ? parseInt(m[1] as string, 36) : undefined;
}

/**
 * Where a writer on an object store checks that the server honours conditional writes
 * (s3-store.ts `probeConditionalWrites`): `.trajstore-probes/<stamp>-conditional-writes` under the
 * prefix it writes, a key no reader takes for part of a dataset. The probe deletes it within
 * seconds; one a killed writer left is removed by the next commit once past the grace period (its
 * age is in its name, as a part's: compaction.ts `reclaimProbes`) and by drop.
 */
export const PROBES_PREFIX = '.trajstore-probes/';
export const probeKey = (stamp: string): string => `${PROBES_PREFIX}${stamp}-conditional-writes`;
export const isProbeKey = (key: string): boolean => /^\.trajstore-probes\/[0-9a-z]{6,10}-[0-9a-f]{8}-conditional-writes$/.test(key);

/** JSON with object keys sorted, so equal descriptors hash equally. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

async function snapshotIdOf(descriptor: Omit<Snapshot, 'id'>): Promise<string> {
  // Loaded here: only writers hash, and every read command goes through this module.
  const { createHash } = await import('node:crypto');
  return createHash('sha256').update(canonical(descriptor)).digest('hex').slice(0, 20);
}

const DROP_MARKER_KIND = 'dropping';

/**
 * What `drop s3://...` puts in place of the manifest as its commit point (drop/s3.ts): a put on
 * `If-Match` is honoured where a delete on `If-Match` may not be (MinIO ignores that one), so an
 * append committing meanwhile makes one of the two fail instead of losing its runs. No writer
 * replaces it (an append needs a manifest, a create no object at all); `parseManifest` reads it as
 * a dataset being dropped, and an older trajstore as no manifest it knows.
 */
export function dropMarker(): string {
  // The random part makes the marker's ETag this drop's alone, for the conditional delete that ends it.
  return `${JSON.stringify({ kind: DROP_MARKER_KIND, dropped_at: new Date().toISOString(), drop: randomSuffix() }, null, 2)}\n`;
}

/** Whether `value` (what the manifest's key holds, parsed) is a drop's marker. */
const isDropMarkerValue = (value: unknown): boolean => (value as { kind?: unknown } | null)?.kind === DROP_MARKER_KIND;

/** Whether `bytes` (what the manifest's key holds) are a drop's marker. */
export function isDropMarker(bytes: Buffer): boolean {
  try {
    return isDropMarkerValue(JSON.parse(bytes.toString('utf8')));
  } catch {
    return false;
  }
}

/** A prefix whose manifest is a drop's marker: a drop committed there and has not finished. */
export class DatasetBeingDropped extends NotFoundError {}

export async function readManifest(store: ObjectStore): Promise<Manifest | undefined> {
  const bytes = await store.get(MANIFEST_KEY);
  return bytes === undefined ? undefined : parseManifest(store, bytes);
}

/** The manifest in `bytes`, read from `store`: checked to be one, of a layout version this build reads. */
export function parseManifest(store: ObjectStore, bytes: Buffer): Manifest {
  let manifest: Manifest;
  try {
    manifest = JSON.parse(bytes.toString('utf8')) as Manifest;
  } catch (error) {
    throw new InvalidInputError(`${store.uri}/${MANIFEST_KEY}: not a trajstore manifest (${(error as Error).message})`);
  }
  if (isDropMarkerValue(manifest)) {
    throw new DatasetBeingDropped(`${store.uri}: is being dropped (a drop committed there and has not finished)`, { hint: `run trajstore drop ${store.uri} --yes to finish it` });
  }
  if (manifest === null || typeof manifest !== 'object' || (manifest.kind !== 'storyline' && manifest.kind !== 'compact') || typeof manifest.snapshot_id !== 'string') {
    throw new InvalidInputError(`${store.uri}/${MANIFEST_KEY}: not a trajstore manifest`);
  }
  if (manifest.layout_version === 1 && manifest.kind === 'storyline') {
    throw new UnsupportedLayoutError(`${store.uri}: a Storyline dataset of layout version 1 (written by an older trajstore) is not supported (this build reads ${LAYOUT_VERSION})`, {
      hint: 'import its sources again into a new dataset (--mode replace rewrites it in place)',
    });
  }
  // The id becomes a key (`snapshots/<id>.json`): nothing but an id may name a file there.
  if (!SNAPSHOT_ID.test(manifest.snapshot_id)) throw new InvalidInputError(`${store.uri}/${MANIFEST_KEY}: not a trajstore manifest (snapshot_id ${JSON.stringify(manifest.snapshot_id.slice(0, 80))} is not a snapshot id)`);
  if (!READABLE_VERSIONS[manifest.kind].includes(manifest.layout_version)) {
    const newer = typeof manifest.layout_version === 'number' && manifest.layout_version > LAYOUT_VERSION;
    throw new UnsupportedLayoutError(`${store.uri}: dataset layout version ${manifest.layout_version} is not supported (this build reads ${LAYOUT_VERSION})`, newer ? { hint: 'a newer trajstore wrote it; read it with that version' } : {});
  }
  return manifest;
}

/** A dataset this build cannot read: of a layout version older or newer than it knows. `--mode replace` may still rewrite it. */
export class UnsupportedLayoutError extends InvalidInputError {}

export async function requireManifest(store: ObjectStore): Promise<Manifest> {
  const manifest = await readManifest(store);
  if (!manifest) throw new NotFoundError(`${store.uri}: not a trajstore dataset (no ${MANIFEST_KEY})`);
  return manifest;
}

export async function readSnapshot(store: ObjectStore, id: string): Promise<Snapshot> {
  const bytes = await store.get(snapshotKey(id));
  if (!bytes) throw new NotFoundError(`${store.uri}: snapshot ${id} named by the manifest is missing`);
  return parseSnapshot(store.uri, id, bytes);
}

/** A part's key: `parts/<relation>/<name>.parquet`, the name one plain path segment. */
const PART_KEY = /^parts\/([a-z_]+)\/[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}\.parquet$/;

/** Whether `key` has the form of a part's key (a listing may hold anything: only such keys are a dataset's parts). */
export const isPartKey = (key: string): boolean => PART_KEY.test(key);
const RELATION_NAMES: ReadonlySet<string> = new Set<Relation>(['runs', 'steps', 'tool_calls', 'sources', 'events', 'contents', 'records']);
const isCount = (value: unknown): boolean => Number.isSafeInteger(value) && (value as number) >= 0;
const SHA256_HEX = /^[0-9a-f]{64}$/;

/**
 * The snapshot descriptor `id` in `bytes`, checked before anything is read through it: a dataset
 * is data, and a descriptor edited (or written by someone else, on a shared bucket) to list
 * `../../etc/passwd` as a part would otherwise have that file read, or a local cache write there.
 */
export function parseSnapshot(uri: string, id: string, bytes: Buffer): Snapshot {
  const where = `${uri}/${snapshotKey(id)}`;
  let snapshot: Snapshot;
  try {
    snapshot = JSON.parse(bytes.toString('utf8')) as Snapshot;
  } catch (error) {
    throw new InvalidInputError(`${where}: not a snapshot descriptor (${(error as Error).message})`);
  }
  const invalid = (what: string): InvalidInputError => new InvalidInputError(`${where}: not a valid snapshot descriptor: ${what}`);
  if (snapshot === null || typeof snapshot !== 'object' || Array.isArray(snapshot)) throw invalid('not a JSON object');
  if (snapshot.id !== id) throw invalid(`its id ${JSON.stringify(snapshot.id)} is not ${id}`);
  if (snapshot.parent !== null && !(typeof snapshot.parent === 'string' && SNAPSHOT_ID.test(snapshot.parent))) throw invalid('parent is neither null nor a snapshot id');
  const relations: unknown = snapshot.relations;
  if (relations === null || typeof relations !== 'object' || Array.isArray(relations)) throw invalid('relations is not an object');
  const keys = new Set<string>();
  for (const [relation, parts] of Object.entries(relations)) {
    if (!RELATION_NAMES.has(relation)) throw invalid(`unknown relation ${JSON.stringify(relation)}`);
    if (!Array.isArray(parts)) throw invalid(`relations.${relation} is not a list`);
    for (const part of parts as unknown[]) {
      const ref = part as Partial<PartRef> | null;
      const key = ref?.key;
      if (typeof key !== 'string' || PART_KEY.exec(key)?.[1] !== relation) throw invalid(`relations.${relation} lists ${JSON.stringify(key)}, not a key of the form parts/${relation}/<name>.parquet`);
      if (keys.has(key)) throw invalid(`${key} is listed twice`);
      keys.add(key);
      if (!isCount(ref?.rows) || !isCount(ref?.bytes)) throw invalid(`${key}: rows and bytes must be counts`);
      if (ref?.sha256 !== undefined && !(typeof ref.sha256 === 'string' && SHA256_HEX.test(ref.sha256))) throw invalid(`${key}: sha256 must be 64 lowercase hex digits`);
      if (ref?.retired !== undefined && !(Array.isArray(ref.retired) && ref.retired.every((value) => typeof value === 'string'))) throw invalid(`${key}: retired must be a list of strings`);
    }
  }
  return snapshot;
}

/** Writes the snapshot descriptor (immutable), then swaps the manifest to it atomically. */
export async function publishSnapshot(store: ObjectStore, descriptor: Omit<Snapshot, 'id'>): Promise<Snapshot> {
  const snapshot: Snapshot = { id: await snapshotIdOf(descriptor), ...descriptor };
  await store.put(snapshotKey(snapshot.id), `${JSON.stringify(snapshot, null, 2)}\n`);
  const manifest: Manifest = { kind: snapshot.kind, layout_version: LAYOUT_VERSION, snapshot_id: snapshot.id, updated_at: snapshot.created_at };
  try {
    await store.put(MANIFEST_KEY, `${JSON.stringify(manifest, null, 2)}\n`);
  } catch (error) {
    // Not swapped (a full disk): the descriptor is no snapshot of the dataset and goes with the
    // writer's parts, unless the manifest names it after all (the rename done, a later step failed).
    const named = await readManifest(store).then((current) => current?.snapshot_id === snapshot.id, () => true);
    if (!named) await store.delete(snapshotKey(snapshot.id)).catch(() => {});
    throw error;
  }
  return snapshot;
}
