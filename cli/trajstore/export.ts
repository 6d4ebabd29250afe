/** `trajstore export`: a dataset to a trajectory format (a file, a directory, or stdout). */
import { EXPORT_FORMATS, exportDataset, type ExportFormat } from '../../pipelines/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { defineCommand } from '../kit/program.js';
import { progressOn, resolveContext } from './common.js';

interface ExportFlags {
  from: string | undefined;
  to: string;
  outputFormat: ExportFormat;
  overwrite: boolean;
}

function flags(args: ParsedArgs): ExportFlags {
  return {
    from: args.text('--from'),
    to: args.required('--to'),
    outputFormat: args.choice('--output-format', EXPORT_FORMATS),
    overwrite: args.has('--overwrite'),
  };
}

export const exportCommand = defineCommand({
  name: 'export',
  description: 'export a dataset to a trajectory format (a file, a directory, or - for stdout)',
  options: [
    { flags: '-f, --from <dataset>', description: 'dataset to export (default: the default dataset)' },
    { flags: '-t, --to <target>', description: '- (stdout, JSONL), a file (JSONL), or a directory (existing, or ending in /: one file per document)' },
    { flags: '-o, --output-format <format>', description: EXPORT_FORMATS.join('|') },
    { flags: '--overwrite', description: 'replace existing target files' },
  ],
  examples: ['trajstore export -f ./my-dataset -t - -o atif', 'trajstore export -f ./my-dataset -t out/ -o storyline'],
  flags,
  async run(ctx, { from, to, outputFormat, overwrite }) {
    const summary = await exportDataset(resolveContext(ctx), { from, to, outputFormat, overwrite, stdout: ctx.stdout.stream, log: ctx.log, signal: ctx.signal, progress: progressOn(ctx) });
    const line = `exported ${summary.documents} document(s) as ${summary.format} from snapshot ${summary.snapshot_id} to ${to === '-' ? 'stdout' : to}${summary.path === 'raw' ? ' (stored source bytes)' : ''}`;
    // With -t -, stdout is the export itself: the summary is a diagnostic.
    if (to === '-') ctx.log.info(line);
    else ctx.stdout.write(`${line}\n`);
  },
});
