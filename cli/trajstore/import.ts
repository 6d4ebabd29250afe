/** `trajstore import`: trajectories (a file, a directory, stdin or a pin) into a dataset. */
import { InvalidInputError } from '../../lib/errors.js';
import { jsonText } from '../../lib/output.js';
import { INPUT_FORMATS, planImport, runImport, type DuplicatePolicy, type ErrorPolicy, type ImportRequest, type ImportSummary, type WriteMode } from '../../pipelines/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { defineCommand, type CommandContext } from '../kit/program.js';
import { FORMAT_OPTIONS, printRows, rowView, type RowView } from '../kit/render.js';
import { LOCK_TIMEOUT_OPTION, lockTimeoutOf, progressOn, resolveContext } from './common.js';
import { confirm } from './confirm.js';

const IMPORT_INPUTS = ['auto', ...INPUT_FORMATS, 'compact-jsonl'] as const;
const IMPORT_OUTPUTS = ['preserve', 'storyline', 'compact-jsonl'] as const;
const MODES: readonly WriteMode[] = ['create', 'append', 'replace'];
const DUPLICATES: readonly DuplicatePolicy[] = ['suffix', 'skip'];
const ERROR_POLICIES: readonly ErrorPolicy[] = ['fail', 'skip'];
const TOTAL_COLUMNS = ['files', 'runs', 'steps', 'tool_calls', 'prompt_tokens', 'completion_tokens', 'cached_tokens'] as const;

interface ImportFlags {
  request: ImportRequest;
  yes: boolean;
  view: RowView;
}

function flags(args: ParsedArgs): ImportFlags {
  const outputFormat = args.text('--output-format');
  return {
    request: {
      from: args.required('--from'),
      to: args.text('--to'),
      inputFormat: args.choice('--input-format', IMPORT_INPUTS, 'auto'),
      outputFormat: outputFormat === undefined ? undefined : args.choice('--output-format', IMPORT_OUTPUTS),
      mode: args.choice('--mode', MODES, 'create'),
      onDuplicate: args.choice('--on-duplicate', DUPLICATES, 'suffix'),
      onError: args.choice('--on-error', ERROR_POLICIES, 'fail'),
      columns: args.list('--column'),
      lockTimeoutMs: lockTimeoutOf(args),
    },
    yes: args.has('--yes'),
    view: rowView(args),
  };
}

/** The summary: a line saying what happened, then per format what came in (json: the whole summary). */
function printSummary(ctx: CommandContext, view: RowView, summary: ImportSummary): void {
  // Each skipped file was named on stderr as it was left out; the count closes the list there.
  if (summary.skipped_files.length > 0) ctx.log.warn(`skipped ${summary.skipped_files.length} of ${summary.files + summary.skipped_files.length} file(s) that could not be imported (listed above)`);
  if (view.format === 'json') {
    ctx.stdout.write(`${jsonText(summary, 2)}\n`);
    return;
  }
  const rows = summary.by_format.map((row) => ({ ...row }));
  if (summary.kind === 'storyline' && rows.length > 1) rows.push({ format: 'total', ...summary.total });
  if (view.format === 'table') {
    ctx.stdout.write(`imported ${summary.files} file(s) into ${summary.dataset} (${summary.mode}), snapshot ${summary.snapshot_id}\n`);
    if (summary.kind === 'compact') {
      ctx.stdout.write(`${summary.total.runs} record(s)\n`);
      return;
    }
  }
  printRows(ctx, view, [{ key: 'format' }, ...TOTAL_COLUMNS.map((key) => ({ key }))], rows);
  if (view.format === 'table' && summary.skipped_duplicates > 0) ctx.stdout.write(`skipped ${summary.skipped_duplicates} duplicate document(s)\n`);
}

export const importCommand = defineCommand({
  name: 'import',
  description: 'import trajectories (a file, a directory, or - for stdin) into a dataset',
  options: [
    { flags: '-f, --from <source>', description: 'file, directory (recursive), named pipe, - for stdin, or a pin such as @agentb-code' },
    { flags: '-t, --to <dataset>', description: 'destination dataset (default: the default dataset)' },
    { flags: '-i, --input-format <format>', description: `${IMPORT_INPUTS.join('|')}`, default: 'auto' },
    { flags: '-o, --output-format <format>', description: `${IMPORT_OUTPUTS.join('|')} (default storyline, or compact-jsonl with -i compact-jsonl; preserve keeps the source bytes for byte-exact export)` },
    { flags: '--mode <mode>', description: 'create (new dataset), append (existing Storyline dataset) or replace', default: 'create' },
    { flags: '--on-duplicate <policy>', description: 'a document id already present: suffix (#2, #3...) or skip', default: 'suffix' },
    { flags: '--on-error <policy>', description: 'a file that cannot be imported: fail (import nothing) or skip (leave it out, listing it and why; exit 0 if any file imported)', default: 'fail' },
    { flags: '--yes', description: 'confirm --mode replace without asking' },
    { flags: '--column <name=path>', description: 'compact-jsonl: a JSON column NAME from JSON_PATH ($, $.a.b, $.a[0]); repeatable' },
    LOCK_TIMEOUT_OPTION,
    ...FORMAT_OPTIONS.map((o) => (o.flags.startsWith('--format') ? { ...o, description: `summary: ${o.description} (json: the whole summary; the others: one row per format)` } : o)),
  ],
  examples: ['trajstore import -f testdata/samples -t ./my-dataset', 'trajstore import -f session.jsonl -t ./my-dataset --mode append -i agentb-code'],
  flags,
  async run(ctx, { request, yes, view }) {
    const plan = await planImport(resolveContext(ctx), request);
    if (plan.replaces && !yes && !(await confirm(ctx, `replace the dataset ${plan.target}? Its current contents will be removed`))) {
      throw new InvalidInputError(`--mode replace: ${plan.target} exists; confirm with --yes (or answer y on a terminal)`);
    }
    const summary = await runImport(plan, { stdin: ctx.stdin, log: ctx.log, signal: ctx.signal, progress: progressOn(ctx) });
    printSummary(ctx, view, summary);
  },
});
