/** `trajstore stats [overview|agents|models|tools]`: dataset health and built-in reports. */
import { InvalidInputError } from '../../lib/errors.js';
import { columnsOf, jsonText, type Row } from '../../lib/output.js';
import { REPORTS, datasetHealth, statsReport, type DatasetHealth, type ReportName } from '../../pipelines/index.js';
import { defineCommand, type CommandContext, type CommandSpec } from '../kit/program.js';
import { FORMAT_OPTIONS, printRows, rowView, type RowView } from '../kit/render.js';
import { progressOn, resolveContext } from './common.js';

/** One subcommand per report; typed by the engine's report names, so a report added there must be added here. */
const REPORT_DESCRIPTIONS: Record<ReportName, string> = {
  overview: 'runs, steps, tool calls, tokens, cost, duration and steps per run',
  agents: 'the overview per agent',
  models: 'agent steps, tokens and cost per model',
  tools: 'calls, errors, error rate and median result size per tool',
};

/** Tables show the dataset facts as field/value lines, then one row per relation; json is the health document. */
function printHealth(ctx: CommandContext, view: RowView, health: DatasetHealth): void {
  const { relations, ...facts } = health;
  if (view.format === 'json') {
    ctx.stdout.write(`${jsonText(health, 2)}\n`);
    return;
  }
  if (view.format !== 'table') {
    // Row formats get one row per relation, each carrying the dataset facts.
    const rows: Row[] = relations.map((r) => ({ ...facts, ...r }));
    printRows(ctx, view, columnsOf(rows), rows);
    return;
  }
  const lines = Object.entries(facts).map(([key, value]) => ({ key, value: value === null ? '-' : String(value) }));
  printRows(ctx, view, [{ key: 'key', title: 'dataset' }, { key: 'value', title: '' }], lines);
  ctx.stdout.write('\n');
  printRows(ctx, view, [{ key: 'relation' }, { key: 'rows' }, { key: 'parts' }, { key: 'bytes', title: 'part bytes' }, { key: 'index_rows' }, { key: 'index_bytes' }], relations.map((r) => ({ ...r })));
}

const healthCommand = defineCommand({
  name: 'stats [dataset]',
  description: `health and counts of a dataset; \`stats ${REPORTS.join('|')}\` for reports`,
  options: FORMAT_OPTIONS,
  examples: ['trajstore stats ./ds', 'trajstore stats overview ./ds --format json'],
  flags: (args) => ({ dataset: args.positional(0), view: rowView(args) }),
  async run(ctx, { dataset, view }) {
    printHealth(ctx, view, await datasetHealth(resolveContext(ctx), dataset, progressOn(ctx)));
  },
});

function reportCommand(name: ReportName): CommandSpec {
  return defineCommand({
    name: `stats ${name} [dataset]`,
    description: REPORT_DESCRIPTIONS[name],
    options: FORMAT_OPTIONS,
    flags: (args) => {
      if (args.positionalCount > 1) throw new InvalidInputError(`stats ${name} takes one DATASET`);
      return { dataset: args.positional(0), view: rowView(args) };
    },
    async run(ctx, { dataset, view }) {
      const { rows, unpriced } = await statsReport(resolveContext(ctx), dataset, name, progressOn(ctx));
      printRows(ctx, view, columnsOf(rows), rows, 'no rows');
      if (unpriced.length > 0) {
        ctx.log.warn(`no price for ${unpriced.join(', ')}: their steps have no cost and cost_usd leaves them out; add [prices."<model>"] to ${ctx.config.path} and import again`);
      }
    },
  });
}

export const statsCommands: CommandSpec[] = [healthCommand, ...REPORTS.map(reportCommand)];
