/**
 * `list` of a place that is not a trajstore dataset but holds source files (a directory of agent
 * session logs such as the built-in pin `@agentb-code`, or one file): each file is detected and
 * decoded as `import` would, without writing anything, and counted. A file that cannot be read is
 * reported on stderr and left out, so one bad log does not hide the others.
 */
import { Checkpoint } from '../../lib/checkpoint.js';
import type { Logger } from '../../lib/log.js';
import type { Readable } from 'node:stream';
import { loadFormats } from '../formats/registry.js';
import { namingFile } from '../formats/errors.js';
import { detectFormat } from '../import/detect.js';
import { documentIdOf, storylineRows } from '../dataset/rows.js';
import { listSources } from '../import/sources.js';

/** One row of `list`: a source file and what came from it. */
export interface SourceRow {
  source_path: string;
  format: string;
  /** Storyline datasets and source files: runs and steps decoded from the source. */
  runs?: number;
  steps?: number;
  /** Compact record stores: records of the file. */
  records?: number;
  first_timestamp: string | null;
  last_timestamp: string | null;
}

export async function listRawSources(path: string, io: { stdin: Readable; log: Logger; signal: AbortSignal }): Promise<{ rows: SourceRow[]; unreadable: number }> {
  const formats = await loadFormats();
  const extensions = [...new Set(formats.flatMap((f) => f.extensions))];
  const rows: SourceRow[] = [];
  let unreadable = 0;
  const checkpoint = new Checkpoint(io.signal);
  for (const file of listSources(path, io.stdin, extensions)) {
    try {
      const detected = await detectFormat(file, formats);
      // A log with nothing but a partial first line (no runs yet), or a companion file (no runs of its own).
      if (!detected || detected.companion) continue;
      const { format } = detected;
      let runs = 0;
      let steps = 0;
      let first: string | null = null;
      let last: string | null = null;
      const ctx = { log: io.log, keepRaw: false, signal: io.signal, diagnostic: () => {} };
      for await (const decoded of format.decode(file, ctx)) {
        await checkpoint.check();
        const doc = decoded.storyline;
        const { run } = storylineRows(doc, { documentId: documentIdOf(doc), sourcePath: file.relPath, sourceFormat: format.name, sourceDocument: decoded.sourceDocument });
        runs += 1;
        steps += doc.turns.length;
        const started = (run.started_at ?? run.finished_at ?? null) as string | null;
        const finished = (run.finished_at ?? run.started_at ?? null) as string | null;
        if (started !== null && (first === null || started < first)) first = started;
        if (finished !== null && (last === null || finished > last)) last = finished;
      }
      rows.push({ source_path: file.relPath, format: format.name, runs, steps, first_timestamp: first, last_timestamp: last });
    } catch (error) {
      if (io.signal.aborted) throw io.signal.reason;
      unreadable += 1;
      const { message } = namingFile(error, file) as Error;
      io.log.warn(`not listed: ${message.startsWith(file.name) ? message : `${file.name}: ${message}`}`);
    }
  }
  await checkpoint.check(); // a decoder that saw the abort ends early, which is not the end of the input
  return { rows, unreadable };
}
