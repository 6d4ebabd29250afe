/** `trajstore query`: one read-only SQL statement over one or more datasets. */
import { statSync } from 'node:fs';
import { resolve } from 'node:path';
import { assertReplaceable, DurableFile, hiddenTempSiblingOf } from '../../lib/durable.js';
import { ConflictError, InvalidInputError, ResourceLimitError, UnavailableError } from '../../lib/errors.js';
import type { Column, Row, RowWriter, TextSink } from '../../lib/output.js';
import { DEFAULT_MOUNT, QUERY_DEFAULTS, query, type QueryMount } from '../../pipelines/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { defineCommand, type CommandContext } from '../kit/program.js';
import { readTextInput } from '../kit/text-input.js';
import { FORMAT_OPTIONS, rowView, rowWriter, type RowView } from '../kit/render.js';
import { createRowWriter } from '../../lib/output.js';
import { progressOn, resolveContext } from './common.js';

/** A statement longer than this is not SQL someone meant to run. */
const MAX_SQL_BYTES = 16 * 1024 * 1024;

type SqlSource = { sql: string } | { file: string };

interface QueryFlags {
  mounts: QueryMount[];
  source: SqlSource;
  view: RowView;
  output: string | undefined;
  overwrite: boolean;
  maxOutputRows: number;
  maxOutputBytes: number;
  maxMemoryBytes: number;
  timeoutMs: number;
}

/** `NAME=DATASET` of `--mount`. */
function mountOf(text: string): QueryMount {
  const eq = text.indexOf('=');
  if (eq < 0 || eq === text.length - 1) throw new InvalidInputError(`invalid --mount ${JSON.stringify(text)}: expected NAME=DATASET`, { hint: 'e.g. --mount prod=./datasets/prod' });
  return { name: text.slice(0, eq), dataset: text.slice(eq + 1) };
}

function flags(args: ParsedArgs): QueryFlags {
  const sql = args.text('--sql');
  const file = args.text('--file');
  if ((sql === undefined) === (file === undefined)) throw new InvalidInputError('give the statement with exactly one of --sql SQL or --file FILE (--file - reads stdin)');
  const mounts = args.list('--mount').map(mountOf);
  const dataset = args.positional(0);
  if (dataset !== undefined && mounts.length > 0) {
    throw new InvalidInputError('give either a DATASET or --mount NAME=DATASET options, not both', { hint: `a lone DATASET is the mount \`${DEFAULT_MOUNT}\`` });
  }
  return {
    mounts: mounts.length > 0 ? mounts : [{ name: DEFAULT_MOUNT, dataset }],
    source: sql !== undefined ? { sql } : { file: file as string },
    view: rowView(args),
    output: args.text('--output'),
    overwrite: args.has('--overwrite'),
    maxOutputRows: args.positiveInt('--max-output-rows', QUERY_DEFAULTS.maxOutputRows),
    maxOutputBytes: args.byteSize('--max-output-bytes', QUERY_DEFAULTS.maxOutputBytes),
    maxMemoryBytes: args.byteSize('--max-memory', QUERY_DEFAULTS.maxMemoryBytes),
    timeoutMs: args.duration('--timeout', QUERY_DEFAULTS.timeoutMs),
  };
}

function readSql(ctx: CommandContext, source: SqlSource): Promise<string> {
  if ('sql' in source) return Promise.resolve(source.sql);
  return readTextInput({ flag: '--file', file: source.file, stdin: ctx.stdin, maxBytes: MAX_SQL_BYTES, what: 'statement' });
}

/** `--output FILE`: written under a hidden temporary name and renamed into place, so a failed query leaves nothing. */
function outputFile(path: string, overwrite: boolean): DurableFile {
  const target = resolve(path);
  const existing = statSync(target, { throwIfNoEntry: false });
  // --overwrite replaces a file; a directory is no place for the rows, whatever the flags.
  if (existing?.isDirectory()) throw new InvalidInputError(`--output ${path}: is a directory`, { hint: 'name the file to write' });
  if (existing && !overwrite) throw new ConflictError(`--output ${path}: the file exists`, { hint: 'pass --overwrite to replace it' });
  assertReplaceable(target, `--output ${path}`);
  try {
    return new DurableFile(target, { temp: hiddenTempSiblingOf(target) });
  } catch (error) {
    throw new InvalidInputError(`--output ${path}: cannot write there (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
}

/** Distinct keys for the row objects, so `SELECT 1 AS a, 2 AS a` keeps both columns. */
function columnsFor(names: readonly string[]): Column[] {
  const seen = new Map<string, number>();
  return names.map((name) => {
    const n = (seen.get(name) ?? 0) + 1;
    seen.set(name, n);
    return { key: n === 1 ? name : `${name}_${n}`, title: name };
  });
}

/** Cells as the row writers take them: BLOBs become base64 text. */
function cell(value: unknown): Row[string] {
  if (Buffer.isBuffer(value) || value instanceof Uint8Array) return Buffer.from(value).toString('base64');
  return value as Row[string];
}

const CUT: Record<'rows' | 'bytes' | 'timeout', (f: QueryFlags, rows: number) => { notice: string; error: Error }> = {
  rows: (f) => ({
    notice: `truncated: output cut at ${f.maxOutputRows} rows (--max-output-rows)`,
    error: new ResourceLimitError(`the result has more than ${f.maxOutputRows} rows; output cut (--max-output-rows)`, { hint: 'raise --max-output-rows, or add LIMIT / aggregate in the statement' }),
  }),
  bytes: (f, rows) => ({
    notice: `truncated: output cut after ${rows} rows at ${f.maxOutputBytes} bytes (--max-output-bytes)`,
    error: new ResourceLimitError(`the result is larger than ${f.maxOutputBytes} bytes; output cut after ${rows} rows (--max-output-bytes)`, { hint: 'raise --max-output-bytes, or select fewer columns or rows' }),
  }),
  timeout: (f, rows) => ({
    notice: `truncated: timed out after ${f.timeoutMs / 1000} s (--timeout)`,
    error: new UnavailableError(`the statement did not finish within ${f.timeoutMs / 1000} s and was stopped (${rows} rows delivered before that)`, { hint: 'narrow the statement, or give more time with --timeout' }),
  }),
};

export const queryCommand = defineCommand({
  name: 'query [dataset]',
  description: 'run one read-only SQL statement over one or more datasets',
  options: [
    { flags: '--sql <sql>', description: 'the statement' },
    { flags: '--file <file>', description: 'read the statement from FILE (`-`: stdin)' },
    { flags: '--mount <name=dataset>', description: 'attach DATASET as schema NAME (repeatable); a lone DATASET is mounted as `dataset`' },
    ...FORMAT_OPTIONS,
    { flags: '--output <file>', description: 'write the result to FILE instead of stdout (an existing FILE needs --overwrite)' },
    { flags: '--overwrite', description: 'replace an existing --output FILE' },
    { flags: '--max-output-rows <n>', description: `rows at most; more exits 5 (default ${QUERY_DEFAULTS.maxOutputRows})` },
    { flags: '--max-output-bytes <n>', description: 'bytes of row data at most; more exits 5 (default 64MiB)' },
    { flags: '--max-memory <size>', description: 'stop the statement when it makes the process grow by more; a value may take a quarter of it; exits 5 (default 1GiB)' },
    { flags: '--timeout <duration>', description: 'stop the statement after this long; exits 6 (default 30s)' },
  ],
  examples: [
    'trajstore query ./ds --sql "SELECT agent_model_name, sum(prompt_tokens) FROM dataset.runs GROUP BY 1"',
    'trajstore query --mount a=./ds1 --mount b=./ds2 --sql "SELECT count(*) FROM a.steps UNION ALL SELECT count(*) FROM b.steps"',
    'echo "SELECT * FROM dataset.tool_calls LIMIT 5" | trajstore query ./ds --file - --format jsonl',
  ],
  flags,
  async run(ctx, f) {
    const sql = await readSql(ctx, f.source);
    const file = f.output === undefined ? undefined : outputFile(f.output, f.overwrite);
    const out: TextSink = file ?? ctx.stdout;
    let columns: Column[] = [];
    let writer: RowWriter | undefined;
    try {
      const outcome = await query(resolveContext(ctx), {
        mounts: f.mounts,
        sql,
        maxOutputRows: f.maxOutputRows,
        maxOutputBytes: f.maxOutputBytes,
        maxMemoryBytes: f.maxMemoryBytes,
        timeoutMs: f.timeoutMs,
        ...(f.output !== undefined ? { writesTo: f.output } : {}),
        progress: progressOn(ctx),
        onColumns(names) {
          columns = columnsFor(names);
          // A file gets whole cells, as any output that is not a terminal does.
          writer = file ? createRowWriter(f.view.format, columns, file) : rowWriter(ctx, f.view, columns);
        },
        onRow(cells) {
          const row: Row = {};
          columns.forEach((c, i) => (row[c.key] = cell(cells[i])));
          writer?.write(row);
        },
      });
      writer?.end();
      if (f.view.format === 'table' && outcome.rows === 0) out.write('(0 rows)\n');
      if (outcome.truncated !== null) {
        const { notice, error } = CUT[outcome.truncated](f, outcome.rows);
        // A cut result is still the output asked for: tables say so inline, other formats on stderr.
        if (f.view.format === 'table') out.write(`(${notice})\n`);
        else ctx.stderr.write(`trajstore: ${notice}\n`);
        file?.commit();
        throw error;
      }
      file?.commit();
    } finally {
      file?.abort();
    }
  },
});
