/** `trajstore stats [overview|agents|models|tools]`: dataset health and built-in reports (pipelines/stats). */
import { InvalidInputError } from '../kit/errors.js';
import type { OutputFormat } from '../kit/output.js';
import type { CommandSpec } from '../kit/program.js';
import type { ReportName } from '../../pipelines/stats/index.js';

const FORMAT_OPTION = { flags: '--format <format>', description: 'table|json|jsonl|csv', default: 'table' };

/** One subcommand per report; typed by the pipeline's report names, so a report added there must be added here. */
const REPORT_DESCRIPTIONS: Record<ReportName, string> = {
  overview: 'runs, steps, tool calls, tokens, cost, duration and steps per run',
  agents: 'the overview per agent',
  models: 'agent steps, tokens and cost per model',
  tools: 'calls, errors, error rate and median result size per tool',
};
const REPORTS = Object.keys(REPORT_DESCRIPTIONS) as ReportName[];

const healthCommand: CommandSpec = {
  name: 'stats [dataset]',
  description: `health and counts of a dataset; \`stats ${REPORTS.join('|')}\` for reports`,
  options: [FORMAT_OPTION],
  examples: ['trajstore stats ./ds', 'trajstore stats overview ./ds --format json'],
  async run(ctx, { positional, options }) {
    const { resolveDataset } = await import('../../pipelines/pins/resolve.js');
    const { localPathOf, openDataset } = await import('../../pipelines/dataset/open.js');
    const { datasetHealth, indexStateOf } = await import('../../pipelines/stats/index.js');
    const { columnsOf, parseOutputFormat, renderRows } = await import('../kit/output.js');
    const format = parseOutputFormat(options.format);
    const location = await resolveDataset(positional[0] as string | undefined, { config: ctx.config, env: process.env, purpose: 'read' });
    // Looked at before opening, because opening rebuilds a stale or missing index.
    const before = await indexStateOf(localPathOf(location));
    const dataset = await openDataset(location, process.env);
    try {
      const health = datasetHealth(dataset, before);
      if (format === 'json') {
        ctx.stdout.write(`${JSON.stringify(health, null, 2)}\n`);
        return;
      }
      if (format !== 'table') {
        // Row formats get one row per relation, each carrying the dataset facts.
        const { relations, ...facts } = health;
        const rows = relations.map((r) => ({ ...facts, ...r }));
        ctx.stdout.write(renderRows(rows, columnsOf(rows), format));
        return;
      }
      const { relations, ...facts } = health;
      const lines = Object.entries(facts).map(([key, value]) => ({ key, value: value === null ? '-' : String(value) }));
      ctx.stdout.write(renderRows(lines, [{ key: 'key', title: 'dataset' }, { key: 'value', title: '' }], 'table'));
      ctx.stdout.write('\n');
      ctx.stdout.write(renderRows(relations.map((r) => ({ ...r })), [{ key: 'relation' }, { key: 'rows' }, { key: 'parts' }, { key: 'bytes' }, { key: 'index_rows' }], 'table'));
    } finally {
      dataset.close();
    }
  },
};

function reportCommand(name: ReportName, description: string): CommandSpec {
  return {
    name: `stats ${name} [dataset]`,
    description,
    options: [FORMAT_OPTION],
    async run(ctx, { positional, options }) {
      const { report } = await import('../../pipelines/stats/index.js');
      const { openDatasetArg } = await import('../../pipelines/search/options.js');
      const { columnsOf, parseOutputFormat, renderRows } = await import('../kit/output.js');
      const format: OutputFormat = parseOutputFormat(options.format);
      if (positional.length > 1) throw new InvalidInputError(`stats ${name} takes one DATASET`);
      const dataset = await openDatasetArg(ctx, positional[0] as string | undefined);
      try {
        const rows = report(dataset, name);
        ctx.stdout.write(renderRows(rows, columnsOf(rows), format));
        if (format === 'table' && rows.length === 0) ctx.stdout.write('(no rows)\n');
      } finally {
        dataset.close();
      }
    },
  };
}

export const statsCommands: CommandSpec[] = [healthCommand, ...REPORTS.map((name) => reportCommand(name, REPORT_DESCRIPTIONS[name]))];
