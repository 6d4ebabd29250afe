/**
 * The export pipeline: the dataset's Parquet parts, read one row group at a time -> Storyline
 * documents -> the target format's `encode` -> JSONL on stdout or in a file, or one file per
 * document in a directory. Each stage is pulled by the next, and writes to stdout wait for
 * `drain`, so a slow reader slows the export instead of filling memory.
 *
 * Byte-exact paths: a dataset imported with `-o preserve` and exported to the format it came from
 * writes the stored source bytes instead of re-encoding (to a directory each source file at its
 * relative path, to a stream the raws in order); a compact record store exports its records' bytes.
 */
import { existsSync, mkdirSync, statSync } from 'node:fs';
import { dirname, resolve, sep } from 'node:path';
import type { Writable } from 'node:stream';
import { ConflictError, InvalidInputError, NotFoundError, pathError, UnavailableError } from '../../lib/errors.js';
import { assertReplaceable, DurableFile, renameDurably } from '../../lib/durable.js';
import { isInsideOrSame } from '../../lib/real-path.js';
import { redactUserInfo } from '../../lib/redact.js';
import { Checkpoint } from '../../lib/checkpoint.js';
import { reimportableJson } from '../../lib/json-text.js';
import { contentName } from '../formats/common/documents.js';
import type { Logger } from '../../lib/log.js';
import type { ProgressFactory, ProgressSink } from '../../lib/progress.js';
import { readSnapshot, requireManifest, type Snapshot } from '../dataset/layout.js';
import { placeOf, resolveDataset, type DatasetLocation, type ResolveContext } from '../pins/resolve.js';
import type { S3Place } from '../pins/pins.js';
import { relationRowGroups, type Row } from '../dataset/parquet.js';
import { LocalObjectStore, type ObjectStore, type ObjectWriter } from '../dataset/store.js';
import { OUTPUT_FORMATS, loadFormat } from '../formats/registry.js';
import type { ExportFormat } from './formats.js';
import type { Storyline } from '../storyline/schema.js';
import { storylineFromRows, type CellParser, type StoredCall, type StoredTurn } from '../dataset/rows.js';
import { localRootOf, openLocalRoot, type OpenDataset } from '../dataset/open.js';
import { REFERS, storedRowGroups } from '../dataset/resolve.js';
import { parseStoredJson, resolveText } from '../dataset/contents.js';
import { readingOrderLookup } from '../dataset/content-lookup.js';
import { filters, selectDocuments, type ExportFilter } from './select.js';
import { trackedFile, type Target } from './target.js';
import { checkDestination, moveInto } from './merge.js';
import { removeKilledExports, stageBeside, stageInside } from './staging.js';


export interface ExportOptions {
  /** The DATASET argument: a path, a pin, or undefined for the default dataset. */
  from: string | undefined;
  /** `-` for stdout, a file path (JSONL), or a directory (existing, or ending in `/`). */
  to: string;
  outputFormat: ExportFormat;
  overwrite: boolean;
  /** Only the runs it selects (`--document-id`, `--run-id`, `--session-id`, `--match`, `--where`). */
  filter?: ExportFilter;
  stdout: Writable;
  log: Logger;
  signal: AbortSignal;
  progress?: ProgressFactory;
}

export interface ExportSummary {
  dataset: string;
  snapshot_id: string;
  target: string;
  format: ExportFormat;
  documents: number;
  bytes: number;
  /** `raw` when the stored source bytes were written, `encoded` otherwise. */
  path: 'raw' | 'encoded';
  /** Whether filters chose the runs (then `documents` is how many they selected). */
  filtered: boolean;
}

function write(stream: Writable, chunk: Buffer | string): Promise<void> {
  if (stream.write(chunk)) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const done = (error?: Error): void => {
      stream.off('drain', done);
      stream.off('error', done);
      if (error) reject(error);
      else resolve();
    };
    stream.once('drain', () => done());
    stream.once('error', done);
  });
}

/** Runs a write to the target `subject` (`-t out.jsonl`), its fs error named by it: a write's error (ENOSPC) names no path. */
async function naming<T>(subject: string, write: () => Promise<T>): Promise<T> {
  try {
    return await write();
  } catch (error) {
    throw pathError(error, subject);
  }
}

/**
 * The commit of a create-only export finding its target taken (`renameExclusive`): another export,
 * or anyone, made it while this one ran, after the check at the start found the name free.
 */
function takenMeanwhile(error: unknown, shown: string, hint: string): unknown {
  const code = (error as NodeJS.ErrnoException).code;
  return code === 'EEXIST' || code === 'ENOTEMPTY' ? new ConflictError(`${shown}: already exists: made while this export ran`, { hint }) : error;
}

const STDOUT = '-t - (stdout)';

function streamTarget(stdout: Writable): Target {
  // Listened to for the whole export: a failed write (ENOSPC on a full device) is reported after
  // write() has returned, and fails the export at the next write or at the end.
  let failed: Error | undefined;
  const onError = (error: Error): void => {
    failed ??= error;
  };
  stdout.on('error', onError);
  const check = (): void => {
    if (failed) throw pathError(failed, STDOUT);
  };
  const target: Target = {
    isDirectory: false,
    written: 0,
    append: async (bytes) => {
      check();
      target.written += Buffer.byteLength(bytes);
      await naming(STDOUT, () => write(stdout, bytes));
      check();
    },
    file: () => Promise.reject(new Error('not a directory target')),
    openFile: () => {
      throw new Error('not a directory target');
    },
    commit: async () => {
      // The last write's error arrives on a later turn of the event loop.
      await new Promise((resolve) => setImmediate(resolve));
      stdout.off('error', onError);
      check();
    },
    abort: () => {
      stdout.off('error', onError);
    },
  };
  return target;
}

function fileTarget(path: string, overwrite: boolean): Target {
  if (existsSync(path) && !overwrite) throw new ConflictError(`-t ${path}: already exists`, { hint: 'choose a new target, or add --overwrite' });
  assertReplaceable(path, `-t ${path}`);
  mkdirSync(dirname(path), { recursive: true });
  removeKilledExports(path);
  const staging = stageBeside(path);
  let file: DurableFile;
  try {
    // Without --overwrite the commit takes the name only while it is free: of exports started
    // together, the first to commit keeps it and the others are refused.
    file = new DurableFile(path, { temp: staging.content, exclusive: !overwrite });
  } catch (error) {
    staging.remove();
    throw error;
  }
  const target: Target = {
    isDirectory: false,
    written: 0,
    append: async (bytes) => {
      const buffer = typeof bytes === 'string' ? Buffer.from(bytes, 'utf8') : bytes;
      target.written += buffer.length;
      await naming(`-t ${path}`, async () => file.write(buffer));
    },
    file: () => Promise.reject(new Error('not a directory target')),
    openFile: () => {
      throw new Error('not a directory target');
    },
    commit: () =>
      naming(`-t ${path}`, async () => {
        try {
          file.commit();
        } catch (error) {
          throw takenMeanwhile(error, `-t ${path}`, 'choose a new target, or add --overwrite');
        } finally {
          staging.remove();
        }
      }),
    abort: () => {
      file.abort();
      staging.remove();
    },
  };
  return target;
}

/**
 * Renames the staged directory to `dir`, which was free when the export started, only while it still
 * is: a directory another export (or anyone) made there meanwhile, even an empty one, is never
 * replaced, with --overwrite too, which replaces files in a directory, never a whole one.
 */
function publishNewDirectory(staged: string, dir: string): void {
  try {
    renameDurably(staged, dir, { exclusive: true });
  } catch (error) {
    throw takenMeanwhile(error, `-t ${dir}`, 'export again: into the directory now there, or to a new one');
  }
}

/**
 * One file per document under `dir`, written into a hidden staging directory (staging.ts) and
 * moved in by `commit`: an export stopped part-way (a signal, a full disk, a conflict) leaves no
 * directory, and no files in one, that look like a whole export. A new directory is the staging's
 * content renamed; an existing one gets the staged files moved into it all or nothing (merge.ts).
 */
function directoryTarget(dir: string, overwrite: boolean): Target {
  const existed = existsSync(dir);
  removeKilledExports(dir);
  const staging = existed ? stageInside(dir) : stageBeside(dir);
  const pending = new Set<ObjectWriter>();
  const staged: string[] = [];
  try {
    mkdirSync(staging.content);
  } catch (error) {
    staging.remove();
    throw error;
  }
  const store = new LocalObjectStore(staging.content);
  const claim = (relPath: string): string => {
    const full = resolve(dir, relPath);
    if (!full.startsWith(resolve(dir) + sep)) throw new InvalidInputError(`refusing to write ${JSON.stringify(relPath)} outside ${dir}`);
    const key = relPath.split(sep).join('/');
    // Checked again before anything moves in: a conflict found now stops the export before it reads on.
    if (existed) checkDestination(dir, key, overwrite);
    staged.push(key);
    return key;
  };
  const target: Target = {
    isDirectory: true,
    written: 0,
    append: () => Promise.reject(new Error('not a stream target')),
    file: async (relPath, bytes) => {
      const key = claim(relPath);
      target.written += Buffer.byteLength(bytes);
      await naming(`-t ${dir}`, () => store.put(key, bytes));
    },
    openFile: (relPath) => trackedFile(store.writer(claim(relPath)), target, pending, (error) => pathError(error, `-t ${dir}`)),
    commit: () =>
      naming(`-t ${dir}`, async () => {
        if (existed) moveInto(staging.content, dir, staged, overwrite);
        else publishNewDirectory(staging.content, dir);
        staging.remove();
      }),
    abort: () => {
      for (const writer of pending) writer.abort();
      staging.remove();
    },
  };
  return target;
}

function openTarget(options: ExportOptions): Target {
  if (options.to === '-') return streamTarget(options.stdout);
  const path = resolve(options.to);
  try {
    const isDir = options.to.endsWith('/') || options.to.endsWith(sep) || (existsSync(path) && statSync(path).isDirectory());
    return isDir ? directoryTarget(path, options.overwrite) : fileTarget(path, options.overwrite);
  } catch (error) {
    // What cannot be made there (a read-only directory) is named as the target, not as its temporary.
    throw pathError(error, `-t ${path}`);
  }
}

/** Rows of a relation of the snapshot, one row group at a time. */
const asBuffer = (value: unknown): Buffer => (value instanceof Uint8Array ? Buffer.from(value.buffer, value.byteOffset, value.byteLength) : Buffer.from(String(value ?? ''), 'utf8'));

/** Raw bytes grouped by relative path, written as files (directory) or concatenated (stream). */
async function writeRaw(rows: AsyncIterable<Row[]>, pathColumn: string, target: Target, signal: AbortSignal, progress: ProgressSink | undefined): Promise<number> {
  let count = 0;
  let current: { path: string; writer: ObjectWriter } | undefined;
  const checkpoint = new Checkpoint(signal);
  try {
    for await (const group of rows) {
      for (const row of group) {
        await checkpoint.check();
        const bytes = asBuffer(row.raw);
        count += 1;
        progress?.add(1, bytes.length);
        if (!target.isDirectory) {
          await target.append(bytes);
          continue;
        }
        // A compressed source was stored as its content, so it is written under its content's name.
        const path = contentName(String(row[pathColumn]));
        if (current?.path !== path) {
          await current?.writer.commit();
          current = { path, writer: target.openFile(path) };
        }
        current.writer.write(bytes);
      }
    }
    await current?.writer.commit();
  } catch (error) {
    current?.writer.abort();
    throw error;
  }
  return count;
}

/** True when every source document kept its bytes and came from `format`: the byte-exact path applies. */
async function preservedAs(store: ObjectStore, snapshot: Snapshot, format: string): Promise<boolean> {
  if ((snapshot.rows.sources ?? 0) === 0) return false;
  for await (const group of relationRowGroups(store, snapshot, 'sources', ['format', 'sha256'])) {
    for (const row of group) if (row.format !== format || row.sha256 === null || row.sha256 === undefined) return false;
  }
  return true;
}

/** Rows of a relation one at a time (row groups flattened). */
async function* rowsOf(groups: AsyncIterable<Row[]>): AsyncGenerator<Row> {
  for await (const group of groups) yield* group;
}

const TURN_COLUMNS = ['document_id', 'message_json', 'reasoning_content', 'observation_json', 'turn_json'];
const CALL_COLUMNS = ['document_id', 'tool_call_id', 'result_json', 'extra_json'];
const RUN_COLUMNS = ['document_id', 'step_count', 'tool_call_count', 'document_json'];

/**
 * Storyline documents rebuilt from `runs`, `steps` and `tool_calls`, read side by side: the three
 * relations hold a document's rows in the same order (one runs row, its `step_count` steps rows,
 * its `tool_call_count` tool_calls rows), so one row group of each is in memory at a time. Values
 * in the content store come back through `lookup`.
 */
async function* storylines(dataset: OpenDataset, signal: AbortSignal, keep?: ReadonlySet<string>): AsyncGenerator<Storyline> {
  const { store, snapshot } = dataset;
  const lookup = readingOrderLookup(dataset.db, dataset.uri);
  // A document's rows all come from one import, so its runs row says how all of them are stored.
  const resolving: CellParser = (text) => parseStoredJson(text, lookup);
  const steps = rowsOf(storedRowGroups(store, snapshot, 'steps', TURN_COLUMNS));
  const calls = rowsOf(storedRowGroups(store, snapshot, 'tool_calls', CALL_COLUMNS));
  const broken = (documentId: unknown, relation: string): Error =>
    new UnavailableError(`${store.uri}: snapshot ${snapshot.id}: the ${relation} rows of document ${JSON.stringify(documentId)} are missing or out of order`);
  try {
    for await (const group of storedRowGroups(store, snapshot, 'runs', RUN_COLUMNS)) {
      if (signal.aborted) throw signal.reason;
      for (const run of group) {
        const turns: StoredTurn[] = [];
        for (let n = Number(run.step_count); n > 0; n--) {
          const next = await steps.next();
          if (next.done || next.value.document_id !== run.document_id) throw broken(run.document_id, 'steps');
          turns.push(next.value as unknown as StoredTurn);
        }
        const toolCalls: StoredCall[] = [];
        for (let n = Number(run.tool_call_count); n > 0; n--) {
          const next = await calls.next();
          if (next.done || next.value.document_id !== run.document_id) throw broken(run.document_id, 'tool_calls');
          toolCalls.push(next.value as unknown as StoredCall);
        }
        // Rows of a run the filters did not take are read past (the relations are read side by side), never rebuilt.
        if (keep && !keep.has(String(run.document_id))) continue;
        let doc: Storyline;
        try {
          const refers = (run as { [REFERS]?: true })[REFERS] === true;
          if (refers) for (const turn of turns) turn.reasoning_content = resolveText(turn.reasoning_content, lookup);
          doc = storylineFromRows(String(run.document_json), turns, toolCalls, refers ? resolving : JSON.parse);
        } catch (error) {
          throw new UnavailableError(`${store.uri}: snapshot ${snapshot.id}: document ${JSON.stringify(run.document_id)} cannot be rebuilt: ${(error as Error).message}`);
        }
        yield doc;
      }
    }
  } finally {
    await steps.return(undefined);
    await calls.return(undefined);
  }
}

/** `name`, or `name-2`, `name-3`... before the extension when it is taken. */
function uniqueName(name: string, used: Set<string>): string {
  if (!used.has(name)) {
    used.add(name);
    return name;
  }
  const dot = name.indexOf('.') > 0 ? name.indexOf('.') : name.length;
  for (let n = 2; ; n++) {
    const candidate = `${name.slice(0, dot)}-${n}${name.slice(dot)}`;
    if (!used.has(candidate)) {
      used.add(candidate);
      return candidate;
    }
  }
}

/** The object store place of an `s3://` target; refused inside the dataset being exported, as a local one is. */
async function objectPlaceOf(rc: ResolveContext, to: string, source: DatasetLocation): Promise<S3Place> {
  const target = await resolveDataset(to, { ...rc, purpose: 'write' });
  if (target.kind !== 's3') throw new InvalidInputError(`-t ${redactUserInfo(to)}: not an object-store location`);
  const place = placeOf(target);
  if (source.kind === 's3' && source.bucket === place.bucket && (source.prefix === '' || place.prefix === source.prefix || place.prefix.startsWith(`${source.prefix}/`))) {
    throw new InvalidInputError(`-t ${place.uri}: inside the dataset being exported (${source.uri}); export writes outside it`);
  }
  return place;
}

export async function runExport(rc: ResolveContext, options: ExportOptions): Promise<ExportSummary> {
  // Not a local path named `s3:`: another scheme is refused before anything is read or written.
  const toObjectStore = /^s3:\/\//i.test(options.to);
  if (!toObjectStore && /^[a-z][a-z0-9+.-]*:\/\//i.test(options.to)) {
    throw new InvalidInputError(`-t ${redactUserInfo(options.to)}: export writes a local file or directory, an object (s3://bucket/key) or objects under a prefix (s3://bucket/prefix/), or stdout (-t -)`);
  }
  const location = await resolveDataset(options.from, { ...rc, purpose: 'read' });
  const objectTarget = toObjectStore ? await objectPlaceOf(rc, options.to, location) : undefined;
  const local = await localRootOf(location, rc.env, rc.signal);
  const { root, shown, store } = local;
  if (!existsSync(root)) throw new NotFoundError(`-f ${shown}: no such dataset`);
  // Written into, the dataset would lose its own files (an export over trajstore.json) or gain
  // foreign ones, which drop then refuses to remove.
  if (options.to !== '-' && !toObjectStore && isInsideOrSame(options.to, root)) {
    throw new InvalidInputError(`-t ${options.to}: inside the dataset being exported (${shown}); export writes outside it`);
  }
  const manifest = await requireManifest(store);
  const snapshot = await readSnapshot(store, manifest.snapshot_id);
  let path: ExportSummary['path'] = 'encoded';
  let dataset: OpenDataset | undefined;
  if (manifest.kind === 'compact' && options.outputFormat !== 'compact-jsonl') {
    throw new InvalidInputError(`-o ${options.outputFormat}: ${shown} is a compact record store; it exports only as compact-jsonl`);
  }
  if (manifest.kind === 'storyline' && options.outputFormat === 'compact-jsonl') {
    throw new InvalidInputError(`-o compact-jsonl: ${shown} is a Storyline dataset; compact-jsonl exports compact record stores only`, { hint: `use one of: ${OUTPUT_FORMATS.join(', ')}` });
  }
  const filtered = filters(options.filter);
  if (filtered && manifest.kind === 'compact') {
    throw new InvalidInputError(`${shown} is a compact record store: --document-id, --run-id, --session-id, --match and --where select runs of Storyline datasets`, {
      hint: 'select records with `trajstore query` over dataset.records',
    });
  }
  const format = options.outputFormat === 'compact-jsonl' ? undefined : await loadFormat(options.outputFormat);
  // The runs are chosen before the target is opened, so a bad --where or --match leaves nothing behind.
  dataset = filtered ? await openLocalRoot(local, rc.env) : undefined;
  let keep: Set<string> | undefined;
  let target: Target;
  try {
    keep = dataset ? selectDocuments(dataset, options.filter as ExportFilter) : undefined;
    target = objectTarget
      ? await (await import('./s3-target.js')).openObjectTarget({ place: objectTarget, env: rc.env, signal: options.signal, directory: options.to.endsWith('/'), overwrite: options.overwrite })
      : openTarget(options);
  } catch (error) {
    dataset?.close();
    throw error;
  }
  const progress = options.progress?.({ label: 'export', unit: 'documents' });
  let documents = 0;
  let exported = snapshot;
  try {
    if (manifest.kind === 'compact') {
      path = 'raw';
      documents = await writeRaw(relationRowGroups(store, snapshot, 'records', ['filename', 'raw']), 'filename', target, options.signal, progress);
    } else if (!filtered && (await preservedAs(store, snapshot, options.outputFormat))) {
      path = 'raw';
      documents = await writeRaw(relationRowGroups(store, snapshot, 'sources', ['source_path', 'raw']), 'source_path', target, options.signal, progress);
    } else {
      const used = new Set<string>();
      const checkpoint = new Checkpoint(options.signal);
      // The documents come from the snapshot its index describes: the index holds the content store.
      dataset ??= await openLocalRoot(local, rc.env);
      exported = dataset.snapshot;
      for await (const encoded of format!.encode!(storylines(dataset, options.signal, keep))) {
        await checkpoint.check();
        // A stream's documents are its lines.
        documents += target.isDirectory ? 1 : (encoded.lines?.length ?? 1);
        if (target.isDirectory) {
          const text = `${reimportableJson(encoded.value, 2)}\n`;
          await target.file(uniqueName(encoded.name, used), text);
          progress?.add(1, Buffer.byteLength(text));
        } else {
          const text = (encoded.lines ?? [encoded.value]).map((value) => `${reimportableJson(value)}\n`).join('');
          await target.append(text);
          progress?.add(1, Buffer.byteLength(text));
        }
      }
    }
    await target.commit();
  } catch (error) {
    target.abort();
    throw error;
  } finally {
    progress?.done();
    dataset?.close();
  }
  return { dataset: shown, snapshot_id: exported.id, target: options.to, format: options.outputFormat, documents, bytes: target.written, path, filtered };
}
