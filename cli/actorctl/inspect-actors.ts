/** `actorctl inspect actors`: named actors across the cluster, or the actors of one node. */
import { InvalidInputError } from '../../lib/errors.js';
import { columnsOf, type Column, type Row } from '../../lib/output.js';
import { inspectActors, inspectNodeActors, type ActorPlacement, type ActorsOptions, type InspectOptions } from '../../framework/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { defineCommand, type CommandContext } from '../kit/program.js';
import { FORMAT_OPTIONS, printRows, rowView, type RowView } from '../kit/render.js';
import { INSPECT_OPTIONS, SEEDS_OPTION, inspectFlags, inspectOptions, nodeAddress, warnFailures, type InspectFlags } from './common.js';

interface ActorsFlags {
  /** One node to list instead of the cluster. */
  endpoint: string | undefined;
  inspect: InspectFlags;
  query: Omit<ActorsOptions, keyof InspectOptions>;
  view: RowView;
}

function flags(args: ParsedArgs): ActorsFlags {
  const endpoint = nodeAddress(args, '--endpoint', { lenient: true });
  if (endpoint !== undefined && args.given('--seeds')) throw new InvalidInputError('--endpoint and --seeds exclude each other', { hint: 'give one node with --endpoint, or the cluster with --seeds' });
  const top = args.number('--top', undefined, { integer: true, min: 1 });
  const filter = args.text('--filter');
  return {
    endpoint,
    inspect: inspectFlags(args),
    query: {
      all: args.bool('--all_actors', false),
      ...(filter === undefined ? {} : { filter }),
      ...(top === undefined ? {} : { top }),
    },
    view: rowView(args),
  };
}

const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? '' : 's'}`;

/**
 * The fields every actor has, then `module` (which `actorctl actor` records), then whatever else
 * the actors report (a worker's load, an Echo's calls), in every format: a table on a terminal
 * clips its widest cells to fit, and never leaves a column out.
 */
const NODE_FIELDS: Column[] = [{ key: 'name' }, { key: 'type' }, { key: 'actor_id' }, { key: 'class' }, { key: 'status' }, { key: 'module' }];

async function printNode(ctx: CommandContext, endpoint: string, { inspect, query, view }: ActorsFlags): Promise<void> {
  const rows: Row[] = await inspectNodeActors(endpoint, { ...inspectOptions(ctx, inspect, false), ...query });
  const extra = columnsOf(rows).filter((c) => !NODE_FIELDS.some((f) => f.key === c.key));
  printRows(ctx, view, [...NODE_FIELDS, ...extra], rows, 'no actors found');
  if (view.format === 'table' && rows.length) ctx.stdout.write(`(${plural(rows.length, 'actor')} on ${endpoint})\n`);
}

/** At most five of a list, for a table: `a, b, c, d, e ... (+2 more)`. */
function shortList(items: readonly string[]): string {
  const shown = items.slice(0, 5).join(', ');
  return items.length > 5 ? `${shown} ... (+${items.length - 5} more)` : shown;
}

/** Tables shorten ids (`<node>:<actor>`, 8 characters each) and lists; the other formats give them whole. */
function placementRow(actor: ActorPlacement, table: boolean): Row {
  const { name, instances } = actor;
  if (!table) return { name, instances: instances.length, nodes: instances.map((i) => i.node_id), actor_ids: instances.map((i) => i.actor_id) };
  return {
    name,
    instances: instances.length,
    nodes: shortList(instances.map((i) => i.node_id.slice(0, 8))),
    actor_ids: shortList(instances.map((i) => `${i.node_id.slice(0, 8)}:${i.actor_id.slice(0, 8)}`)),
  };
}

const PLACEMENT_COLUMNS: Column[] = [{ key: 'name' }, { key: 'instances' }, { key: 'nodes' }, { key: 'actor_ids' }];

async function printCluster(ctx: CommandContext, { inspect, query, view }: ActorsFlags): Promise<void> {
  const { nodes, actors, failures } = await inspectActors({ ...inspectOptions(ctx, inspect, true, 'give one node with --endpoint'), ...query });
  warnFailures(ctx, failures);
  const table = view.format === 'table';
  printRows(ctx, view, PLACEMENT_COLUMNS, actors.map((a) => placementRow(a, table)), 'no actors found');
  const instances = actors.reduce((n, a) => n + a.instances.length, 0);
  if (table && actors.length) ctx.stdout.write(`(${plural(actors.length, 'actor')}, ${plural(instances, 'instance')} on ${plural(nodes, 'node')})\n`);
}

export const inspectActorsCommand = defineCommand({
  name: 'inspect actors',
  description: 'show named actors and their instances across the cluster (--seeds) or the actors of one node (--endpoint)',
  options: [
    SEEDS_OPTION,
    { flags: '--endpoint <addr>', description: 'one node to list the actors of, instead of --seeds' },
    { flags: '--top <n>', description: 'show the N actors with the most instances' },
    { flags: '--filter <str>', description: 'keep actor names containing this (case-insensitive)' },
    { flags: '--all_actors <bool>', description: 'True: include system and unnamed actors', default: 'False' },
    ...INSPECT_OPTIONS,
    ...FORMAT_OPTIONS,
  ],
  examples: ['actorctl inspect actors --seeds 127.0.0.1:8000 --top 10', 'actorctl inspect actors --endpoint 127.0.0.1:8000 --all_actors True --format json'],
  flags,
  run: (ctx, f) => (f.endpoint === undefined ? printCluster(ctx, f) : printNode(ctx, f.endpoint, f)),
});
