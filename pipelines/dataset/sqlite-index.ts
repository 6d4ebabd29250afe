/**
 * The derived SQLite index of a dataset: one table per relation with the columns of relations.ts
 * (TEXT for string/json, INTEGER for int64/bool, REAL for double, BLOB for binary), an FTS5 index
 * over step text (`steps_fts`, external content on `steps`; tokens as fts-text.ts cuts them), and
 * `index_meta` (snapshot_id, index_format, layout_version, kind, fts_available, tokenizer, built_at).
 * The relations whose cells refer to the content store (`runs`, `steps`, `tool_calls`) are stored
 * in `<relation>_stored` with those references, and read through a view named like the relation
 * that puts the values back from `contents` (contents.ts): what SQL sees is what the source had.
 *
 * An index is always built in a temporary file and renamed into place, so a reader never opens a
 * half-built one; `index_meta.snapshot_id` says which snapshot it describes, and a mismatch with the
 * manifest means stale (rebuilt from the parts by open.ts).
 */
import { openDatabase, type SqliteDatabase, type SqliteStatement } from './sqlite.js';
import { copyFileSync, rmSync } from 'node:fs';
import { FTS_TEXT_COLUMNS, FTS_TOKENIZE, TOKENIZER_NAME, ftsText } from './fts-text.js';
import { INDEX_FORMAT } from './index-meta.js';
import { LAYOUT_VERSION, type DatasetKind, type Snapshot } from './layout.js';
import { flatCells, relationParts, type Row } from './parquet.js';
import { RECORDS, REFERRING_RELATIONS, RETIRE_KEY, STORYLINE_RELATIONS, holdsContent, storedTable, type ColumnDef, type Relation } from './relations.js';
import { ContentRefs } from './content-refs.js';
import type { ObjectStore } from './store.js';
import { fsyncPath, renameDurably, tempSiblingOf } from '../../lib/durable.js';
import type { ProgressFactory } from '../../lib/progress.js';

export type IndexDb = SqliteDatabase;

const SQL_TYPE: Record<ColumnDef['type'], string> = { string: 'TEXT', json: 'TEXT', int64: 'INTEGER', bool: 'INTEGER', double: 'REAL', binary: 'BLOB' };

export type RelationColumns = Partial<Record<Relation, readonly ColumnDef[]>>;

/** The columns of each relation of a dataset of this kind, as in its Parquet parts (compact stores add their user columns). */
export function relationColumns(kind: DatasetKind, compactColumns: readonly string[] = []): RelationColumns {
  if (kind === 'storyline') return { ...STORYLINE_RELATIONS };
  const user = compactColumns.map((name): ColumnDef => ({ name, type: 'json', nullable: true, description: `--column ${name}`, sql: true }));
  return { records: [...RECORDS, ...user] };
}

/** Of each relation's columns, those the index holds (relations.ts: `sql`). */
export function sqlColumns(columns: RelationColumns): RelationColumns {
  const out: RelationColumns = {};
  for (const [relation, cols] of Object.entries(columns) as Array<[Relation, readonly ColumnDef[]]>) out[relation] = cols.filter((c) => c.sql);
  return out;
}

const quote = (name: string): string => `"${name.replaceAll('"', '""')}"`;


/**
 * A column of a relation's view: what the stored cell refers to put back. A text cell in SQL; a
 * JSON cell (only one that holds a reference or an escape, found by the marker JSON writes as
 * `"\u0001`) with trajstore_json and the values SQL fetches for it (sqlite.ts).
 */
function viewColumn(column: ColumnDef): string {
  const c = quote(column.name);
  if (column.type === 'json') {
    const values = `(SELECT json_group_object(hash, value) FROM contents WHERE hash IN (SELECT value FROM json_each(trajstore_refs(${c}))))`;
    return `CASE WHEN instr(${c}, '"\\u0001') = 0 THEN ${c} ELSE trajstore_json(${c}, ${values}) END AS ${c}`;
  }
  if (column.content) {
    const rest = `substr(${c}, 2)`;
    return `CASE WHEN unicode(${c}) = 1 THEN CASE WHEN unicode(${rest}) = 1 THEN ${rest} ELSE (SELECT value FROM contents WHERE hash = ${rest}) END ELSE ${c} END AS ${c}`;
  }
  return c;
}

function sqlValue(column: ColumnDef, value: unknown): unknown {
  if (value === undefined || value === null) return null;
  switch (column.type) {
    case 'json':
      return typeof value === 'string' ? value : JSON.stringify(value);
    case 'bool':
      return value ? 1 : 0;
    case 'int64':
      return typeof value === 'bigint' ? value : Math.trunc(Number(value));
    case 'double':
      return Number(value);
    case 'binary':
      return value instanceof Uint8Array ? Buffer.from(value.buffer, value.byteOffset, value.byteLength) : Buffer.from(String(value));
    case 'string':
      return String(value);
  }
}

const FTS_COLUMNS = FTS_TEXT_COLUMNS;
const PAGE_SIZE = 16384;
const CACHE_KIB = 2048;
const FTS_AUTOMERGE = 16;
/** Keys per statement of `retire` (SQLite's default bound on parameters is 32766). */
const RETIRE_CHUNK = 500;

/** A writable index in a temporary file; `publish` renames it over the real one. Rows may carry every column; it keeps the `sql` ones. */
export class IndexBuilder {
  readonly db: IndexDb;
  /** Per relation: its columns as rows arrive (all of relations.ts), where the `sql` ones sit among them, and their insert. */
  private readonly inserts = new Map<Relation, { all: readonly ColumnDef[]; sql: readonly ColumnDef[]; positions: readonly number[]; stmt: SqliteStatement }>();
  /** Indexes the steps rows from a rowid on: as they are, or spaced through JavaScript. */
  private readonly fts: { plain: SqliteStatement; spaced: SqliteStatement } | undefined;
  readonly ftsAvailable: boolean;
  private closed = false;

  private constructor(
    readonly path: string,
    private readonly tempPath: string,
    readonly kind: DatasetKind,
    relationColumns: RelationColumns,
    fresh: boolean,
  ) {
    const columns = sqlColumns(relationColumns);
    this.db = openDatabase(tempPath);
    // A temporary file that is fsynced before its rename needs no journal of its own. better-sqlite3
    // opens connections in SQLite's defensive mode, which silently keeps the journal on (every batch
    // then wrote, and deleted, a rollback journal of the pages it touched), so it is lifted for this pragma.
    this.db.unsafeMode(true);
    const [journal] = this.db.pragma('journal_mode = OFF') as Array<{ journal_mode: string }>;
    this.db.unsafeMode(false);
    if (journal?.journal_mode !== 'off') throw new Error(`${tempPath}: SQLite kept journal_mode ${journal?.journal_mode}`);
    this.db.pragma('synchronous = OFF');
    // Inserts append, so a large page cache buys nothing: better-sqlite3's default (16 MB) raised an
    // import's peak RSS by about 50 MB and was no faster than this (measured).
    this.db.pragma(`cache_size = -${CACHE_KIB}`);
    if (fresh) {
      // Rows carry large JSON cells (tool output, messages) that spill into overflow pages:
      // bigger pages mean fewer of them to allocate and link (a few percent of index time, measured).
      this.db.pragma(`page_size = ${PAGE_SIZE}`);
      for (const [relation, cols] of Object.entries(columns) as Array<[Relation, readonly ColumnDef[]]>) {
        if (relation === 'contents') {
          this.db.exec('CREATE TABLE contents (hash TEXT PRIMARY KEY, value TEXT NOT NULL)');
          continue;
        }
        this.db.exec(`CREATE TABLE ${quote(storedTable(relation))} (${cols.map((c) => `${quote(c.name)} ${SQL_TYPE[c.type]}`).join(', ')})`);
        if (REFERRING_RELATIONS.has(relation)) {
          this.db.exec(`CREATE VIEW ${quote(relation)} AS SELECT rowid AS rowid, ${cols.map(viewColumn).join(', ')} FROM ${quote(storedTable(relation))}`);
        }
      }
      this.db.exec('CREATE TABLE index_meta (key TEXT PRIMARY KEY, value TEXT)');
      if (kind === 'storyline') {
        this.db.exec('CREATE INDEX runs_document ON runs_stored(document_id)');
        this.db.exec('CREATE INDEX runs_session ON runs_stored(session_id)');
        this.db.exec('CREATE INDEX steps_document ON steps_stored(document_id, turn_ordinal)');
        this.db.exec('CREATE INDEX tool_calls_document ON tool_calls_stored(document_id, turn_ordinal)');
        this.db.exec('CREATE INDEX events_trace ON events(source_path, ordinal)');
        try {
          this.db.exec(`CREATE VIRTUAL TABLE steps_fts USING fts5(${FTS_COLUMNS.join(', ')}, content='steps', content_rowid='rowid', tokenize='${FTS_TOKENIZE}')`);
          // Merge segments less eagerly than the default (4): each batch is its own transaction and
          // so its own segment, and merging them early rewrites the same token lists again and again
          // (about 20% of the FTS build time, measured). Queries still see few segments per level.
          this.db.exec(`INSERT INTO steps_fts (steps_fts, rank) VALUES ('automerge', ${FTS_AUTOMERGE})`);
        } catch (error) {
          // An SQLite without FTS5: find falls back to LIKE and reports fts_available = 0. Any other
          // failure (a full disk) is one: taken for a missing FTS5, it left a half-made table behind.
          if (!/no such module: fts5/.test((error as Error).message)) throw error;
        }
      } else {
        this.db.exec('CREATE INDEX records_id ON records(id)');
      }
    }
    this.ftsAvailable = (this.db.prepare("SELECT count(*) AS n FROM sqlite_master WHERE name = 'steps_fts'").get() as { n: number }).n > 0;
    for (const [relation, all] of Object.entries(relationColumns) as Array<[Relation, readonly ColumnDef[]]>) {
      const sql = columns[relation] ?? [];
      // A value the store holds already (an earlier file or import) is not stored again.
      const verb = relation === 'contents' ? 'INSERT OR IGNORE' : 'INSERT';
      const stmt = this.db.prepare(`${verb} INTO ${quote(storedTable(relation))} (${sql.map((c) => quote(c.name)).join(', ')}) VALUES (${sql.map(() => '?').join(', ')})`);
      this.inserts.set(relation, { all, sql, positions: sql.map((c) => all.indexOf(c)), stmt });
    }
    // A batch's steps rows are indexed from the view, in SQLite, so their text (put back from the
    // content store there) is not converted to and from JavaScript strings; only a batch with
    // Chinese, Japanese or Korean text, which the index must receive spaced out (fts-text.ts), goes
    // through JavaScript. Importers know which batches those are (rows.ts NEEDS_SPACING), where the
    // text is still whole. (So `steps_fts` must never be rebuilt from its content by FTS5's
    // 'rebuild': that would index it unspaced.)
    this.db.function('trajstore_fts', { deterministic: true }, (text: unknown) => (typeof text === 'string' ? ftsText(text) : text));
    const insert = (select: string): SqliteStatement => this.db.prepare(`INSERT INTO steps_fts (rowid, ${FTS_COLUMNS.join(', ')}) SELECT rowid, ${select} FROM steps WHERE rowid >= ?`);
    this.fts = this.ftsAvailable
      ? { plain: insert(FTS_COLUMNS.join(', ')), spaced: insert(FTS_COLUMNS.map((c) => `trajstore_fts(${quote(c)})`).join(', ')) }
      : undefined;
  }

  /** An index built in `tempPath` to replace `path`: new and empty, or (`fresh` false) a copy of `path` to add to. */
  static at(path: string, tempPath: string, kind: DatasetKind, columns: RelationColumns, fresh: boolean): IndexBuilder {
    if (!fresh) copyFileSync(path, tempPath);
    return new IndexBuilder(path, tempPath, kind, columns, fresh);
  }

  /** A new empty index that will replace `path`. */
  static create(path: string, kind: DatasetKind, columns: RelationColumns): IndexBuilder {
    return new IndexBuilder(path, tempSiblingOf(path), kind, columns, true);
  }

  insert(relation: Relation, rows: readonly Row[]): void {
    const target = this.inserts.get(relation);
    if (!target) throw new Error(`index has no relation ${relation}`);
    this.insertCells(relation, flatCells(target.all, rows));
  }

  /**
   * Inserts rows given as `flatCells` (row after row, each with every column of the relation in
   * order), in one transaction. Returns the cells of the rows it stored: all of them, except that a
   * `contents` row whose hash the store holds already is left out (so it goes to no part either).
   * `spaced`: the steps rows' text may hold Chinese, Japanese or Korean, which goes through
   * fts-text.ts on its way to the full-text index (the default, for callers that cannot tell).
   */
  insertCells(relation: Relation, cells: readonly unknown[], spaced = true): readonly unknown[] {
    const target = this.inserts.get(relation);
    if (!target) throw new Error(`index has no relation ${relation}`);
    const { sql, positions, stmt } = target;
    const width = target.all.length;
    if (cells.length % width !== 0) throw new Error(`index: ${relation} cells do not make whole rows`);
    const fts = relation === 'steps' ? this.fts : undefined;
    const args: unknown[] = new Array(sql.length);
    const kept: unknown[] = [];
    this.db.transaction(() => {
      let first: number | bigint | undefined;
      for (let start = 0; start < cells.length; start += width) {
        for (let j = 0; j < sql.length; j++) args[j] = sqlValue(sql[j] as ColumnDef, cells[start + (positions[j] as number)]);
        const info = stmt.run(args);
        first ??= info.lastInsertRowid;
        if (relation === 'contents' && info.changes > 0) for (let j = 0; j < width; j++) kept.push(cells[start + j]);
      }
      // Rows are only ever appended, so their rowids grow: this batch is every rowid from its first.
      if (fts && first !== undefined) (spaced ? fts.spaced : fts.plain).run(first);
    })();
    return relation === 'contents' ? kept : cells;
  }

  /**
   * Deletes the rows of a relation whose RETIRE_KEY value is in `keys` (a source converted again,
   * writer.ts `retireSources`), with their full-text entries. An external-content FTS5 index forgets
   * a row only when given the text it indexed: that is the text spaced out (fts-text.ts), which is
   * the text itself where it has no Chinese, Japanese or Korean. Content values stay (others may share them).
   */
  retire(relation: Relation, keys: readonly string[]): void {
    const key = RETIRE_KEY[relation];
    if (!key || keys.length === 0) return;
    const table = quote(storedTable(relation));
    this.db.transaction(() => {
      for (let at = 0; at < keys.length; at += RETIRE_CHUNK) {
        const chunk = keys.slice(at, at + RETIRE_CHUNK);
        const where = `${quote(key)} IN (${chunk.map(() => '?').join(', ')})`;
        if (relation === 'steps' && this.ftsAvailable) {
          const spaced = FTS_COLUMNS.map((c) => `trajstore_fts(${quote(c)})`).join(', ');
          this.db.prepare(`INSERT INTO steps_fts (steps_fts, rowid, ${FTS_COLUMNS.join(', ')}) SELECT 'delete', rowid, ${spaced} FROM steps WHERE ${where}`).run(chunk);
        }
        this.db.prepare(`DELETE FROM ${table} WHERE ${where}`).run(chunk);
      }
    })();
  }

  /** Records which snapshot this index describes, closes it and fsyncs the file (still under its temporary name). */
  finish(snapshotId: string): void {
    const set = this.db.prepare('INSERT OR REPLACE INTO index_meta (key, value) VALUES (?, ?)');
    const meta: Record<string, string> = {
      snapshot_id: snapshotId,
      index_format: INDEX_FORMAT,
      layout_version: String(LAYOUT_VERSION),
      kind: this.kind,
      fts_available: this.ftsAvailable ? '1' : '0',
      tokenizer: TOKENIZER_NAME,
      built_at: new Date().toISOString(),
    };
    this.db.transaction(() => {
      for (const [key, value] of Object.entries(meta)) set.run(key, value);
    })();
    this.db.close();
    this.closed = true;
    fsyncPath(this.tempPath);
  }

  /** Renames the finished index into place. */
  publish(): void {
    renameDurably(this.tempPath, this.path);
  }

  abort(): void {
    if (!this.closed) this.db.close();
    this.closed = true;
    rmSync(this.tempPath, { force: true });
  }
}

/** Builds the index of a snapshot from its parts at `path` (atomically replacing what is there). */
export async function rebuildIndex(store: ObjectStore, snapshot: Snapshot, path: string, progress?: ProgressFactory): Promise<void> {
  const columns = relationColumns(snapshot.kind, snapshot.compact?.columns.map((c) => c.name));
  const builder = IndexBuilder.create(path, snapshot.kind, columns);
  const totalRecords = Object.values(snapshot.relations).reduce((n, parts) => n + (parts ?? []).reduce((m, p) => m + p.rows, 0), 0);
  const task = progress?.({ label: `rebuilding the index of snapshot ${snapshot.id}`, unit: 'rows', totalRecords });
  try {
    const inIndex = sqlColumns(columns);
    // The content store first: the views and the full-text index read it while the other relations go in.
    const relations = (Object.keys(columns) as Relation[]).sort((a, b) => Number(b === 'contents') - Number(a === 'contents'));
    // Parts written before the content store (layout 4 and earlier) hold whole values: they are
    // stored in the index as a layout 5 import would store them.
    const refs = new ContentRefs();
    for (const relation of relations) {
      const sql = inIndex[relation] ?? [];
      const names = sql.map((c) => c.name);
      const referring = REFERRING_RELATIONS.has(relation) ? sql.filter(holdsContent) : [];
      for await (const part of relationParts(store, snapshot, relation)) {
        const legacy = referring.length > 0 && !part.refersToContents;
        for await (const rows of part.rowGroups(names)) {
          if (legacy) {
            for (const row of rows) for (const column of referring) row[column.name] = column.type === 'json' ? refs.jsonText(row[column.name] as string | null) : refs.text(row[column.name] as string | null);
            builder.insert('contents', refs.take());
          }
          builder.insert(relation, rows);
          task?.add(rows.length);
        }
      }
    }
    builder.finish(snapshot.id);
    builder.publish();
  } catch (error) {
    builder.abort();
    throw error;
  } finally {
    task?.done();
  }
}
