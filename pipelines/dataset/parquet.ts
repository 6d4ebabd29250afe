/**
 * Parquet parts: the schema of each relation derived from relations.ts, a streaming part writer
 * (one row group per batch, flushed to the store as it goes), and a reader that yields one row
 * group at a time so memory is bounded by the largest row group, not the part.
 *
 * Types: string and json -> BYTE_ARRAY UTF8 (JSON as text, so every reader sees a string), int64 ->
 * INT64 (written from BigInt), double -> DOUBLE, bool -> BOOLEAN, binary -> BYTE_ARRAY. Non-nullable
 * columns are REQUIRED. Compression: ZSTD for the text, JSON and binary columns, which hold nearly
 * all the bytes; SNAPPY for the small typed and dictionary-encoded columns, whose pages are a few
 * hundred bytes, where Node's zstd spends more setting up each call (about 20 µs, measured) than it
 * saves (those columns are under a twentieth of a part). Every engine that reads Parquet reads both;
 * parts of earlier layouts are all SNAPPY.
 */
import { ByteWriter, ParquetWriter } from 'hyparquet-writer';
import { snappyCompressor, snappyUncompressor } from 'hysnappy';
import { createHash } from 'node:crypto';
import { constants as zlib, zstdCompressSync, zstdDecompressSync } from 'node:zlib';
import { parquetMetadataAsync, parquetReadObjects, type AsyncBuffer, type FileMetaData, type SchemaElement } from 'hyparquet';
import { InvalidInputError, ToolError } from '../../lib/errors.js';
import type { PartRef, Snapshot } from './layout.js';
import { RETIRE_KEY, type ColumnDef, type Relation } from './relations.js';
import type { ObjectStore, ObjectWriter } from './store.js';

export type Row = Record<string, unknown>;

/**
 * Rows as one flat array of cells, row after row in column order: the form in which batches cross to
 * the storage thread and are written, because cloning an array of values costs far less than cloning
 * objects with their keys.
 */
export function flatCells(columns: readonly ColumnDef[], rows: readonly Row[]): unknown[] {
  const cells: unknown[] = new Array(rows.length * columns.length);
  let k = 0;
  for (const row of rows) for (const column of columns) cells[k++] = row[column.name];
  return cells;
}

function schemaElement(column: ColumnDef): SchemaElement {
  const repetition_type = column.nullable ? 'OPTIONAL' : 'REQUIRED';
  switch (column.type) {
    case 'string':
    case 'json':
      return { name: column.name, type: 'BYTE_ARRAY', converted_type: 'UTF8', repetition_type };
    case 'int64':
      return { name: column.name, type: 'INT64', repetition_type };
    case 'double':
      return { name: column.name, type: 'DOUBLE', repetition_type };
    case 'bool':
      return { name: column.name, type: 'BOOLEAN', repetition_type };
    case 'binary':
      return { name: column.name, type: 'BYTE_ARRAY', repetition_type };
  }
}

export function parquetSchemaOf(columns: readonly ColumnDef[]): SchemaElement[] {
  return [{ name: 'schema', num_children: columns.length }, ...columns.map(schemaElement)];
}

/** A row value as the Parquet column wants it; throws naming the column when it cannot be. */
function cell(column: ColumnDef, value: unknown): unknown {
  if (value === undefined || value === null) {
    if (!column.nullable) throw new Error(`column ${column.name} is required`);
    return null;
  }
  switch (column.type) {
    case 'int64':
      return typeof value === 'bigint' ? value : BigInt(Math.trunc(Number(value)));
    case 'double':
      return Number(value);
    case 'bool':
      return Boolean(value);
    case 'binary':
      return value instanceof Uint8Array ? value : Buffer.from(String(value), 'utf8');
    case 'json':
      return typeof value === 'string' ? value : JSON.stringify(value);
    case 'string':
      return String(value);
  }
}

/**
 * Min/max statistics let readers skip row groups by number, time or id. The writer keeps each row
 * group's min and max values whole in memory until the part closes, so free text (messages, tool
 * output, JSON, bytes) gets none: memory stays bounded by the batch, not by the part.
 */
function withStatistics(column: ColumnDef): boolean {
  if (column.type === 'int64' || column.type === 'double' || column.type === 'bool') return true;
  return column.type === 'string' && /(^id$|_id$|_at$|^timestamp$|^source_path$|^filename$|^format$|^source_format$|^source$|^effective_kind$|_name$|^kind$|^status$)/.test(column.name);
}

/**
 * The longest min or max value a row group's statistics carry (parquet-cpp's default
 * max_statistics_size). An id or path can be any length: a batch of rows with 512 KiB ids kept two
 * of them per column and row group until the part closed, and exhausted the storage thread's heap.
 * Past this, a column chunk has no statistics, as parquet-cpp writes it; readers then read it.
 */
const MAX_STATISTICS_BYTES = 4096;

function fitsStatistics(cells: readonly unknown[]): boolean {
  // A string of n UTF-16 units takes at most 3n bytes of UTF-8: most cells are not measured.
  for (const cell of cells) if (typeof cell === 'string' && cell.length * 3 > MAX_STATISTICS_BYTES && Buffer.byteLength(cell) > MAX_STATISTICS_BYTES) return false;
  return true;
}

/**
 * The text cells of a column UTF-8 encoded into one buffer, each cell a view into it: the writer would
 * otherwise encode every cell into an ArrayBuffer of its own, thousands of small external allocations
 * per batch for the garbage collector (a few percent of the thread writing the parts, measured).
 */
function utf8Cells(cells: unknown[]): unknown[] {
  let total = 0;
  for (const cell of cells) if (typeof cell === 'string') total += Buffer.byteLength(cell, 'utf8');
  const buffer = Buffer.allocUnsafe(total);
  let at = 0;
  for (let i = 0; i < cells.length; i++) {
    const cell = cells[i];
    if (typeof cell !== 'string') continue;
    const end = at + buffer.write(cell, at, 'utf8');
    cells[i] = buffer.subarray(at, end);
    at = end;
  }
  return cells;
}

const FLUSH_BYTES = 1 << 20;
/**
 * zstd level 3, zstd's default: on the benchmark corpora (bench/import-export) level 1 made parts 3%
 * larger for no time saved, level 6 saved under 1% more and cost a tenth more CPU (measured).
 */
const ZSTD_LEVEL = 3;
const compressZstd = (bytes: Uint8Array): Uint8Array => zstdCompressSync(bytes, { params: { [zlib.ZSTD_c_compressionLevel]: ZSTD_LEVEL } });
/** One WebAssembly instance for every part of the process, made on first use: its memory grows to the largest page only once. */
let snappyWriter: ((bytes: Uint8Array) => Uint8Array) | undefined;
const compressSnappy = (bytes: Uint8Array): Uint8Array => (snappyWriter ??= snappyCompressor())(bytes);

/** hyparquet-writer's ByteWriter, draining to a store writer whenever its buffer passes 1 MiB, hashing what it drains (PartRef.sha256). */
class DrainingWriter extends ByteWriter {
  readonly sha256 = createHash('sha256');
  constructor(private readonly sink: ObjectWriter) {
    super(FLUSH_BYTES * 2);
  }
  override ensure(size: number): void {
    if (this.index > FLUSH_BYTES) this.drain();
    super.ensure(size);
  }
  drain(): void {
    if (this.index === 0) return;
    const bytes = new Uint8Array(this.buffer, 0, this.index);
    this.sha256.update(bytes);
    this.sink.write(bytes);
    this.index = 0;
  }
  flush(): void {
    this.drain();
  }
  override finish(): void {
    this.drain();
  }
}

/** One Parquet part being written: append row batches, then `close` to publish it under its key. */
export class PartWriter {
  private readonly sink: ObjectWriter;
  private readonly bytes: DrainingWriter;
  private readonly parquet: ParquetWriter;
  private rowCount = 0;
  private groupCount = 0;

  constructor(
    store: ObjectStore,
    readonly key: string,
    private readonly columns: readonly ColumnDef[],
    kvMetadata: Array<{ key: string; value: string }> = [],
  ) {
    this.sink = store.writer(key);
    this.bytes = new DrainingWriter(this.sink);
    this.parquet = new ParquetWriter({
      writer: this.bytes,
      schema: parquetSchemaOf(columns),
      codec: 'ZSTD',
      compressors: { ZSTD: compressZstd, SNAPPY: compressSnappy },
      kvMetadata,
      createdBy: 'trajstore',
    });
  }

  get rows(): number {
    return this.rowCount;
  }

  get rowGroups(): number {
    return this.groupCount;
  }

  /** Bytes written to the store so far (the part grows by about one batch per call). */
  get size(): number {
    return this.sink.size + this.bytes.index;
  }

  /** Writes rows given as `flatCells` (row after row, each in the part's column order) as one row group. */
  async writeCells(cells: readonly unknown[]): Promise<void> {
    const width = this.columns.length;
    if (cells.length % width !== 0) throw new Error(`${this.key}: cells do not make whole rows`);
    const rows = cells.length / width;
    if (rows === 0) return;
    const columnData = this.columns.map((column, j) => {
      const statistics = withStatistics(column);
      // JSON, binary and free text (string without statistics) cells are large and rarely repeat:
      // no dictionary attempt (its sampling and hashing cost time and win nothing on them).
      const plain = column.type === 'json' || column.type === 'binary' || (column.type === 'string' && !statistics);
      const data: unknown[] = new Array(rows);
      try {
        for (let i = 0; i < rows; i++) data[i] = cell(column, cells[i * width + j]);
      } catch (error) {
        throw new Error(`${this.key}: ${(error as Error).message}`);
      }
      // Only plain columns: dictionary keys and statistics need the cells as strings.
      return {
        name: column.name,
        statistics: statistics && (column.type !== 'string' || fitsStatistics(data)),
        data: plain && column.type !== 'binary' ? utf8Cells(data) : data,
        ...(plain ? { encoding: 'PLAIN' as const } : { codec: 'SNAPPY' as const }),
      };
    });
    await this.parquet.write({ columnData, rowGroupSize: rows });
    this.rowCount += rows;
    this.groupCount += 1;
  }

  async close(): Promise<PartRef> {
    await this.parquet.finish();
    const bytes = this.sink.size;
    const sha256 = this.bytes.sha256.digest('hex');
    await this.sink.commit();
    return { key: this.key, rows: this.rowCount, bytes, sha256 };
  }

  abort(): void {
    this.sink.abort();
  }
}

function asyncBufferOf(store: ObjectStore, key: string, byteLength: number): AsyncBuffer {
  return {
    byteLength,
    async slice(start: number, end?: number): Promise<ArrayBuffer> {
      const bytes = await store.getRange(key, start, end ?? byteLength);
      return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
    },
  };
}

export interface PartReader {
  metadata: FileMetaData;
  /** Written with references to the content store (layout 5 on; contents.ts), not whole values. */
  refersToContents: boolean;
  /** Row groups in order, each as row objects; INT64 values come back as BigInt, binary as Uint8Array. */
  rowGroups(columns?: string[]): AsyncGenerator<Row[]>;
}

/** Key-value metadata of every part written with references to the content store. */
export const CONTENT_REFS_METADATA = { key: 'trajstore.contents', value: 'refs' } as const;

/** Decompressors of the parts' codecs: ZSTD from layout 5 on, SNAPPY before (one WebAssembly instance, created on first use). */
let snappy: ((input: Uint8Array, outputLength: number) => Uint8Array) | undefined;
const decompressors = {
  ZSTD: (input: Uint8Array): Uint8Array => zstdDecompressSync(input),
  SNAPPY: (input: Uint8Array, outputLength: number): Uint8Array => (snappy ??= snappyUncompressor())(input, outputLength),
};

export async function openPart(store: ObjectStore, key: string): Promise<PartReader> {
  // A part missing or that does not parse is a damaged dataset, not a fault of this program: say
  // which part; unless the store holds a copy it can fetch again (`damagedPart`).
  const size = await store.size(key);
  if (size === undefined) throw store.damagedPart?.(key, 'missing') ?? new InvalidInputError(`${store.uri}: part ${key} is missing (the snapshot lists it: the dataset is damaged)`);
  const file = asyncBufferOf(store, key, size);
  // The store's own errors (a bucket that stopped answering, a signal) stay what they are.
  const damaged = (error: unknown): Error =>
    error instanceof ToolError
      ? error
      : (store.damagedPart?.(key, 'not a readable Parquet file') ?? new InvalidInputError(`${store.uri}: part ${key} is not a readable Parquet file (${(error as Error).message}): the dataset is damaged`));
  const metadata = await parquetMetadataAsync(file).catch((error: unknown) => {
    throw damaged(error);
  });
  // A part written by an earlier layout may lack columns added since: rows come back without them.
  const present = new Set(metadata.schema.map((element) => element.name));
  return {
    metadata,
    refersToContents: (metadata.key_value_metadata ?? []).some((kv) => kv.key === CONTENT_REFS_METADATA.key && kv.value === CONTENT_REFS_METADATA.value),
    async *rowGroups(columns?: string[]): AsyncGenerator<Row[]> {
      const wanted = columns?.filter((name) => present.has(name));
      let start = 0;
      for (const group of metadata.row_groups) {
        const end = start + Number(group.num_rows);
        const rows = await parquetReadObjects({ file, metadata, rowStart: start, rowEnd: end, utf8: false, compressors: decompressors, ...(wanted ? { columns: wanted } : {}) }).catch((error: unknown) => {
          throw damaged(error);
        });
        yield rows as Row[];
        start = end;
      }
    },
  };
}

/** The parts of a relation in a snapshot, in order, opened; rows the snapshot retired (PartRef.retired) are left out. */
export async function* relationParts(store: ObjectStore, snapshot: Snapshot, relation: Relation): AsyncGenerator<PartReader> {
  for (const part of snapshot.relations[relation] ?? []) {
    const reader = await openPart(store, part.key);
    const key = RETIRE_KEY[relation];
    yield part.retired?.length && key ? withoutRetired(reader, key, new Set(part.retired)) : reader;
  }
}

/** A part's reader that leaves out the rows whose `key` column is in `retired` (reading that column when not asked for). */
function withoutRetired(reader: PartReader, key: string, retired: ReadonlySet<string>): PartReader {
  return {
    ...reader,
    async *rowGroups(columns?: string[]): AsyncGenerator<Row[]> {
      const extra = columns !== undefined && !columns.includes(key);
      for await (const rows of reader.rowGroups(extra ? [...columns, key] : columns)) {
        const kept = rows.filter((row) => !retired.has(row[key] as string));
        if (extra) for (const row of kept) delete row[key];
        yield kept;
      }
    },
  };
}

/** The row groups of every part of a relation in a snapshot, in order (only `columns` when given). */
export async function* relationRowGroups(store: ObjectStore, snapshot: Snapshot, relation: Relation, columns?: string[]): AsyncGenerator<Row[]> {
  for await (const reader of relationParts(store, snapshot, relation)) yield* reader.rowGroups(columns);
}
