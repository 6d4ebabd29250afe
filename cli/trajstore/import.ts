/** `trajstore import`: parse and check the flags, run the import pipeline, print the summary. */
import { existsSync } from 'node:fs';
import { InvalidInputError } from '../kit/errors.js';
import type { OutputFormat as RowFormat } from '../kit/output.js';
import type { CommandContext, CommandSpec } from '../kit/program.js';
import { INPUT_FORMATS, type InputFormat } from '../../pipelines/formats/types.js';
import type { ImportSummary } from '../../pipelines/import/import.js';
import type { WriteMode } from '../../pipelines/dataset/writer.js';
import { oneOf, requiredString } from '../kit/flags.js';
import { confirm } from './confirm.js';
import { resolveLocalDataset, resolveSource } from './dataset-arg.js';

const IMPORT_INPUTS = ['auto', ...INPUT_FORMATS, 'compact-jsonl'] as const;
const IMPORT_OUTPUTS = ['preserve', 'storyline', 'compact-jsonl'] as const;
const MODES = ['create', 'append', 'replace'] as const;
const DUPLICATES = ['suffix', 'skip'] as const;
const SUMMARY_FORMATS = ['table', 'json'] as const;

async function printSummary(ctx: CommandContext, summary: ImportSummary, format: RowFormat): Promise<void> {
  const { createRowWriter } = await import('../kit/output.js');
  if (format === 'json') {
    ctx.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
    return;
  }
  ctx.stdout.write(`imported ${summary.files} file(s) into ${summary.dataset} (${summary.mode}), snapshot ${summary.snapshot_id}\n`);
  if (summary.kind === 'compact') {
    ctx.stdout.write(`${summary.total.runs} record(s)\n`);
    return;
  }
  const columns = ['format', 'files', 'runs', 'steps', 'tool_calls', 'prompt_tokens', 'completion_tokens', 'cached_tokens'].map((key) => ({ key }));
  const rows = createRowWriter('table', columns, ctx.stdout);
  for (const row of summary.by_format) rows.write({ ...row });
  if (summary.by_format.length > 1) rows.write({ format: 'total', ...summary.total });
  rows.end();
  if (summary.skipped_duplicates > 0) ctx.stdout.write(`skipped ${summary.skipped_duplicates} duplicate document(s)\n`);
}

export const importCommand: CommandSpec = {
  name: 'import',
  description: 'import trajectories (a file, a directory, or - for stdin) into a dataset',
  options: [
    { flags: '-f, --from <source>', description: 'file, directory (recursive) or - for stdin' },
    { flags: '-t, --to <dataset>', description: 'destination dataset (default: the default dataset)' },
    { flags: '-i, --input-format <format>', description: `${IMPORT_INPUTS.join('|')}`, default: 'auto' },
    { flags: '-o, --output-format <format>', description: `${IMPORT_OUTPUTS.join('|')} (default storyline, or compact-jsonl with -i compact-jsonl; preserve keeps the source bytes for byte-exact export)` },
    { flags: '--mode <mode>', description: 'create (new dataset), append (existing Storyline dataset) or replace', default: 'create' },
    { flags: '--on-duplicate <policy>', description: 'a document id already present: suffix (#2, #3...) or skip', default: 'suffix' },
    { flags: '--yes', description: 'confirm --mode replace without asking' },
    { flags: '--column <name=path>', description: 'compact-jsonl: a JSON column NAME from JSON_PATH ($, $.a.b, $.a[0]); repeatable' },
    { flags: '--format <format>', description: 'summary: table or json', default: 'table' },
  ],
  examples: ['trajstore import -f testdata/samples -t ./my-dataset', 'trajstore import -f session.jsonl -t ./my-dataset --mode append -i agentb-code'],
  async run(ctx, { options }) {
    const { runImportIsolated } = await import('../../pipelines/import/isolated.js');
    const { parseColumnFlags } = await import('../../pipelines/dataset/compact/paths.js');
    const { Progress } = await import('../kit/progress.js');
    const from = await resolveSource(requiredString(options.from, '-f/--from'), ctx);
    const inputFormat = oneOf(options.inputFormat, IMPORT_INPUTS, '-i/--input-format');
    const outputFormat = oneOf(options.outputFormat ?? (inputFormat === 'compact-jsonl' ? 'compact-jsonl' : 'storyline'), IMPORT_OUTPUTS, '-o/--output-format');
    const mode: WriteMode = oneOf(options.mode, MODES, '--mode');
    const onDuplicate = oneOf(options.onDuplicate, DUPLICATES, '--on-duplicate');
    const summaryFormat = oneOf(options.format, SUMMARY_FORMATS, '--format');
    const columnFlags = options.column === undefined ? [] : ([] as unknown[]).concat(options.column).map(String);
    const target = await resolveLocalDataset(options.to === undefined ? undefined : requiredString(options.to, '-t/--to'), ctx, 'write');
    const compact = inputFormat === 'compact-jsonl' || outputFormat === 'compact-jsonl';
    if (compact) {
      if (inputFormat !== 'compact-jsonl' && inputFormat !== 'auto') {
        throw new InvalidInputError(`-i ${inputFormat} with -o compact-jsonl: compact-jsonl is a record store, not a trajectory conversion`, { hint: 'use -i compact-jsonl (or leave -i auto)' });
      }
      if (outputFormat === 'storyline') throw new InvalidInputError('-i compact-jsonl with -o storyline: compact-jsonl is a record store, not a trajectory conversion', { hint: 'use -o compact-jsonl' });
      if (from === '-') throw new InvalidInputError('-f -: compact-jsonl import does not read stdin', { hint: 'import a local file or directory' });
      if (mode === 'append') throw new InvalidInputError('--mode append: compact-jsonl import supports create and confirmed replace only');
    } else if (columnFlags.length > 0) {
      throw new InvalidInputError('--column applies to compact-jsonl imports only', { hint: 'add -i compact-jsonl or -o compact-jsonl' });
    }
    if (mode === 'replace' && !options.yes && existsSync(target)) {
      // A source that is not there fails now, not after a question whose answer could not matter.
      if (from !== '-') (await import('../../pipelines/import/sources.js')).statSource(from);
      if (!(await confirm(ctx, `replace the dataset ${target}? Its current contents will be removed`))) {
        throw new InvalidInputError(`--mode replace: ${target} exists; confirm with --yes (or answer y on a terminal)`);
      }
    }
    const progress = new Progress({ label: 'import', unit: compact ? 'records' : 'runs', stream: ctx.stderr as NodeJS.WriteStream });
    try {
      const io = { stdin: ctx.stdin, log: ctx.log, signal: ctx.signal, progress };
      const summary = compact
        ? await runImportIsolated({ kind: 'compact', options: { from, to: target, mode, columns: parseColumnFlags(columnFlags) } }, io)
        : await runImportIsolated(
            {
              kind: 'storyline',
              options: { from, to: target, inputFormat: inputFormat as InputFormat | 'auto', outputFormat: outputFormat as 'preserve' | 'storyline', mode, onDuplicate },
            },
            io,
          );
      progress.done();
      await printSummary(ctx, summary, summaryFormat);
    } finally {
      progress.done();
    }
  },
};
