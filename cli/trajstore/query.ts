/** `trajstore query`: one read-only SQL statement over mounted datasets (pipelines/search/query.ts). */
import { randomBytes } from 'node:crypto';
import { closeSync, openSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { repeated, single } from '../kit/flags.js';
import { InvalidInputError, NotFoundError } from '../kit/errors.js';
import type { TextSink } from '../kit/output.js';
import type { CommandContext, CommandSpec } from '../kit/program.js';
import type { OpenDataset } from '../../pipelines/dataset/open.js';
import type { SqlWorker } from '../../pipelines/search/sql/runner.js';

/** A statement longer than this is not SQL someone meant to run. */
const MAX_SQL_BYTES = 16 * 1024 * 1024;

async function readSql(ctx: CommandContext, options: Record<string, unknown>): Promise<string> {
  const sql = single(options.sql, '--sql');
  const file = single(options.file, '--file');
  if ((sql === undefined) === (file === undefined)) throw new InvalidInputError('give the statement with exactly one of --sql SQL or --file FILE (--file - reads stdin)');
  if (sql !== undefined) return sql;
  if (file === '-') {
    const { readAll } = await import('../../pipelines/formats/lines.js');
    return (await readAll(ctx.stdin, '--file -', MAX_SQL_BYTES)).toString('utf8');
  }
  try {
    return readFileSync(file as string, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new NotFoundError(`--file ${file}: no such file`);
    throw new InvalidInputError(`--file ${file}: cannot read it (${code ?? (error as Error).message})`);
  }
}

/** Writes to FILE through a temporary sibling renamed into place, so a failed query leaves no half file. */
function fileSink(path: string): { sink: TextSink; commit(): void; abort(): void } {
  const target = resolve(path);
  const temp = join(dirname(target), `.${basename(target)}.tmp-${randomBytes(4).toString('hex')}`);
  let fd: number;
  try {
    fd = openSync(temp, 'wx');
  } catch (error) {
    throw new InvalidInputError(`--output ${path}: cannot write there (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  let open = true;
  const close = (): void => {
    if (open) closeSync(fd);
    open = false;
  };
  return {
    sink: { write: (chunk: string) => writeSync(fd, chunk) },
    commit() {
      close();
      renameSync(temp, target);
    },
    abort() {
      close();
      rmSync(temp, { force: true });
    },
  };
}

export const queryCommand: CommandSpec = {
  name: 'query [dataset]',
  description: 'run one read-only SQL statement over one or more datasets',
  options: [
    { flags: '--sql <sql>', description: 'the statement' },
    { flags: '--file <file>', description: 'read the statement from FILE (`-`: stdin)' },
    { flags: '--mount <name=dataset>', description: 'attach DATASET as schema NAME (repeatable); a lone DATASET is mounted as `dataset`' },
    { flags: '--format <format>', description: 'table|json|jsonl|csv', default: 'table' },
    { flags: '--output <file>', description: 'write the result to FILE instead of stdout' },
    { flags: '--max-output-rows <n>', description: 'rows at most; more exits 5 (default 10000)' },
    { flags: '--max-output-bytes <n>', description: 'bytes of row data at most; more exits 5 (default 64MiB)' },
    { flags: '--timeout <duration>', description: 'stop the statement after this long; exits 6 (default 30s)' },
  ],
  examples: [
    'trajstore query ./ds --sql "SELECT agent_model_name, sum(prompt_tokens) FROM dataset.runs GROUP BY 1"',
    'trajstore query --mount a=./ds1 --mount b=./ds2 --sql "SELECT count(*) FROM a.steps UNION ALL SELECT count(*) FROM b.steps"',
    'echo "SELECT * FROM dataset.tool_calls LIMIT 5" | trajstore query ./ds --file - --format jsonl',
  ],
  async run(ctx, { positional, options }) {
    const { withSqlWorker } = await import('../../pipelines/search/sql/runner.js');
    // Started first so that its start-up overlaps the loading and opening below.
    await withSqlWorker((sqlWorker) => query(ctx, positional, options, sqlWorker));
  },
};

async function query(ctx: CommandContext, positional: unknown[], options: Record<string, unknown>, sqlWorker: SqlWorker): Promise<void> {
  const { DEFAULT_MOUNT, QUERY_DEFAULTS, parseMount, runQuery } = await import('../../pipelines/search/query.js');
  const { byteSize, duration, openDatasetArg, positiveInt } = await import('../../pipelines/search/options.js');
  const { parseOutputFormat } = await import('../kit/output.js');
  const format = parseOutputFormat(options.format);
  const limits = {
    maxOutputRows: positiveInt(options.maxOutputRows, '--max-output-rows', QUERY_DEFAULTS.maxOutputRows),
    maxOutputBytes: byteSize(options.maxOutputBytes, '--max-output-bytes', QUERY_DEFAULTS.maxOutputBytes),
    timeoutMs: duration(options.timeout, '--timeout', QUERY_DEFAULTS.timeoutMs),
  };
  const mountArgs = repeated(options.mount).map(parseMount);
  const positionalDataset = positional[0] as string | undefined;
  if (positionalDataset !== undefined && mountArgs.length > 0) {
    throw new InvalidInputError('give either a DATASET or --mount NAME=DATASET options, not both', { hint: `a lone DATASET is the mount \`${DEFAULT_MOUNT}\`` });
  }
  const names = new Set<string>();
  for (const m of mountArgs) {
    if (names.has(m.name.toLowerCase())) throw new InvalidInputError(`--mount name ${JSON.stringify(m.name)} is given twice`);
    names.add(m.name.toLowerCase());
  }
  const sql = await readSql(ctx, options);
  const wanted = mountArgs.length > 0 ? mountArgs : [{ name: DEFAULT_MOUNT, dataset: positionalDataset }];
  const opened: OpenDataset[] = [];
  try {
    const mounts = [];
    for (const m of wanted) {
      const dataset = await openDatasetArg(ctx, m.dataset);
      opened.push(dataset);
      mounts.push({ name: m.name, path: dataset.db.name });
    }
    const outputPath = single(options.output, '--output');
    const file = outputPath === undefined ? undefined : fileSink(outputPath);
    try {
      await runQuery({
        mounts,
        sql,
        format,
        ...limits,
        signal: ctx.signal,
        sqlWorker,
        out: file?.sink ?? ctx.stdout,
        notice: (message) => ctx.stderr.write(`trajstore: ${message}\n`),
      }).catch((error: unknown) => {
        // A cut result (limit, timeout) is still the output the user asked for; anything else leaves no file.
        const cut = (error as { exitCode?: number }).exitCode === 5 || (error as { exitCode?: number }).exitCode === 6;
        if (file && cut) file.commit();
        throw error;
      });
      file?.commit();
    } catch (error) {
      file?.abort();
      throw error;
    }
  } finally {
    for (const dataset of opened) dataset.close();
  }
}
