/** `trajstore list|ls`: the run sources of a dataset (pipelines/list). */
import { parseOutputFormat, renderRows } from '../kit/output.js';
import type { CommandSpec } from '../kit/program.js';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { MANIFEST_KEY } from '../../pipelines/dataset/layout.js';
import { localPathOf, openDataset } from '../../pipelines/dataset/open.js';
import { LIST_COLUMNS, listSources } from '../../pipelines/list/index.js';
import { listRawSources } from '../../pipelines/list/raw.js';
import { resolveDataset } from '../../pipelines/pins/resolve.js';

export const listCommand: CommandSpec = {
  name: 'list [dataset]',
  aliases: ['ls'],
  description: 'list the run sources of a dataset (or of a directory of source files): source path, format, runs, steps, first and last time',
  options: [{ flags: '--format <format>', description: 'table|json|jsonl|csv', default: 'table' }],
  examples: ['trajstore ls ./ds', 'trajstore list @team --format json', 'trajstore ls @agentb-code'],
  async run(ctx, { positional, options }) {
    const format = parseOutputFormat(options.format);
    const location = await resolveDataset(positional[0] as string | undefined, { config: ctx.config, env: process.env, purpose: 'read' });
    const path = localPathOf(location);
    // Not a dataset but source files (a session-log root, a file): list them as `import` would read them.
    if (existsSync(path) && !(statSync(path).isDirectory() && existsSync(join(path, MANIFEST_KEY)))) {
      const { rows, unreadable } = await listRawSources(path, { stdin: ctx.stdin, log: ctx.log, signal: ctx.signal });
      ctx.stdout.write(renderRows(rows, LIST_COLUMNS.storyline, format));
      if (format === 'table' && rows.length === 0) ctx.stdout.write('(no sources)\n');
      if (unreadable > 0) ctx.log.warn(`${unreadable} file(s) could not be read and are not listed`);
      return;
    }
    const dataset = await openDataset(location, process.env);
    try {
      const { columns, rows } = listSources(dataset);
      ctx.stdout.write(renderRows(rows, columns, format));
      if (format === 'table' && rows.length === 0) ctx.stdout.write('(no sources)\n');
    } finally {
      dataset.close();
    }
  },
};
