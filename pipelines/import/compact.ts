/**
 * Compact record stores (`compact-jsonl`): a tree of `.json`, `.jsonl` and `.ndjson` files kept as
 * records, not converted to trajectories. Each JSON document is one record (a JSONL line, or a whole
 * `.json` file; arrays stay intact), with its exact bytes so that export reproduces every file byte
 * for byte. `id` and `timestamp` come from JSON paths; a missing or invalid (non-scalar) value is
 * replaced by `<source_filename>#<line_number>` (spec/trajstore.md, "Compact record").
 */
import { Checkpoint } from '../../lib/checkpoint.js';
import { storageHeapMb } from './memory.js';
import type { Logger } from '../../lib/log.js';
import { InvalidInputError } from '../../lib/errors.js';
import { parseJson, readLines, readAll, decodeUtf8, MAX_DOCUMENT_BYTES } from '../formats/lines.js';
import { contentName } from '../formats/common/documents.js';
import { namingFile } from '../formats/errors.js';
import { listSources } from './sources.js';
import type { ErrorPolicy, ImportSummary } from './import.js';
import { allOrNothing, isFileError, nothingImported, skippedFile, type RowSink, type SkippedFile } from './skip.js';
import type { ProgressSink } from '../../lib/progress.js';
import type { Row } from '../dataset/parquet.js';
import { DatasetWriter, type WriteMode } from '../dataset/writer.js';
import type { WriterLock } from '../dataset/lock.js';
import { evaluatePath, parseJsonPath, type CompactSpec } from '../dataset/compact/paths.js';
import type { SourceFile } from '../formats/types.js';

export const COMPACT_EXTENSIONS = ['.json', '.jsonl', '.ndjson'];

export interface CompactImportOptions {
  from: string;
  to: string;
  mode: WriteMode;
  columns: CompactSpec;
  /** A file that fails: `fail` stops the import, `skip` leaves the file out (skip.ts). */
  onError: ErrorPolicy;
  /** The largest document the source may hold (memory.ts): the storage thread's heap is sized for it. */
  largestDocumentBytes: number;
  log: Logger;
  signal: AbortSignal;
  progress?: ProgressSink;
  /** How long to wait for another writer of the dataset (`--lock-timeout`; default WRITE_DEFAULTS.lockTimeoutMs). */
  lockTimeoutMs?: number;
  /** Given files instead of walking `from` (sync: their complete lines); none at all is an empty store. */
  files?: SourceFile[];
  /** The store's writer lock, already held by the caller (sync, which records its source under it). */
  heldLock?: WriterLock;
}

function scalarText(value: unknown): string | undefined {
  if (typeof value === 'string' && value !== '') return value;
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  return undefined;
}

interface RawRecord {
  line: number;
  text: string;
  raw: Buffer;
}

/** The records of one file with their exact bytes; blank lines travel with the next record (the last one at the end). */
async function* recordsOf(file: SourceFile): AsyncGenerator<RawRecord> {
  const stream = file.open();
  if (/\.json$/i.test(contentName(file.relPath))) {
    const raw = await readAll(stream, file.relPath, MAX_DOCUMENT_BYTES);
    yield { line: 1, text: decodeUtf8(raw, file.relPath), raw };
    return;
  }
  let held: RawRecord | undefined;
  let blank: Buffer[] = [];
  for await (const line of readLines(stream, file.relPath)) {
    if (line.text.trim() === '') {
      blank.push(line.bytes);
      continue;
    }
    const record = { line: line.number, text: line.text, raw: Buffer.concat([...blank, line.bytes]) };
    blank = [];
    if (held) yield held;
    held = record;
  }
  if (held) {
    if (blank.length > 0) held.raw = Buffer.concat([held.raw, ...blank]);
    yield held;
  }
}

export async function runCompactImport(options: CompactImportOptions): Promise<ImportSummary> {
  if (options.mode === 'append') throw new InvalidInputError('--mode append: compact-jsonl import supports create and confirmed replace only');
  const files = options.files ?? listSources(options.from, process.stdin, COMPACT_EXTENSIONS);
  if (files.length === 0 && !options.files) throw new InvalidInputError(`-f ${options.from}: no .json/.jsonl/.ndjson files to import`);
  const spec = options.columns;
  const idPath = parseJsonPath(spec.id_path);
  const timestampPath = parseJsonPath(spec.timestamp_path);
  const userPaths = spec.columns.map((c) => ({ name: c.name, steps: parseJsonPath(c.path) }));
  const writer = await DatasetWriter.begin({
    path: options.to,
    mode: options.mode,
    kind: 'compact',
    compact: spec,
    signal: options.signal,
    ...(options.lockTimeoutMs !== undefined ? { lockTimeoutMs: options.lockTimeoutMs } : {}),
    ...(options.heldLock ? { heldLock: options.heldLock } : {}),
    log: options.log,
    storageHeapMb: storageHeapMb(options.largestDocumentBytes),
  });
  let records = 0;
  let bytes = 0;
  let fallbacks = 0;
  const skipped: SkippedFile[] = [];
  const checkpoint = new Checkpoint(options.signal);
  const direct: RowSink = { add: (relation, rows) => writer.add(relation, rows) };
  // Leaving out the only file leaves nothing: a single source fails as it would without skip.
  const skipping = options.onError === 'skip' && (files.length > 1 || options.files !== undefined);

  /** The records of one file into `sink`; `counting` is false for a pass that only checks the file. */
  async function importFile(file: SourceFile, sink: RowSink, counting: boolean): Promise<{ records: number; bytes: number; fallbacks: number }> {
    const seen = { records: 0, bytes: 0, fallbacks: 0 };
    for await (const record of recordsOf(file)) {
      await checkpoint.check();
      const value = parseJson(record.text, file.relPath, record.line);
      const fallback = `${file.relPath}#${record.line}`;
      const id = scalarText(evaluatePath(value, idPath));
      const timestamp = scalarText(evaluatePath(value, timestampPath));
      if (id === undefined || timestamp === undefined) {
        seen.fallbacks += 1;
        if (counting) options.log.info(`${file.name}:${record.line}: ${id === undefined ? 'id' : 'timestamp'} missing or not a scalar; using ${fallback}`);
      }
      const row: Row = { id: id ?? fallback, timestamp: timestamp ?? fallback, filename: file.relPath, line: record.line, data_json: record.text, raw: record.raw };
      for (const column of userPaths) {
        const v = evaluatePath(value, column.steps);
        row[column.name] = v === undefined ? null : JSON.stringify(v);
      }
      await sink.add('records', [row]);
      seen.records += 1;
      seen.bytes += record.raw.length;
      if (counting) options.progress?.add(1, record.raw.length);
    }
    return seen;
  }

  try {
    for (const file of files) {
      let result;
      try {
        result = skipping
          ? await allOrNothing((sink, counting) => importFile(file, sink, counting), direct, () => options.log.debug(`${file.name}: too big to hold until it is through; checking it first`))
          : await importFile(file, direct, true);
      } catch (caught) {
        const error = namingFile(caught, file);
        if (!skipping || !isFileError(error)) throw error;
        skipped.push(skippedFile(file.relPath, error, options.log));
        continue;
      }
      records += result.records;
      bytes += result.bytes;
      fallbacks += result.fallbacks;
    }
    if (skipped.length === files.length && !options.files) throw nothingImported(skipped);
    await checkpoint.check();
    const snapshot = await writer.commit();
    const imported = files.length - skipped.length;
    const totals = { files: imported, runs: records, steps: 0, tool_calls: 0, prompt_tokens: 0, completion_tokens: 0, cached_tokens: 0 };
    return {
      dataset: options.to,
      snapshot_id: snapshot.id,
      mode: options.mode,
      kind: 'compact',
      files: imported,
      bytes,
      skipped_duplicates: 0,
      skipped_files: skipped,
      diagnostics: fallbacks,
      by_format: [{ format: 'compact-jsonl', ...totals }],
      total: totals,
    };
  } catch (error) {
    await writer.abort();
    throw error;
  }
}
