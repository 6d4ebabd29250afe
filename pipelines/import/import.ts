/**
 * The import pipeline: source files -> format (named, or detected per file) -> decode -> validate ->
 * document ids -> rows -> batches -> Parquet parts + index -> commit. Every stage is an async iterator
 * pulled by the next one, so a slow sink slows the reader (backpressure) and memory is bounded by a
 * batch plus the largest single source document, whatever the input size.
 */
import { createHash } from 'node:crypto';
import { PassThrough, type Readable } from 'node:stream';
import { Checkpoint } from '../../lib/checkpoint.js';
import { storageHeapMb } from './memory.js';
import type { Logger } from '../../lib/log.js';
import type { ProgressSink } from '../../lib/progress.js';
import { namingFile, SourceError } from '../formats/errors.js';
import { loadFormat, loadFormats, type InputFormat } from '../formats/registry.js';
import type { DecodeContext, FormatModule } from '../formats/types.js';
import type { WriterLock } from '../dataset/lock.js';
import type { Row } from '../dataset/parquet.js';
import { DatasetWriter, type DatasetSink, type DatasetWriterOptions, type WriteMode } from '../dataset/writer.js';
import type { S3Place } from '../pins/pins.js';
import { storylineProblems } from '../storyline/validate.js';
import { detectFormat } from './detect.js';
import { documentIdOf, storylineRows } from '../dataset/rows.js';
import { ContentRefs } from '../dataset/content-refs.js';
import { listSources, type ImportFile } from './sources.js';
import { InvalidInputError } from '../../lib/errors.js';
import { allOrNothing, isFileError, nothingImported, skippedFile, type RowSink, type SkippedFile } from './skip.js';
import { PriceList } from '../pricing/cost.js';
import type { Price } from '../pricing/prices.js';

export type DuplicatePolicy = 'suffix' | 'skip';
export type ErrorPolicy = 'fail' | 'skip';

export interface ImportOptions {
  from: string;
  /** The destination as shown: a local directory, or the object-store dataset `remote` names. */
  to: string;
  /** An object-store destination (s3-writer.ts), with the environment its client is made from. */
  remote?: { place: S3Place; env: NodeJS.ProcessEnv };
  inputFormat: InputFormat | 'auto';
  /** `preserve` keeps each source document's exact bytes in `sources.raw`. */
  outputFormat: 'preserve' | 'storyline';
  mode: WriteMode;
  onDuplicate: DuplicatePolicy;
  /** The configuration's `[prices."<model>"]`, over the built-in price table. */
  prices: Record<string, Price>;
  /** The largest document the source may hold (memory.ts): the storage thread's heap is sized for it. */
  largestDocumentBytes: number;
  stdin: Readable;
  log: Logger;
  signal: AbortSignal;
  progress?: ProgressSink;
  batchRows?: number;
  batchBytes?: number;
  /** A file that fails: `fail` stops the import (nothing is written), `skip` leaves the file out and goes on. */
  onError: ErrorPolicy;
  /** How long to wait for another writer of the dataset (`--lock-timeout`; default WRITE_DEFAULTS.lockTimeoutMs). */
  lockTimeoutMs?: number;
  /** What those waiting for the dataset's lock are told holds it (`import --mode <mode>` by default). */
  purpose?: string;
  /**
   * Given sources that replace what earlier imports brought from the same paths (sync): `files`
   * instead of walking `from`, and `retire` the source paths whose runs leave the dataset first
   * (changed, rotated or deleted files). An empty or document-less batch is then no error.
   */
  sources?: { files: ImportFile[]; retire: string[] };
  /** An append that finds no dataset makes one (sync: writer.ts `createMissing`). */
  createMissing?: boolean;
  /** The destination's writer lock, held by the caller (sync: writer.ts `heldLock`). */
  heldLock?: WriterLock;
}

export interface FormatTotals {
  format: string;
  files: number;
  runs: number;
  steps: number;
  tool_calls: number;
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
}

export interface ImportSummary {
  dataset: string;
  snapshot_id: string;
  mode: WriteMode;
  kind: 'storyline' | 'compact';
  files: number;
  bytes: number;
  skipped_duplicates: number;
  /** Files left out by `--on-error skip`, with the reason. */
  skipped_files: SkippedFile[];
  diagnostics: number;
  by_format: FormatTotals[];
  total: Omit<FormatTotals, 'format'>;
}

const emptyTotals = (): Omit<FormatTotals, 'format'> => ({ files: 0, runs: 0, steps: 0, tool_calls: 0, prompt_tokens: 0, completion_tokens: 0, cached_tokens: 0 });

/** The format to decode a file with, or the diagnostic that says why it holds nothing to import. */
type FileFormat = { format: FormatModule } | { nothing: string };

/**
 * The format of a file: the named one, or the most confident detection (logged at info); nothing
 * for a log that holds nothing yet but the start of its first line, or for a companion file.
 */
async function formatOf(file: ImportFile, formats: readonly FormatModule[], options: ImportOptions): Promise<FileFormat> {
  if (options.inputFormat !== 'auto') return { format: formats[0] as FormatModule };
  const detected = await detectFormat(file, formats);
  if (!detected) return { nothing: `${file.name}:1: partial_line: the file holds only the start of its first line (the agent may still be writing it): nothing to import yet` };
  if (detected.companion) return { nothing: `${file.name}: companion_file: ${detected.reason}, read with the ${detected.format.name} documents it describes: nothing to import from it` };
  options.log.info(`${file.name}: detected ${detected.format.name} (${detected.reason})`);
  return { format: detected.format };
}

/** The file's bytes, counted into the progress display as they are read. */
function counted(file: ImportFile, progress: ProgressSink | undefined, onBytes: (n: number) => void): ImportFile {
  return {
    ...file,
    open: (): Readable => {
      const source = file.open();
      const counter = new PassThrough({ highWaterMark: 1 << 20 });
      counter.on('data', (chunk: Buffer) => {
        onBytes(chunk.length);
        progress?.add(0, chunk.length);
      });
      source.on('error', (error) => counter.destroy(error));
      return source.pipe(counter);
    },
  };
}

/** What one file adds to the import; merged into the totals only once the file is through. */
interface FileResult {
  /** Undefined for a file with nothing to import (a log with nothing but a partial first line, a companion file). */
  format: FormatModule | undefined;
  totals: Omit<FormatTotals, 'format'>;
  documents: number;
  skippedDuplicates: number;
  /** Document ids this file took. */
  ids: Set<string>;
}

export async function runImport(options: ImportOptions): Promise<ImportSummary> {
  // The named format, or every format for detection.
  const formats = options.inputFormat === 'auto' ? await loadFormats() : [await loadFormat(options.inputFormat)];
  const prices = new PriceList(options.prices);
  const extensions = [...new Set(formats.flatMap((f) => f.extensions))];
  const files = options.sources?.files ?? listSources(options.from, options.stdin, extensions);
  if (files.length === 0 && !options.sources) throw new InvalidInputError(`-f ${options.from}: no ${extensions.join('/')} files to import`);
  // Leaving out the only file leaves nothing: a single source fails as it would without skip.
  const skipping = options.onError === 'skip' && (files.length > 1 || options.sources !== undefined);
  const writer = await beginWrite(options.remote, {
    path: options.to,
    mode: options.mode,
    kind: 'storyline',
    storageHeapMb: storageHeapMb(options.largestDocumentBytes),
    ...(options.batchRows ? { batchRows: options.batchRows } : {}),
    ...(options.batchBytes ? { batchBytes: options.batchBytes } : {}),
    signal: options.signal,
    ...(options.lockTimeoutMs !== undefined ? { lockTimeoutMs: options.lockTimeoutMs } : {}),
    ...(options.purpose ? { purpose: options.purpose } : {}),
    ...(options.createMissing ? { createMissing: true } : {}),
    ...(options.heldLock ? { heldLock: options.heldLock } : {}),
    log: options.log,
  });
  const direct: RowSink = { add: (relation, rows) => writer.add(relation, rows) };
  let seen = new Set<string>();
  const byFormat = new Map<string, FormatTotals>();
  const skippedFiles: SkippedFile[] = [];
  let skippedDuplicates = 0;
  let diagnostics = 0;
  let bytes = 0;
  /** Documents decoded, and the formats the files were read as (for the refusal of an input that holds none). */
  let decodedDocuments = 0;
  const formatsRead = new Set<FormatModule>();
  /**
   * Warnings for the files that held no document of their format, said once the import is through:
   * when no file held any, the import fails saying so instead (a warning too would repeat it).
   */
  const noDocuments: string[] = [];
  const importedAt = new Date().toISOString();
  const checkpoint = new Checkpoint(options.signal);
  try {
    await writer.retireSources(options.sources?.retire ?? []);
    seen = writer.existingDocumentIds();
    for (const source of files) {
      await checkpoint.check();
      try {
        merge(await (skipping ? importWhole(source) : importFile(source, direct)));
      } catch (caught) {
        const error = namingFile(caught, source);
        if (!skipping || !isFileError(error)) throw error;
        skippedFiles.push(skippedFile(source.relPath, error, options.log));
      }
    }
    if (skippedFiles.length === files.length && !options.sources) throw nothingImported(skippedFiles);
    if (decodedDocuments === 0 && !options.sources) {
      // An input that holds no document of its format is not what was asked for: nothing is written.
      const where = files.length === 1 ? (files[0] as ImportFile).name : `-f ${options.from} (${files.length} files)`;
      const read = [...formatsRead];
      throw new InvalidInputError(`${where}: no ${read.map((f) => f.name).join(' or ')} document; expected ${read.map((f) => f.expects).join(', or ')}`);
    }
    for (const warning of noDocuments) options.log.warn(warning);
    await checkpoint.check(); // decoders end early when the signal aborts, which is not the end of the input
    const snapshot = await writer.commit();
    const total = emptyTotals();
    for (const t of byFormat.values()) for (const key of Object.keys(total) as Array<keyof typeof total>) total[key] += t[key];
    return {
      dataset: options.to,
      snapshot_id: snapshot.id,
      mode: options.mode,
      kind: 'storyline',
      files: files.length - skippedFiles.length,
      bytes,
      skipped_duplicates: skippedDuplicates,
      skipped_files: skippedFiles,
      diagnostics,
      by_format: [...byFormat.values()],
      total,
    };
  } catch (error) {
    await writer.abort();
    throw error;
  }

  /** Adds a file that went through to the import's totals. */
  function merge(result: FileResult): void {
    if (!result.format) return;
    formatsRead.add(result.format);
    let totals = byFormat.get(result.format.name);
    if (!totals) byFormat.set(result.format.name, (totals = { format: result.format.name, ...emptyTotals() }));
    for (const key of Object.keys(result.totals) as Array<keyof FileResult['totals']>) totals[key] += result.totals[key];
    for (const id of result.ids) seen.add(id);
    skippedDuplicates += result.skippedDuplicates;
    decodedDocuments += result.documents;
  }

  /** A file all or nothing (skip.ts). */
  function importWhole(source: ImportFile): Promise<FileResult> {
    return allOrNothing((sink, counting) => importFile(source, sink, counting), direct, () => options.log.debug(`${source.name}: too big to hold until it is through; checking it first`));
  }

  /** Decodes one file into `sink`; `counting` is false for a pass that only checks the file. */
  async function importFile(source: ImportFile, sink: RowSink, counting = true): Promise<FileResult> {
    const found = await formatOf(source, formats, options);
    const format = 'format' in found ? found.format : undefined;
    // One per file: a value an earlier file stored is sent again and left out by the index, which
    // knows every value of the dataset (a set of every hash of a large import would grow with it).
    const refs = new ContentRefs();
    const result: FileResult = { format, totals: { ...emptyTotals(), files: 1 }, documents: 0, skippedDuplicates: 0, ids: new Set() };
    if (!format) {
      if (counting && 'nothing' in found) {
        diagnostics += 1;
        options.log.info(found.nothing);
      }
      return result;
    }
    const file = counting ? counted(source, options.progress, (n) => (bytes += n)) : source;
    const totals = result.totals;
    const ctx: DecodeContext = {
      log: options.log,
      keepRaw: options.outputFormat === 'preserve',
      signal: options.signal,
      diagnostic: (code, message, line) => {
        if (!counting) return;
        diagnostics += 1;
        options.log.info(`${file.name}${line === undefined ? '' : `:${line}`}: ${code}: ${message}`);
      },
    };
    // One `sources` row per source document; the Storylines decoded from it are adjacent.
    let source_row: Row | undefined;
    const flushSource = async (): Promise<void> => {
      if (source_row) await sink.add('sources', [source_row]);
      source_row = undefined;
    };
    const taken = (id: string): boolean => seen.has(id) || result.ids.has(id);
    for await (const decoded of format.decode(file, ctx)) {
      await checkpoint.check();
      const doc = decoded.storyline;
      const line = doc.origin?.line;
      const [problem] = storylineProblems(doc, 1);
      if (problem) {
        // The pointer is into the decoded Storyline, not the source, so it goes in the reason.
        throw new SourceError({ relPath: file.relPath, ...(line ? { line } : {}) }, `decoded ${format.name} document is not a valid Storyline at ${problem.pointer}: ${problem.message}`);
      }
      if (source_row?.source_document !== decoded.sourceDocument) {
        await flushSource();
        const raw = decoded.raw;
        source_row = {
          source_path: file.relPath,
          source_document: decoded.sourceDocument,
          format: format.name,
          run_count: 0,
          byte_size: raw ? raw.length : null,
          sha256: raw ? createHash('sha256').update(raw).digest('hex') : null,
          raw: raw ?? null,
          imported_at: importedAt,
        };
      }
      result.documents += 1;
      let documentId = documentIdOf(doc);
      if (taken(documentId)) {
        if (options.onDuplicate === 'skip') {
          result.skippedDuplicates += 1;
          if (counting) options.log.info(`${file.name}: skipped duplicate document ${JSON.stringify(documentId)}`);
          continue;
        }
        let n = 2;
        while (taken(`${documentId}#${n}`)) n += 1;
        documentId = `${documentId}#${n}`;
      }
      result.ids.add(documentId);
      source_row.run_count = Number(source_row.run_count) + 1;
      const rows = storylineRows(doc, { documentId, sourcePath: file.relPath, sourceFormat: format.name, sourceDocument: decoded.sourceDocument }, prices, refs);
      await sink.add('contents', refs.take());
      await sink.add('runs', [rows.run]);
      await sink.add('steps', rows.steps);
      await sink.add('tool_calls', rows.toolCalls);
      totals.runs += 1;
      totals.steps += rows.steps.length;
      totals.tool_calls += rows.toolCalls.length;
      totals.prompt_tokens += Number(rows.run.prompt_tokens ?? 0);
      totals.completion_tokens += Number(rows.run.completion_tokens ?? 0);
      totals.cached_tokens += Number(rows.run.cached_tokens ?? 0);
      if (counting) options.progress?.add(1);
    }
    await flushSource();
    if (result.documents === 0 && counting) {
      diagnostics += 1;
      noDocuments.push(`${file.name}: no ${format.name} documents in this file`);
    }
    return result;
  }
}

/** The writer of a local destination, or of an object-store one (loaded only then: the AWS SDK costs start-up time). */
export async function beginWrite(remote: ImportOptions['remote'], options: DatasetWriterOptions): Promise<DatasetSink> {
  if (!remote) return DatasetWriter.begin(options);
  const { S3DatasetWriter } = await import('../dataset/s3-writer.js');
  const { path: _path, ...rest } = options;
  return S3DatasetWriter.begin({ ...rest, remote: remote.place, env: remote.env });
}
