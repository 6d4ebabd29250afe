/**
 * Rows out: `table` for people, `json`, `jsonl` and `csv` for programs.
 * json, jsonl and csv stream row by row; a table must see every row to size its columns.
 *
 * NULL is `NULL` in a table, `null` in JSON, and an empty unquoted field in CSV (an empty string is
 * `""` there, so the two stay apart, as PostgreSQL's CSV does). A table given a width (a terminal's)
 * clips its widest cells with an ellipsis until the rows fit; without one, cells are printed whole.
 */
import { clipToWidth, displayWidth, escapeControls } from './width.js';
import { InvalidInputError } from './errors.js';

export const OUTPUT_FORMATS = ['table', 'json', 'jsonl', 'csv'] as const;
export type OutputFormat = (typeof OUTPUT_FORMATS)[number];

export type Cell = string | number | bigint | boolean | null | undefined | Date | object;
export type Row = Record<string, Cell>;

export interface Column {
  key: string;
  /** Header shown in tables and CSV; defaults to the key. */
  title?: string;
  align?: 'left' | 'right';
}

export interface TextSink {
  write(chunk: string): unknown;
}

export interface RowWriter {
  write(row: Row): void;
  end(): void;
}

export interface WriterOptions {
  /** Columns the table may take (a terminal's width); cells are clipped to fit. Unset: whole cells. */
  maxWidth?: number;
  /**
   * The sink is a terminal, which acts on control characters (ESC starts sequences that clear the
   * screen or retitle the window): CSV then shows them escaped, as tables always do, but for the
   * newlines and tabs its quoting carries. Elsewhere CSV keeps the bytes.
   */
  terminal?: boolean;
}

export function parseOutputFormat(value: unknown, flag = '--format'): OutputFormat {
  if (typeof value === 'string' && (OUTPUT_FORMATS as readonly string[]).includes(value)) return value as OutputFormat;
  throw new InvalidInputError(`invalid ${flag} ${JSON.stringify(String(value))}`, {
    hint: `use one of: ${OUTPUT_FORMATS.join(', ')}`,
  });
}

/** Columns in first-seen key order, for callers that print whatever rows they get. */
export function columnsOf(rows: readonly Row[]): Column[] {
  const keys = new Set<string>();
  for (const row of rows) for (const key of Object.keys(row)) keys.add(key);
  return [...keys].map((key) => ({ key }));
}

export function createRowWriter(format: OutputFormat, columns: readonly Column[], sink: TextSink, options: WriterOptions = {}): RowWriter {
  switch (format) {
    case 'table':
      return new TableWriter(columns, sink, options.maxWidth);
    case 'json':
      return new JsonArrayWriter(columns, sink);
    case 'jsonl':
      return new JsonLinesWriter(columns, sink);
    case 'csv':
      return new CsvWriter(columns, sink, options.terminal === true);
  }
}

/** Renders rows to one string; for small outputs and tests. */
export function renderRows(rows: Iterable<Row>, columns: readonly Column[], format: OutputFormat, options: WriterOptions = {}): string {
  let out = '';
  const writer = createRowWriter(format, columns, { write: (chunk: string) => (out += chunk) }, options);
  for (const row of rows) writer.write(row);
  writer.end();
  return out;
}

/** A JSON-safe value: bigints become numbers when exact, strings otherwise; dates become ISO strings. */
export function toJsonValue(value: Cell): unknown {
  if (value === undefined) return null;
  if (typeof value === 'bigint') {
    return value <= BigInt(Number.MAX_SAFE_INTEGER) && value >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(value) : value.toString();
  }
  if (value instanceof Date) return value.toISOString();
  if (value !== null && typeof value === 'object') {
    return JSON.parse(JSON.stringify(value, (_key, v: Cell) => (typeof v === 'bigint' ? toJsonValue(v) : v)));
  }
  return value;
}

/**
 * JSON text that holds no raw DEL or C1 control (U+007F-U+009F): JSON.stringify escapes C0 only,
 * and a terminal acts on a raw U+009B (the 8-bit CSI) as on ESC [. The `\u009b` escapes written
 * instead parse back to the same text, so programs read exactly the data.
 */
export function jsonText(value: unknown, indent?: number): string {
  return JSON.stringify(value, null, indent).replace(/[\u007f-\u009f]/g, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

function projectRow(row: Row, columns: readonly Column[]): Record<string, unknown> {
  const projected: Record<string, unknown> = {};
  for (const column of columns) projected[column.key] = toJsonValue(row[column.key]);
  return projected;
}

/** Plain text of a non-null cell for table and CSV: structured values as compact JSON. */
function cellText(value: Cell): string {
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean') return String(value);
  return JSON.stringify(toJsonValue(value));
}

class JsonLinesWriter implements RowWriter {
  constructor(
    private readonly columns: readonly Column[],
    private readonly sink: TextSink,
  ) {}
  write(row: Row): void {
    this.sink.write(`${jsonText(projectRow(row, this.columns))}\n`);
  }
  end(): void {}
}

class JsonArrayWriter implements RowWriter {
  private count = 0;
  constructor(
    private readonly columns: readonly Column[],
    private readonly sink: TextSink,
  ) {}
  write(row: Row): void {
    this.sink.write(`${this.count++ === 0 ? '[\n' : ',\n'}  ${jsonText(projectRow(row, this.columns))}`);
  }
  end(): void {
    this.sink.write(this.count === 0 ? '[]\n' : '\n]\n');
  }
}

/** RFC 4180 quoting: a field with a comma, quote, CR or LF is quoted and its quotes doubled. */
export function csvField(text: string): string {
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

/** Text for a terminal: control characters escaped, but for the newlines and tabs that lay text out. */
export function terminalText(text: string): string {
  return escapeControls(text, '\n\t');
}

function csvCell(value: Cell, terminal: boolean): string {
  if (value === null || value === undefined) return '';
  const text = cellText(value);
  if (text === '') return '""';
  return csvField(terminal ? terminalText(text) : text);
}

class CsvWriter implements RowWriter {
  constructor(
    private readonly columns: readonly Column[],
    private readonly sink: TextSink,
    private readonly terminal: boolean,
  ) {
    sink.write(`${columns.map((c) => csvCell(c.title ?? c.key, terminal)).join(',')}\n`);
  }
  write(row: Row): void {
    this.sink.write(`${this.columns.map((c) => csvCell(row[c.key], this.terminal)).join(',')}\n`);
  }
  end(): void {}
}

/** Control characters would break the grid (or drive the terminal), so tables show them escaped. */
function tableText(value: Cell): string {
  if (value === null || value === undefined) return 'NULL';
  return escapeControls(cellText(value));
}

/** Columns between two cells of a table. */
const GAP = 2;
/** A clipped column keeps at least this many columns of its cells. */
const MIN_CLIPPED = 8;

/**
 * Column widths that fit `maxWidth`: the widest columns are cut to one common limit, the largest
 * that fits (never below its header or MIN_CLIPPED); narrow columns keep their width.
 */
export function fitWidths(natural: readonly number[], headers: readonly number[], maxWidth: number): number[] {
  const total = (widths: readonly number[]): number => widths.reduce((a, b) => a + b, 0) + GAP * Math.max(widths.length - 1, 0);
  if (total(natural) <= maxWidth) return [...natural];
  const capped = (limit: number): number[] => natural.map((w, i) => Math.min(w, Math.max(limit, headers[i] ?? 0, MIN_CLIPPED)));
  let low = 0;
  let high = Math.max(...natural);
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    if (total(capped(mid)) <= maxWidth) low = mid;
    else high = mid - 1;
  }
  return capped(low);
}

class TableWriter implements RowWriter {
  private readonly cells: string[][] = [];
  /** Per column: 'number' while every value seen is a number (or NULL), 'text' once one is not. */
  private readonly kinds: Array<'none' | 'number' | 'text'>;
  constructor(
    private readonly columns: readonly Column[],
    private readonly sink: TextSink,
    private readonly maxWidth: number | undefined,
  ) {
    this.kinds = columns.map(() => 'none');
  }
  write(row: Row): void {
    this.cells.push(
      this.columns.map((column, i) => {
        const value = row[column.key];
        if (value !== null && value !== undefined) {
          const numeric = typeof value === 'number' || typeof value === 'bigint';
          if (!numeric) this.kinds[i] = 'text';
          else if (this.kinds[i] === 'none') this.kinds[i] = 'number';
        }
        return tableText(value);
      }),
    );
  }
  end(): void {
    const header = this.columns.map((c) => tableText((c.title ?? c.key).toUpperCase()));
    const headerWidths = header.map(displayWidth);
    const natural = headerWidths.map((h, i) => Math.max(h, ...this.cells.map((r) => displayWidth(r[i] ?? ''))));
    const widths = this.maxWidth === undefined ? natural : fitWidths(natural, headerWidths, this.maxWidth);
    const alignRight = this.columns.map((c, i) => (c.align ?? (this.kinds[i] === 'number' ? 'right' : 'left')) === 'right');
    const line = (cells: readonly string[]): string =>
      cells
        .map((text, i) => {
          const width = widths[i] ?? 0;
          const cell = displayWidth(text) > width ? clipToWidth(text, width) : text;
          const pad = ' '.repeat(width - displayWidth(cell));
          if (alignRight[i]) return pad + cell;
          return i === cells.length - 1 ? cell : cell + pad;
        })
        .join(' '.repeat(GAP))
        .trimEnd();
    this.sink.write(`${line(header)}\n`);
    for (const row of this.cells) this.sink.write(`${line(row)}\n`);
  }
}
