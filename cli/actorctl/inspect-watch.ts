/** `actorctl inspect watch`: polls the cluster and prints what changed each round. */
import type { Column } from '../../lib/output.js';
import { ALIVE_NODES, WATCH_KINDS, watchCluster, type WatchChange, type WatchKind, type WatchOptions, type WatchRound } from '../../framework/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { defineCommand, type CommandContext } from '../kit/program.js';
import { FORMAT_OPTIONS, rowView, rowWriter, type RowView } from '../kit/render.js';
import { INSPECT_OPTIONS, SEEDS_OPTION, inspectOptions, warnFailures } from './common.js';

interface WatchFlags {
  watch: Omit<WatchOptions, 'signal'>;
  view: RowView;
}

function flags(args: ParsedArgs): WatchFlags {
  return {
    watch: {
      ...inspectOptions(args),
      intervalMs: args.number('--interval', 1, { min: 0.01 }) * 1000,
      kind: args.choice<WatchKind>('--kind', WATCH_KINDS, 'all'),
      maxRounds: args.number('--max_rounds', undefined, { integer: true, min: 1 }),
    },
    view: rowView(args),
  };
}

/** Rows for programs: one per change, the first round listing everything as new. */
const CHANGE_COLUMNS: Column[] = [{ key: 'time' }, { key: 'round' }, { key: 'kind' }, { key: 'subject' }, { key: 'before' }, { key: 'after' }];

/** For people, a round is a few lines: the totals first, then what changed. */
function roundLines(round: WatchRound): string[] {
  const stamp = `[${round.at.toTimeString().slice(0, 8)}]`;
  if (round.initial) {
    return [
      ...(round.cluster ? [`${stamp} Initial state: ${round.cluster.alive}/${round.cluster.members} nodes alive`] : []),
      ...(round.actors ? [`${stamp} Initial state: ${round.actors.unique} unique actors, ${round.actors.instances} total instances`] : []),
      ...(round.metrics ? [`${stamp} Initial state: ${round.metrics.series} key metric series`] : []),
    ];
  }
  const changes = describeChanges(round.changes);
  return changes.length ? [`${stamp} Changes detected:`, ...changes.map((c) => `  • ${c}`)] : [`${stamp} No changes`];
}

function describeChanges(changes: readonly WatchChange[]): string[] {
  const of = (kind: WatchChange['kind']): WatchChange[] => changes.filter((c) => c.kind === kind);
  const actors = of('actors');
  const names = (list: WatchChange[]): string => list.map((c) => c.subject).join(', ');
  const added = actors.filter((c) => c.before === null);
  const removed = actors.filter((c) => c.after === null);
  return [
    ...of('cluster').map((c) =>
      c.subject === ALIVE_NODES ? `Alive nodes: ${c.before} -> ${c.after}` : `Node ${c.subject}: ${c.before ?? '(new)'} -> ${c.after ?? '(removed)'}`,
    ),
    ...(added.length ? [`New actors: ${names(added)}`] : []),
    ...(removed.length ? [`Removed actors: ${names(removed)}`] : []),
    ...actors.filter((c) => c.before !== null && c.after !== null).map((c) => `${c.subject}: ${c.before} -> ${c.after} instances`),
    ...of('metrics').map((c) => `${c.subject}: ${c.before ?? '(new)'} -> ${c.after ?? '(removed)'}`),
  ];
}

async function watch(ctx: CommandContext, { watch, view }: WatchFlags): Promise<void> {
  ctx.log.info(`watching the cluster via seeds ${watch.seeds.join(', ')}: ${watch.kind}, every ${watch.intervalMs / 1000}s; Ctrl+C stops`);
  const writer = view.format === 'table' ? undefined : rowWriter(ctx, view, CHANGE_COLUMNS);
  await watchCluster({ ...watch, signal: ctx.signal }, (round) => {
    warnFailures(ctx, round.failures);
    if (!writer) {
      for (const line of roundLines(round)) ctx.stdout.write(`${line}\n`);
      return;
    }
    for (const change of round.changes) writer.write({ time: round.at.toISOString(), round: round.round, ...change });
  });
  writer?.end();
  if (ctx.signal.aborted) ctx.log.info('watch stopped');
}

export const inspectWatchCommand = defineCommand({
  name: 'inspect watch',
  description: 'poll the cluster and print changes of members, actors and key metrics',
  options: [
    SEEDS_OPTION,
    { flags: '--interval <seconds>', description: 'refresh interval', default: '1.0' },
    { flags: '--kind <kind>', description: `what to watch: ${WATCH_KINDS.join('|')}`, default: 'all' },
    { flags: '--max_rounds <n>', description: 'stop after N rounds (default: until Ctrl+C)' },
    ...INSPECT_OPTIONS,
    ...FORMAT_OPTIONS,
  ],
  examples: ['actorctl inspect watch --seeds 127.0.0.1:8000 --kind cluster --interval 2', 'actorctl inspect watch --seeds 127.0.0.1:8000 --format jsonl'],
  flags,
  run: watch,
});
