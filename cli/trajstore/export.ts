/** `trajstore export`: a dataset to a trajectory format (a file, a directory, or stdout). */
import { EXPORT_FORMATS, QUERY_DEFAULTS, exportDataset, type ExportFilter, type ExportFormat } from '../../pipelines/index.js';
import { InvalidInputError } from '../../lib/errors.js';
import type { ParsedArgs } from '../kit/flags.js';
import { defineCommand } from '../kit/program.js';
import { progressOn, resolveContext } from './common.js';

interface ExportFlags {
  from: string | undefined;
  to: string;
  outputFormat: ExportFormat;
  overwrite: boolean;
  filter: ExportFilter;
}

/** The run filters; `--where` is one SQL predicate, the others repeat (any of the values). */
function filterOf(args: ParsedArgs): ExportFilter {
  const where = args.text('--where');
  const values = (flag: string): string[] => {
    const list = args.list(flag);
    if (list.includes('')) throw new InvalidInputError(`${flag} is empty`, { hint: `give ${flag} a value` });
    return list;
  };
  return {
    documentIds: values('--document-id'),
    runIds: values('--run-id'),
    sessionIds: values('--session-id'),
    matches: values('--match'),
    ...(where !== undefined ? { where } : {}),
    timeoutMs: args.duration('--timeout', QUERY_DEFAULTS.timeoutMs),
  };
}

function flags(args: ParsedArgs): ExportFlags {
  return {
    from: args.text('--from'),
    to: args.required('--to'),
    outputFormat: args.choice('--output-format', EXPORT_FORMATS),
    overwrite: args.has('--overwrite'),
    filter: filterOf(args),
  };
}

export const exportCommand = defineCommand({
  name: 'export',
  description: 'export a dataset to a trajectory format (a file, a directory, or - for stdout)',
  options: [
    { flags: '-f, --from <dataset>', description: 'dataset to export (default: the default dataset)' },
    { flags: '-t, --to <target>', description: '- (stdout, JSONL), a file (JSONL), a directory (existing, or ending in /: one file per document), s3://bucket/key (JSONL) or s3://bucket/prefix/ (one object per document)' },
    { flags: '-o, --output-format <format>', description: EXPORT_FORMATS.join('|') },
    { flags: '--overwrite', description: 'replace existing target files or objects' },
    { flags: '--document-id <id>', description: 'only this run (repeatable: any of them)' },
    { flags: '--run-id <id>', description: 'only runs with this run id (repeatable)' },
    { flags: '--session-id <id>', description: 'only runs of this session (repeatable)' },
    { flags: '--match <expression>', description: 'only runs that `find --match` matches, in a step or the run (repeatable: all must match)' },
    { flags: '--where <predicate>', description: 'only runs for which this SQL predicate over the columns of `runs` holds (read-only, like `query`)' },
    { flags: '--timeout <duration>', description: 'give up choosing the runs after this long; exits 6 (default 30s)' },
  ],
  examples: [
    'trajstore export -f ./my-dataset -t - -o atif',
    'trajstore export -f ./my-dataset -t out/ -o storyline',
    'trajstore export -f ./ds -t failed.jsonl -o atif --where "cost_usd > 1 AND agent_name = \'ops-bot\'"',
    'trajstore export -f ./ds -t - -o storyline --match \'#user("disk full")\' --session-id s-1 --session-id s-2',
  ],
  flags,
  async run(ctx, { from, to, outputFormat, overwrite, filter }) {
    const summary = await exportDataset(resolveContext(ctx), { from, to, outputFormat, overwrite, filter, stdout: ctx.stdout.stream, log: ctx.log, signal: ctx.signal, progress: progressOn(ctx) });
    if (summary.filtered && summary.documents === 0) ctx.log.warn('no run matched the filters');
    const line = `exported ${summary.documents} document(s) as ${summary.format} from snapshot ${summary.snapshot_id} to ${to === '-' ? 'stdout' : to}${summary.path === 'raw' ? ' (stored source bytes)' : ''}`;
    // With -t -, stdout is the export itself: the summary is a diagnostic.
    if (to === '-') ctx.log.info(line);
    else ctx.stdout.write(`${line}\n`);
  },
});
