/**
 * The events of the traces the event log let go of (event-log.ts `settle`), read back from the
 * dataset they were projected into: its `events` relation holds each event's record as it was
 * sent and when it was acknowledged, and its index finds a trace's rows by source path, in trace
 * order. The live trace endpoints and a projection after a late event read them through this.
 */
import { openDataset, type OpenDataset } from '../../dataset/open.js';
import type { DatasetRef } from '../../pins/resolve.js';
import { tracePath } from './decode.js';
import type { ArchiveReader, StoredEvent, Trace } from './event-log.js';
import type { EventRecord } from './events.js';

export interface DatasetArchive {
  read: ArchiveReader;
  close(): void;
}

/**
 * The reader of the gateway's dataset. It keeps one snapshot open (opening one for every trace
 * made projecting a batch of traces that got late events slower by a multiple), and opens the
 * latest again when the one it has holds fewer of a trace's events than the log let go of: that
 * snapshot is older than the trace's last projection. It never writes in the dataset.
 */
export function datasetArchive(dataset: DatasetRef, env: NodeJS.ProcessEnv): DatasetArchive {
  /** The snapshot open (or being opened): shared by reads at once, so none opens one that another then leaks. */
  let current: Promise<OpenDataset> | undefined;
  const reopen = (): Promise<OpenDataset> => {
    const previous = current;
    const next = openDataset(dataset, env, { neverWrite: true });
    current = next;
    // A failed opening is not kept: the next read tries again.
    next.catch(() => current === next && (current = undefined));
    void previous?.then((db) => db.close(), () => {});
    return next;
  };
  const eventsOf = (db: OpenDataset, trace: Trace): StoredEvent[] =>
    (db.db.prepare('SELECT record_json, received_at FROM events WHERE source_path = ? ORDER BY ordinal').all(tracePath(trace)) as Array<{ record_json: string; received_at: string }>).map((row) => ({
      record: JSON.parse(row.record_json) as EventRecord,
      receivedAt: row.received_at,
    }));
  return {
    async read(trace) {
      const events = eventsOf(await (current ?? reopen()), trace);
      return events.length >= trace.archived ? events : eventsOf(await reopen(), trace);
    },
    close() {
      void current?.then((db) => db.close(), () => {});
      current = undefined;
    },
  };
}
