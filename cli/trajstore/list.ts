/** `trajstore list|ls`: the run sources of a dataset (pipelines/list). */
import type { CommandSpec } from '../kit/program.js';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';

export const listCommand: CommandSpec = {
  name: 'list [dataset]',
  aliases: ['ls'],
  description: 'list the run sources of a dataset (or of a directory of source files): source path, format, runs, steps, first and last time',
  options: [{ flags: '--format <format>', description: 'table|json|jsonl|csv', default: 'table' }],
  examples: ['trajstore ls ./ds', 'trajstore list @team --format json', 'trajstore ls @agentb-code'],
  async run(ctx, { positional, options }) {
    const { resolveDataset } = await import('../../pipelines/pins/resolve.js');
    const { MANIFEST_KEY } = await import('../../pipelines/dataset/layout.js');
    const { localPathOf, openDataset } = await import('../../pipelines/dataset/open.js');
    const { LIST_COLUMNS, listSources } = await import('../../pipelines/list/index.js');
    const { listRawSources } = await import('../../pipelines/list/raw.js');
    const { parseOutputFormat, renderRows } = await import('../kit/output.js');
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
