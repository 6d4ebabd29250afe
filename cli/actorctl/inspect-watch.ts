/**
 * `actorctl inspect watch`: polls the cluster and shows it as it changes. On a terminal (table
 * format) each round redraws the screen in place, as top(1) does: the members, the actors, the key
 * series and the latest changes. Otherwise it prints what changed, round by round: lines for
 * people (table), one row per change for programs (json, jsonl, csv).
 */
import { renderRows, type Column, type Row } from '../../lib/output.js';
import { ALIVE_NODES, WATCH_KINDS, watchCluster, type WatchChange, type WatchKind, type WatchOptions, type WatchRound } from '../../framework/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { defineCommand, type CommandContext } from '../kit/program.js';
import { FORMAT_OPTIONS, rowView, rowWriter, type RowView } from '../kit/render.js';
import { INSPECT_OPTIONS, SEEDS_OPTION, inspectFlags, inspectOptions, warnFailures, type InspectFlags } from './common.js';

interface WatchFlags {
  inspect: InspectFlags;
  watch: Pick<WatchOptions, 'intervalMs' | 'kind' | 'maxRounds'>;
  view: RowView;
}

function flags(args: ParsedArgs): WatchFlags {
  return {
    inspect: inspectFlags(args),
    watch: {
      intervalMs: args.seconds('--interval', 1, 0.01),
      kind: args.choice<WatchKind>('--kind', WATCH_KINDS, 'all'),
      maxRounds: args.number('--max_rounds', undefined, { integer: true, min: 1 }),
    },
    view: rowView(args),
  };
}

/** Rows for programs: one per change, the first round listing everything as new. */
const CHANGE_COLUMNS: Column[] = [{ key: 'time' }, { key: 'round' }, { key: 'kind' }, { key: 'subject' }, { key: 'before' }, { key: 'after' }];

const stampOf = (round: WatchRound): string => `[${round.at.toTimeString().slice(0, 8)}]`;

/** For people, a round is a few lines: the totals first, then what changed. */
function roundLines(round: WatchRound): string[] {
  const stamp = stampOf(round);
  if (round.unreachable) return [`${stamp} No node answers (${round.unreachable}); still watching`];
  if (round.initial) {
    const { members, actors, metrics } = round.state;
    const alive = members.filter((m) => m.status === 'Alive').length;
    return [
      `${stamp} Initial state: ${alive}/${members.length} nodes alive`,
      ...(actors ? [`${stamp} Initial state: ${actors.length} unique actors, ${actors.reduce((n, a) => n + a.instances, 0)} total instances`] : []),
      ...(metrics ? [`${stamp} Initial state: ${metrics.length} key metric series`] : []),
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

/** Changes of the last rounds kept under the redrawn screen. */
const RECENT_CHANGES = 8;

/** Draws the whole state of each round over the last one, fitted to the terminal. */
class Screen {
  private readonly recent: string[] = [];
  private first = true;

  constructor(
    private readonly ctx: CommandContext,
    private readonly intervalMs: number,
  ) {}

  draw(round: WatchRound): void {
    if (!round.initial) for (const change of describeChanges(round.changes)) this.recent.push(`${stampOf(round)} ${change}`);
    this.recent.splice(0, Math.max(0, this.recent.length - RECENT_CHANGES));
    const width = this.ctx.stdout.columns ?? 80;
    const height = this.ctx.stdout.stream.rows || 24;
    const lines = this.frame(round, width);
    // The last line stays free for the cursor; what does not fit says so.
    const shown = lines.length < height ? lines : [...lines.slice(0, height - 2), `… ${lines.length - height + 2} more lines (a taller terminal, or --format jsonl, shows all)`];
    const clip = (line: string): string => (line.length > width ? `${line.slice(0, width - 1)}…` : line);
    // Home, each line over the old one (erasing what is left of it), then erase below: no flicker.
    this.ctx.stdout.write(`${this.first ? '\x1b[2J' : ''}\x1b[H${shown.map((l) => `${clip(l)}\x1b[K\n`).join('')}\x1b[J`);
    this.first = false;
  }

  private frame(round: WatchRound, width: number): string[] {
    const { members, actors, metrics } = round.state;
    const failing = new Set(round.failures.map((f) => f.node_id));
    const counts = new Map<string, number>();
    for (const m of members) counts.set(m.status, (counts.get(m.status) ?? 0) + 1);
    const table = (rows: Row[], columns: Column[]): string[] => renderRows(rows, columns, 'table', { maxWidth: width }).trimEnd().split('\n');
    const source = round.unreachable ? `no node answers (${round.unreachable}); last seen` : `via ${round.source}`;
    const lines = [
      `Every ${this.intervalMs / 1000}s: cluster ${source} — round ${round.round}, ${round.at.toTimeString().slice(0, 8)} (Ctrl+C stops)`,
      `${members.length} members: ${[...counts].map(([s, n]) => `${n} ${s}`).join(', ') || 'none'}`,
      '',
      ...table(
        members.map((m) => ({ ...m, note: failing.has(m.node_id) ? 'not answering' : '' })),
        [{ key: 'node_id' }, { key: 'addr' }, { key: 'status' }, { key: 'note' }],
      ),
    ];
    if (actors) lines.push('', `${actors.length} named actors, ${actors.reduce((n, a) => n + a.instances, 0)} instances`, ...(actors.length ? table(actors, [{ key: 'name' }, { key: 'instances' }]) : []));
    if (metrics) lines.push('', 'Key series (sum over the nodes)', ...(metrics.length ? table(metrics.map((m) => ({ ...m })), [{ key: 'series' }, { key: 'value' }]) : []));
    lines.push('', 'Recent changes:', ...(this.recent.length ? this.recent : ['  (none yet)']));
    return lines;
  }
}

async function watch(ctx: CommandContext, f: WatchFlags): Promise<void> {
  const options = { ...inspectOptions(ctx, f.inspect), ...f.watch, signal: ctx.signal };
  ctx.log.info(`watching the cluster via seeds ${options.seeds.join(', ')}: ${options.kind}, every ${options.intervalMs / 1000}s; Ctrl+C stops`);
  const table = f.view.format === 'table';
  const screen = table && ctx.stdout.isTTY ? new Screen(ctx, options.intervalMs) : undefined;
  const writer = table ? undefined : rowWriter(ctx, f.view, CHANGE_COLUMNS);
  await watchCluster(options, (round) => {
    if (round.unreachable) ctx.log.warn(`round ${round.round}: no node answers (${round.unreachable}); still watching`);
    // On the redrawn screen the members that do not answer are marked in place.
    if (!screen) warnFailures(ctx, round.failures);
    if (screen) screen.draw(round);
    else if (writer) for (const change of round.changes) writer.write({ time: round.at.toISOString(), round: round.round, ...change });
    else for (const line of roundLines(round)) ctx.stdout.write(`${line}\n`);
  });
  writer?.end();
  if (ctx.signal.aborted) ctx.log.info('watch stopped');
}

export const inspectWatchCommand = defineCommand({
  name: 'inspect watch',
  description: 'watch members, actors and key metrics: a live screen on a terminal, else what changes, round by round; a member that dies shows as Suspect, then Failed',
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
