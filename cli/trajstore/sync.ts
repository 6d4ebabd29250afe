/** `trajstore sync`: the resident worker that mirrors live agent logs and keeps a converted dataset of them. */
import { COMPACTION_DEFAULTS, INPUT_FORMATS, SYNC_DEFAULTS, WRITE_DEFAULTS, planSync, runSync, type BatchReport, type SyncRequest } from '../../pipelines/index.js';
import { formatDuration } from '../../lib/progress.js';
import { escapeControls } from '../../lib/width.js';
import { parseDuration, type ParsedArgs } from '../kit/flags.js';
import { defineCommand, type CommandContext } from '../kit/program.js';
import { LOCK_TIMEOUT_OPTION, lockTimeoutOf, resolveContext } from './common.js';

const SYNC_INPUTS = ['auto', ...INPUT_FORMATS, 'compact-jsonl'] as const;
/** The environment variable that overrides how long superseded snapshots stay readable. */
const GRACE_ENV = 'TRAJSTORE_RECLAIM_GRACE';

interface SyncFlags {
  request: SyncRequest;
}

function flags(args: ParsedArgs): SyncFlags {
  return {
    request: {
      from: args.required('--from'),
      to: args.required('--to'),
      convert: args.required('--convert'),
      inputFormat: args.choice('--input-format', SYNC_INPUTS, 'auto'),
      columns: args.list('--column'),
      intervalMs: args.duration('--interval', SYNC_DEFAULTS.intervalMs),
      once: args.has('--once'),
      lockTimeoutMs: lockTimeoutOf(args),
    },
  };
}

/** The batch's one stderr line: number, files (and those held back as unreadable), records, duration, status, and when a failed one runs again. */
export function batchLine(report: BatchReport): string {
  const retry = report.attempt > 1 ? ` (attempt ${report.attempt})` : '';
  const held = report.held > 0 ? `, ${report.held} held back` : '';
  const head = `sync: batch ${report.batch}${retry}: ${report.files} file(s)${held}, ${report.records} record(s), ${(report.durationMs / 1000).toFixed(2)}s`;
  if (!report.error) return `${head}, ok`;
  const next = report.retryInMs === undefined ? 'no retry' : `next retry in ${formatDuration(report.retryInMs / 1000)}`;
  // One line whatever the error quotes: a file name's line break or escape sequence shows escaped.
  return `${head}, failed: ${escapeControls(report.error.message)}; ${next}`;
}

function graceOf(ctx: CommandContext): number {
  const text = ctx.env[GRACE_ENV];
  return text === undefined || text === '' ? COMPACTION_DEFAULTS.graceMs : parseDuration(GRACE_ENV, text, 0);
}

export const syncCommand = defineCommand({
  name: 'sync',
  description: 'mirror .json/.jsonl/.ndjson logs into a directory and keep a converted dataset of them, batch after batch',
  options: [
    { flags: '--from <directory>', description: 'the source directory (agent session logs), walked recursively' },
    { flags: '--to <directory>', description: 'the mirror: each changed file copied byte for byte (not written with --input-format compact-jsonl)' },
    { flags: '--convert <directory>', description: 'the Storyline dataset kept up to date (a compact store with --input-format compact-jsonl)' },
    { flags: '--input-format <format>', description: `${SYNC_INPUTS.join('|')}`, default: 'auto' },
    { flags: '--column <name=path>', description: 'compact-jsonl: a JSON column NAME from JSON_PATH; repeatable' },
    { flags: '--interval <duration>', description: `between scans of the source (default ${SYNC_DEFAULTS.intervalMs / 1000}s); a failed batch retries after 1s, 2s, 4s... at most ${SYNC_DEFAULTS.retryMaxMs / 1000}s` },
    { flags: '--once', description: 'run one batch and exit' },
    {
      flags: LOCK_TIMEOUT_OPTION.flags,
      description: `wait this long for another command writing the --convert dataset, or another sync writing the --to mirror, to finish, then exit 4 (0: do not wait; default ${WRITE_DEFAULTS.lockTimeoutMs / 60_000}m)`,
    },
  ],
  examples: ['trajstore sync --from ~/.claude/projects --to ./claude-mirror --convert ./claude-dataset', 'trajstore sync --from ./logs --to ./mirror --convert ./records --input-format compact-jsonl --once'],
  flags,
  async run(ctx, { request }) {
    const plan = await planSync(request);
    await runSync(resolveContext(ctx), plan, {
      log: ctx.log,
      signal: ctx.signal,
      graceMs: graceOf(ctx),
      onBatch: (report) => ctx.stderr.write(`${batchLine(report)}\n`),
    });
  },
});
