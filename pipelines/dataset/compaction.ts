/**
 * Keeping a dataset that many small writes go to (sync) as fast to read as one import, and its
 * size what its current snapshot holds:
 *
 * - compaction rewrites each run of consecutive small parts of a relation as one part, without the
 *   rows the snapshot retired (PartRef.retired), and publishes that as a new snapshot (same rows, in
 *   the same order, so export's merge of runs, steps and tool calls still lines up). The index
 *   holds the same rows: it is carried over to the new snapshot id. Crash-safe as an append is:
 *   new parts under fresh names, the manifest swap the commit point, the index renamed in after;
 * - reclamation removes the snapshots that stopped being current more than a grace period ago
 *   (and ones that never became current, a losing writer's, once as old), and the parts that no
 *   kept snapshot lists once they are as old. A reader that opened a snapshot just before it was
 *   superseded keeps it whole for the grace period. It goes through the ObjectStore interface only
 *   (a part's age is in its name, layout.ts partWrittenAt), so any store gets it.
 *
 * Both run under the dataset's writer lock, so they never race a sync batch or an import.
 */
import { join } from 'node:path';
import { INDEX_FILE, isPartKey, isProbeKey, newPartStamp, parseSnapshot, partWrittenAt, publishSnapshot, readSnapshot, requireManifest, snapshotIdOfKey, snapshotKey, PROBES_PREFIX, type PartRef, type Snapshot } from './layout.js';
import { CONTENT_REFS_METADATA, flatCells, openPart, PartWriter } from './parquet.js';
import { RETIRE_KEY, type Relation } from './relations.js';
import { IndexBuilder, relationColumns } from './sqlite-index.js';
import type { ObjectStore } from './store.js';
import { tempSiblingOf } from '../../lib/durable.js';
import { COMPACTION_DEFAULTS } from './defaults.js';
import { lockOptions, withWriterLock } from './lock.js';
import { canonicalPath } from './recover.js';
import { LocalObjectStore } from './store.js';
import type { Logger } from '../../lib/log.js';


export interface CompactionLimits {
  smallPartBytes: number;
  minSmallParts: number;
  maxRetiredKeys: number;
}

/** Consecutive parts of a relation to rewrite as one: the positions `[start, end)` in the snapshot's list. */
interface Group {
  relation: Relation;
  start: number;
  end: number;
}

/** What compaction would rewrite in a snapshot: runs of small parts (enough of them), and parts with long retired lists. */
export function compactionPlan(snapshot: Snapshot, limits: CompactionLimits = COMPACTION_DEFAULTS): Group[] {
  const groups: Group[] = [];
  for (const [relation, parts] of Object.entries(snapshot.relations) as Array<[Relation, PartRef[]]>) {
    const small = parts.map((part) => part.bytes < limits.smallPartBytes);
    const smallCount = small.filter(Boolean).length;
    for (let i = 0; i < parts.length; ) {
      let j = i;
      while (j < parts.length && small[j]) j++;
      if (j - i >= 2 && smallCount >= limits.minSmallParts) groups.push({ relation, start: i, end: j });
      else if (j === i && (parts[i]?.retired?.length ?? 0) > limits.maxRetiredKeys) groups.push({ relation, start: i, end: i + 1 });
      i = Math.max(j, i + 1);
    }
  }
  return groups;
}

/** Writes the parts of a group as one, leaving out retired rows; undefined when a part predates the content store (it is left as it is). */
async function rewrite(store: ObjectStore, snapshot: Snapshot, group: Group, name: string): Promise<PartRef | undefined> {
  const parts = (snapshot.relations[group.relation] ?? []).slice(group.start, group.end);
  const readers = await Promise.all(parts.map((part) => openPart(store, part.key)));
  if (readers.some((reader) => !reader.refersToContents)) return undefined;
  const columns = relationColumns(snapshot.kind, snapshot.compact?.columns.map((c) => c.name))[group.relation] ?? [];
  const metadata = [{ key: 'trajstore.relation', value: group.relation }, CONTENT_REFS_METADATA, ...(snapshot.compact ? [{ key: 'trajstore.compact', value: JSON.stringify(snapshot.compact) }] : [])];
  const writer = new PartWriter(store, `parts/${group.relation}/${name}.parquet`, columns, metadata);
  const key = RETIRE_KEY[group.relation];
  try {
    for (const [i, reader] of readers.entries()) {
      const retired = new Set(parts[i]?.retired ?? []);
      for await (const rows of reader.rowGroups()) {
        const kept = key && retired.size > 0 ? rows.filter((row) => !retired.has(row[key] as string)) : rows;
        await writer.writeCells(flatCells(columns, kept));
      }
    }
    return await writer.close();
  } catch (error) {
    writer.abort();
    throw error;
  }
}

export interface CompactionResult {
  /** The new snapshot, or undefined when there was nothing to compact. */
  snapshot: Snapshot | undefined;
  /** The dataset's current snapshot afterwards: the new one, or the one there was nothing to compact in. */
  currentId: string;
  partsBefore: number;
  partsAfter: number;
}

const partCount = (snapshot: Snapshot): number => Object.values(snapshot.relations).reduce((n, parts) => n + (parts?.length ?? 0), 0);

/**
 * Compacts the local dataset at `root` (its writer lock held by the caller) when compactionPlan
 * finds something to do. Parts written before a failure are left for the next writer to reclaim.
 */
export async function compactDataset(store: ObjectStore, root: string, limits: CompactionLimits = COMPACTION_DEFAULTS): Promise<CompactionResult> {
  const manifest = await requireManifest(store);
  const current = await readSnapshot(store, manifest.snapshot_id);
  const groups = compactionPlan(current, limits);
  const before = partCount(current);
  if (groups.length === 0) return { snapshot: undefined, currentId: current.id, partsBefore: before, partsAfter: before };
  const stamp = await newPartStamp();
  const relations: Partial<Record<Relation, PartRef[]>> = { ...current.relations };
  // From the last group of each relation back, so that earlier positions stay valid.
  const ordered = [...groups].sort((a, b) => (a.relation === b.relation ? b.start - a.start : a.relation < b.relation ? -1 : 1));
  let rewritten = 0;
  for (const [n, group] of ordered.entries()) {
    const merged = await rewrite(store, current, group, `${stamp}-${String(n).padStart(4, '0')}`);
    if (!merged) continue;
    const parts = [...(relations[group.relation] ?? [])];
    // Parts whose every row was retired leave nothing behind.
    if (merged.rows === 0) await store.delete(merged.key);
    parts.splice(group.start, group.end - group.start, ...(merged.rows === 0 ? [] : [merged]));
    relations[group.relation] = parts;
    rewritten += 1;
  }
  if (rewritten === 0) return { snapshot: undefined, currentId: current.id, partsBefore: before, partsAfter: before };
  const snapshot = await publishSnapshot(store, { ...withoutId(current), parent: current.id, created_at: new Date().toISOString(), relations });
  // The index holds exactly the rows it held: it now describes the new snapshot (a crash before the
  // rename leaves it naming the old one, and the next reader rebuilds it from the parts).
  const indexPath = join(root, INDEX_FILE);
  const index = IndexBuilder.at(indexPath, tempSiblingOf(indexPath), current.kind, relationColumns(current.kind, current.compact?.columns.map((c) => c.name)), false);
  try {
    index.finish(snapshot.id);
    index.publish();
  } catch (error) {
    index.abort();
    throw error;
  }
  return { snapshot, currentId: snapshot.id, partsBefore: before, partsAfter: partCount(snapshot) };
}

function withoutId(snapshot: Snapshot): Omit<Snapshot, 'id'> {
  const { id: _id, ...rest } = snapshot;
  return rest;
}

export interface ReclaimResult {
  snapshots: number;
  parts: number;
}

/**
 * Removes, from any store, the snapshots other than `currentId` that were superseded (or written
 * and never made current) more than `graceMs` ago, then the parts no remaining snapshot lists that
 * are as old. The caller holds the dataset's writer lock.
 */
export async function reclaimSuperseded(store: ObjectStore, currentId: string, graceMs: number, now = Date.now()): Promise<ReclaimResult> {
  const snapshots: Snapshot[] = [];
  // Only keys of the dataset's own form: a listing (an object store's, written by anyone) may hold
  // keys such as `parts/../../elsewhere/...`, which a server that resolves dot segments would take
  // for keys outside the dataset.
  for (const key of await store.list('snapshots/')) {
    const id = snapshotIdOfKey(key);
    if (!id) continue;
    const bytes = await store.get(key);
    if (!bytes) continue;
    try {
      snapshots.push(parseSnapshot(store.uri, id, bytes));
    } catch {
      // A torn descriptor is a writer's leftover: recover.ts removes it with the lock held.
    }
  }
  // A snapshot stopped being current when its first child was written.
  const supersededAt = new Map<string, number>();
  for (const snapshot of snapshots) {
    if (snapshot.parent === null) continue;
    const at = Date.parse(snapshot.created_at);
    supersededAt.set(snapshot.parent, Math.min(supersededAt.get(snapshot.parent) ?? at, at));
  }
  const expired = (snapshot: Snapshot): boolean => snapshot.id !== currentId && now - (supersededAt.get(snapshot.id) ?? Date.parse(snapshot.created_at)) > graceMs;
  const referenced = new Set<string>();
  let removedSnapshots = 0;
  for (const snapshot of snapshots) {
    if (!expired(snapshot)) {
      for (const parts of Object.values(snapshot.relations)) for (const part of parts ?? []) referenced.add(part.key);
      continue;
    }
    await store.delete(snapshotKey(snapshot.id));
    removedSnapshots += 1;
  }
  const parts = await deleteWhere(store, 'parts/', (key) => isPartKey(key) && !referenced.has(key) && writtenBefore(key, now - graceMs));
  return { snapshots: removedSnapshots, parts };
}

/**
 * Removes the probes of killed writers (layout.ts `probeKey`) written more than `graceMs` ago: a
 * live writer deletes its own within seconds. Returns how many went.
 */
export function reclaimProbes(store: ObjectStore, graceMs: number, now = Date.now()): Promise<number> {
  return deleteWhere(store, PROBES_PREFIX, (key) => isProbeKey(key) && writtenBefore(key, now - graceMs));
}

/** Whether the key (a part's or a probe's, its time in its name) was written before `time`. */
function writtenBefore(key: string, time: number): boolean {
  const writtenAt = partWrittenAt(key);
  return writtenAt !== undefined && writtenAt < time;
}

/** Deletes the keys listed under `prefix` that `chosen` picks, one at a time; how many went. */
async function deleteWhere(store: ObjectStore, prefix: string, chosen: (key: string) => boolean): Promise<number> {
  let removed = 0;
  for (const key of await store.list(prefix)) {
    if (!chosen(key)) continue;
    await store.delete(key);
    removed += 1;
  }
  return removed;
}

export interface MaintainOptions {
  /** What the lock's holder is doing, for the messages of writers that wait for it. */
  purpose: string;
  graceMs: number;
  limits?: CompactionLimits;
  signal?: AbortSignal;
  log: Logger;
}

/**
 * Compacts the local dataset at `path` when it is due and reclaims what the grace period has passed,
 * holding its writer lock: what the writers of many small appends (sync, the gateway's projection) do after each.
 */
export async function maintainDataset(path: string, options: MaintainOptions): Promise<void> {
  const root = canonicalPath(path);
  await withWriterLock(root, lockOptions(options.purpose, { ...(options.signal ? { signal: options.signal } : {}), log: options.log }), async () => {
    const store = new LocalObjectStore(root);
    const compacted = await compactDataset(store, root, options.limits);
    if (compacted.snapshot) options.log.info(`${root}: compacted ${compacted.partsBefore} parts into ${compacted.partsAfter} (snapshot ${compacted.snapshot.id})`);
    const reclaimed = await reclaimSuperseded(store, compacted.currentId, options.graceMs);
    if (reclaimed.snapshots + reclaimed.parts > 0) options.log.info(`${root}: removed ${reclaimed.snapshots} superseded snapshot(s) and ${reclaimed.parts} unlisted part(s)`);
  });
}
