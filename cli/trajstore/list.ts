/** `trajstore list|ls`: the run sources of a dataset, or of a directory of source files. */
import type { Column } from '../../lib/output.js';
import { listSources, type SourceListing } from '../../pipelines/index.js';
import { defineCommand } from '../kit/program.js';
import { FORMAT_OPTIONS, printRows, rowView } from '../kit/render.js';
import { progressOn, resolveContext } from './common.js';

const COLUMNS: Record<SourceListing['kind'], Column[]> = {
  storyline: [{ key: 'source_path' }, { key: 'format' }, { key: 'runs' }, { key: 'steps' }, { key: 'first_timestamp' }, { key: 'last_timestamp' }],
  files: [{ key: 'source_path' }, { key: 'format' }, { key: 'runs' }, { key: 'steps' }, { key: 'first_timestamp' }, { key: 'last_timestamp' }],
  compact: [{ key: 'source_path' }, { key: 'format' }, { key: 'records' }, { key: 'first_timestamp' }, { key: 'last_timestamp' }],
  catalog: [{ key: 'name' }, { key: 'dataset' }],
};

export const listCommand = defineCommand({
  name: 'list [dataset]',
  aliases: ['ls'],
  description: 'list the run sources of a dataset (or of a directory of source files): source path, format, runs, steps, first and last time; for a directory-service pin (@team), the datasets granted to you',
  options: FORMAT_OPTIONS,
  examples: ['trajstore ls ./ds', 'trajstore list @team --format json', 'trajstore ls @agentb-code'],
  flags: (args) => ({ dataset: args.positional(0), view: rowView(args) }),
  async run(ctx, { dataset, view }) {
    const listing = await listSources(resolveContext(ctx), dataset, { stdin: ctx.stdin, log: ctx.log, signal: ctx.signal, progress: progressOn(ctx) });
    printRows(ctx, view, COLUMNS[listing.kind], listing.rows.map((row) => ({ ...row })), listing.kind === 'catalog' ? 'no datasets granted' : 'no sources');
    if (listing.unreadable > 0) ctx.log.warn(`${listing.unreadable} file(s) could not be read and are not listed`);
  },
});
