/** `trajstore find`: locate runs and steps by expression or identity (pipelines/search/find.ts). */
import { repeated, single } from '../kit/flags.js';
import { InvalidInputError } from '../kit/errors.js';
import type { Column } from '../kit/output.js';
import type { CommandContext, CommandSpec } from '../kit/program.js';
import type { SqlWorker } from '../../pipelines/search/sql/runner.js';
import type { FindDocument } from '../../pipelines/search/find.js';
import type { Identity } from '../../pipelines/search/planner.js';

/** Table previews are cut shorter than JSON ones so a row stays readable in a terminal. */
const TABLE_PREVIEW_BYTES = 160;

async function identityOf(options: Record<string, unknown>): Promise<Identity | undefined> {
  const identity: Identity = {};
  const runId = single(options.runId, '--run-id');
  const documentId = single(options.documentId, '--document-id');
  const sessionId = single(options.sessionId, '--session-id');
  const stepId = single(options.stepId, '--step-id');
  if (runId !== undefined) identity.runId = runId;
  if (documentId !== undefined) identity.documentId = documentId;
  if (sessionId !== undefined) identity.sessionId = sessionId;
  if (stepId !== undefined) {
    if (sessionId === undefined) throw new InvalidInputError('--step-id needs --session-id', { hint: 'step ids repeat across sessions: find --session-id S --step-id N' });
    identity.stepId = stepId;
  }
  return Object.keys(identity).length > 0 ? identity : undefined;
}

async function printTable(doc: FindDocument, out: { write(chunk: string): unknown }): Promise<void> {
  const { createRowWriter } = await import('../kit/output.js');
  const { clipUtf8 } = await import('../../pipelines/search/preview.js');
  const columns: Column[] =
    doc.search.scope === 'steps'
      ? [{ key: 'document_id' }, { key: 'step_id', title: 'step' }, { key: 'step_source', title: 'source' }, { key: 'timestamp' }, { key: 'preview' }]
      : [{ key: 'document_id' }, { key: 'run_id' }, { key: 'session_id' }, { key: 'source_path' }, { key: 'timestamp' }, { key: 'preview' }];
  if (doc.matches.length > 0) {
    const writer = createRowWriter('table', columns, out);
    for (const match of doc.matches) {
      const preview = clipUtf8(match.preview, TABLE_PREVIEW_BYTES);
      writer.write({ ...match, preview: preview === match.preview ? preview : `${preview}…` });
    }
    writer.end();
  }
  const count = doc.matches.length;
  out.write(count === 0 ? '(0 matches)\n' : `(${count} match${count === 1 ? '' : 'es'}; mode ${doc.search.mode}, scope ${doc.search.scope})\n`);
  if (doc.truncated) out.write('(truncated)\n');
}

export const findCommand: CommandSpec = {
  name: 'find [dataset]',
  description: 'find runs and steps by text, JSON predicates or identity',
  options: [
    { flags: '--match <expression>', description: 'search expression (repeatable; all must match), e.g. \'#user("disk full") AND $.status=done\'' },
    { flags: '--run-id <id>', description: 'runs with this run id' },
    { flags: '--document-id <id>', description: 'the run with this document id' },
    { flags: '--session-id <id>', description: 'runs of this session' },
    { flags: '--step-id <id>', description: 'one step of the --session-id' },
    { flags: '--source <path>', description: 'only runs imported from this source file (as `list` shows it)' },
    { flags: '--format <format>', description: 'table, json, or auto (table on a terminal, else json)', default: 'table' },
    { flags: '--max-results <n>', description: 'matches to return at most (default 100)' },
    { flags: '--max-preview-bytes <n>', description: 'bytes of preview per match (default 4096)' },
    { flags: '--max-total-bytes <n>', description: 'bytes of matches in all (default 8MiB)' },
    { flags: '--timeout <duration>', description: 'give up after this long (default 30s)' },
  ],
  examples: [
    'trajstore find ./ds --match "disk full"',
    'trajstore find ./ds --match \'#system(prompt) OR #reasoning("retry")\' --format json',
    'trajstore find ./ds --match \'$.status = "done"\'',
    'trajstore find ./ds --session-id s-1 --step-id 2',
  ],
  async run(ctx, { positional, options }) {
    const { withSqlWorker } = await import('../../pipelines/search/sql/runner.js');
    // Started first so that its start-up overlaps the loading and opening below.
    await withSqlWorker((sqlWorker) => find(ctx, positional, options, sqlWorker));
  },
};

async function find(ctx: CommandContext, positional: unknown[], options: Record<string, unknown>, sqlWorker: SqlWorker): Promise<void> {
  const { FIND_DEFAULTS, runFind } = await import('../../pipelines/search/find.js');
  const { byteSize, duration, openDatasetArg, positiveInt } = await import('../../pipelines/search/options.js');
  const matches = repeated(options.match);
  const identity = await identityOf(options);
  const ways = [matches.length > 0, options.runId !== undefined, options.documentId !== undefined, options.sessionId !== undefined].filter(Boolean).length;
  if (ways !== 1) {
    throw new InvalidInputError(ways === 0 ? 'find needs --match, --run-id, --document-id or --session-id' : 'give only one of --match, --run-id, --document-id, --session-id', {
      hint: 'repeat --match to require several expressions',
    });
  }
  const format = single(options.format, '--format') ?? 'table';
  if (!['table', 'json', 'auto'].includes(format)) throw new InvalidInputError(`invalid --format ${JSON.stringify(format)}`, { hint: 'use one of: auto, table, json' });
  const asJson = format === 'json' || (format === 'auto' && !(ctx.stdout as { isTTY?: boolean }).isTTY);
  const limits = {
    maxResults: positiveInt(options.maxResults, '--max-results', FIND_DEFAULTS.maxResults),
    maxPreviewBytes: byteSize(options.maxPreviewBytes, '--max-preview-bytes', FIND_DEFAULTS.maxPreviewBytes),
    maxTotalBytes: byteSize(options.maxTotalBytes, '--max-total-bytes', FIND_DEFAULTS.maxTotalBytes),
    timeoutMs: duration(options.timeout, '--timeout', FIND_DEFAULTS.timeoutMs),
  };
  const sourcePath = single(options.source, '--source');
  const dataset = await openDatasetArg(ctx, positional[0] as string | undefined);
  try {
    const doc = await runFind(dataset, {
      matches,
      ...(identity ? { identity } : {}),
      ...(sourcePath !== undefined ? { sourcePath } : {}),
      ...limits,
      signal: ctx.signal,
      sqlWorker,
    });
    if (!doc.search.fts_available && doc.search.mode !== 'json' && doc.search.mode !== 'identity') {
      ctx.log.warn(`the full-text index of ${doc.dataset_uri} is not available; text terms were matched by a full scan (LIKE)`);
    }
    if (asJson) ctx.stdout.write(`${JSON.stringify(doc, null, 2)}\n`);
    else await printTable(doc, ctx.stdout);
  } finally {
    dataset.close();
  }
}
