/** `trajstore export`: parse and check the flags, run the export pipeline, report what was written. */
import type { CommandSpec } from '../kit/program.js';
import type { ExportFormat } from '../../pipelines/export/export.js';
import { OUTPUT_FORMATS } from '../../pipelines/formats/types.js';
import { oneOf, requiredString } from '../kit/flags.js';
import { resolveLocalDataset } from './dataset-arg.js';

/** For --help, without loading the export pipeline; `run` checks against the pipeline's own EXPORT_FORMATS. */
const EXPORT_FORMAT_NAMES: readonly ExportFormat[] = [...OUTPUT_FORMATS, 'compact-jsonl'];

export const exportCommand: CommandSpec = {
  name: 'export',
  description: 'export a dataset to a trajectory format (a file, a directory, or - for stdout)',
  options: [
    { flags: '-f, --from <dataset>', description: 'dataset to export (default: the default dataset)' },
    { flags: '-t, --to <target>', description: '- (stdout, JSONL), a file (JSONL), or a directory (existing, or ending in /: one file per document)' },
    { flags: '-o, --output-format <format>', description: EXPORT_FORMAT_NAMES.join('|') },
    { flags: '--overwrite', description: 'replace existing target files' },
  ],
  examples: ['trajstore export -f ./my-dataset -t - -o atif', 'trajstore export -f ./my-dataset -t out/ -o storyline'],
  async run(ctx, { options }) {
    const { EXPORT_FORMATS, runExport } = await import('../../pipelines/export/export.js');
    const { Progress } = await import('../kit/progress.js');
    const to = requiredString(options.to, '-t/--to');
    const outputFormat = oneOf(options.outputFormat, EXPORT_FORMATS, '-o/--output-format');
    const from = await resolveLocalDataset(options.from === undefined ? undefined : requiredString(options.from, '-f/--from'), ctx, 'read');
    const progress = new Progress({ label: 'export', unit: 'documents', stream: ctx.stderr as NodeJS.WriteStream });
    try {
      const summary = await runExport({ from, to, outputFormat, overwrite: Boolean(options.overwrite), stdout: ctx.stdout, log: ctx.log, signal: ctx.signal, progress });
      progress.done();
      const line = `exported ${summary.documents} document(s) as ${summary.format} from snapshot ${summary.snapshot_id} to ${to === '-' ? 'stdout' : to}${summary.path === 'raw' ? ' (stored source bytes)' : ''}`;
      if (to === '-') ctx.log.info(line);
      else ctx.stdout.write(`${line}\n`);
    } finally {
      progress.done();
    }
  },
};
