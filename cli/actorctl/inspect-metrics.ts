/** `actorctl inspect metrics`: each Alive node's Prometheus metrics, raw or the key series. */
import type { Column } from '../../lib/output.js';
import { inspectMetrics } from '../../framework/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { defineCommand } from '../kit/program.js';
import { FORMAT_OPTIONS, printRows, rowView, writeText, type RowView } from '../kit/render.js';
import { INSPECT_OPTIONS, SEEDS_OPTION, inspectFlags, inspectOptions, warnFailures, type InspectFlags } from './common.js';

interface MetricsFlags {
  inspect: InspectFlags;
  /** Every series (as each node's text, in a table), or only the key series. */
  raw: boolean;
  view: RowView;
}

function flags(args: ParsedArgs): MetricsFlags {
  return { inspect: inspectFlags(args), raw: args.bool('--raw', true), view: rowView(args) };
}

const COLUMNS: Column[] = [{ key: 'node_id' }, { key: 'addr' }, { key: 'series' }, { key: 'value' }];

export const inspectMetricsCommand = defineCommand({
  name: 'inspect metrics',
  description: "show each Alive node's metrics (--raw False: only the key series)",
  options: [
    SEEDS_OPTION,
    { flags: '--raw <bool>', description: 'True: every series (a table shows each node\'s Prometheus text); False: the key series', default: 'True' },
    ...INSPECT_OPTIONS,
    ...FORMAT_OPTIONS,
  ],
  examples: ['actorctl inspect metrics --seeds 127.0.0.1:8000 --raw False', 'actorctl inspect metrics --seeds 127.0.0.1:8000 --format jsonl'],
  flags,
  async run(ctx, { inspect, raw, view }) {
    const { nodes, failures } = await inspectMetrics({ ...inspectOptions(ctx, inspect), keyOnly: !raw });
    warnFailures(ctx, failures);
    const table = view.format === 'table';
    // For people, every series is best read as the text format itself, which tools such as promtool also read.
    if (raw && table) {
      for (const node of nodes) writeText(ctx, `# node ${node.node_id} (${node.addr})\n${node.text.trimEnd()}\n`);
      return;
    }
    const rows = nodes.flatMap((node) => node.samples.map((s) => ({ node_id: node.node_id, addr: node.addr, series: s.series, value: s.value })));
    printRows(ctx, view, COLUMNS, rows, 'no key metrics found');
    if (table) ctx.stdout.write('(key series only; --raw True shows every series)\n');
  },
});
