/** `trajstore find`: locate runs and steps by expression or identity. */
import { InvalidInputError } from '../../lib/errors.js';
import { OUTPUT_FORMATS, jsonText, type Column } from '../../lib/output.js';
import { FIND_DEFAULTS, FIND_SORTS, find, type FindDocument, type FindSort, type Identity } from '../../pipelines/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { defineCommand, type CommandContext } from '../kit/program.js';
import { rowWriter, type RowView } from '../kit/render.js';
import { progressOn, resolveContext } from './common.js';

/** `auto`: a table on a terminal, else the JSON document. */
const FIND_FORMATS = [...OUTPUT_FORMATS, 'auto'] as const;

interface FindFlags {
  dataset: string | undefined;
  matches: string[];
  identity: Identity | undefined;
  sourcePath: string | undefined;
  format: (typeof FIND_FORMATS)[number];
  sort: FindSort;
  wide: boolean;
  maxResults: number;
  maxPreviewBytes: number;
  maxTotalBytes: number;
  timeoutMs: number;
}

function identityOf(args: ParsedArgs): Identity | undefined {
  const identity: Identity = {};
  const runId = args.text('--run-id');
  const documentId = args.text('--document-id');
  const sessionId = args.text('--session-id');
  const stepId = args.text('--step-id');
  if (runId !== undefined) identity.runId = runId;
  if (documentId !== undefined) identity.documentId = documentId;
  if (sessionId !== undefined) identity.sessionId = sessionId;
  if (stepId !== undefined) {
    if (sessionId === undefined) throw new InvalidInputError('--step-id needs --session-id', { hint: 'step ids repeat across sessions: find --session-id S --step-id N' });
    identity.stepId = stepId;
  }
  return Object.keys(identity).length > 0 ? identity : undefined;
}

function flags(args: ParsedArgs): FindFlags {
  const matches = args.list('--match');
  const identity = identityOf(args);
  const ways = [matches.length > 0, identity?.runId !== undefined, identity?.documentId !== undefined, identity?.sessionId !== undefined].filter(Boolean).length;
  if (ways !== 1) {
    throw new InvalidInputError(ways === 0 ? 'find needs --match, --run-id, --document-id or --session-id' : 'give only one of --match, --run-id, --document-id, --session-id', {
      hint: 'repeat --match to require several expressions',
    });
  }
  return {
    dataset: args.positional(0),
    matches,
    identity,
    sourcePath: args.text('--source'),
    format: args.choice('--format', FIND_FORMATS, 'table'),
    sort: args.choice('--sort', FIND_SORTS, 'stored'),
    wide: args.has('--wide'),
    maxResults: args.positiveInt('--max-results', FIND_DEFAULTS.maxResults),
    maxPreviewBytes: args.byteSize('--max-preview-bytes', FIND_DEFAULTS.maxPreviewBytes),
    maxTotalBytes: args.byteSize('--max-total-bytes', FIND_DEFAULTS.maxTotalBytes),
    timeoutMs: args.duration('--timeout', FIND_DEFAULTS.timeoutMs),
  };
}

/** Every field of a match, for CSV and JSONL. */
const MATCH_FIELDS = ['source_path', 'document_id', 'run_id', 'session_id', 'step_id', 'step_source', 'effective_kind', 'timestamp', 'preview'] as const satisfies ReadonlyArray<keyof FindDocument['matches'][number]>;

/** What a table shows of a match: enough to find it again, and why it matched. */
function matchColumns(doc: FindDocument): Column[] {
  return doc.search.scope === 'steps'
    ? [{ key: 'document_id' }, { key: 'step_id', title: 'step' }, { key: 'step_source', title: 'source' }, { key: 'timestamp' }, { key: 'preview' }]
    : [{ key: 'document_id' }, { key: 'run_id' }, { key: 'session_id' }, { key: 'source_path' }, { key: 'timestamp' }, { key: 'preview' }];
}

/** Table, CSV and JSONL: one row per match (the search facts are in the JSON document only). */
function printMatches(ctx: CommandContext, view: RowView, doc: FindDocument): void {
  const columns = view.format === 'table' ? matchColumns(doc) : MATCH_FIELDS.map((key) => ({ key }));
  if (view.format !== 'table' || doc.matches.length > 0) {
    const writer = rowWriter(ctx, view, columns);
    for (const match of doc.matches) writer.write({ ...match });
    writer.end();
  }
  if (view.format !== 'table') {
    if (doc.truncated) ctx.log.warn(`the matches were cut at --max-results ${doc.matches.length} or --max-total-bytes`);
    return;
  }
  const count = doc.matches.length;
  ctx.stdout.write(count === 0 ? '(0 matches)\n' : `(${count} match${count === 1 ? '' : 'es'}; mode ${doc.search.mode}, scope ${doc.search.scope})\n`);
  if (doc.truncated) ctx.stdout.write('(truncated)\n');
}

export const findCommand = defineCommand({
  name: 'find [dataset]',
  description: 'find runs and steps by text, JSON predicates or identity',
  options: [
    { flags: '--match <expression>', description: 'search expression (repeatable; all must match), e.g. \'#user("disk full") AND $.status=done\'' },
    { flags: '--run-id <id>', description: 'runs with this run id' },
    { flags: '--document-id <id>', description: 'the run with this document id' },
    { flags: '--session-id <id>', description: 'runs of this session' },
    { flags: '--step-id <id>', description: 'one step of the --session-id' },
    { flags: '--source <path>', description: 'only runs imported from this source file (as `list` shows it)' },
    { flags: '--format <format>', description: `${FIND_FORMATS.join('|')}: json is the whole search document; table, csv and jsonl one row per match; auto is table on a terminal, else json`, default: 'table' },
    { flags: '--sort <order>', description: 'stored (default: the order runs were imported; fastest), time (oldest first), relevance (BM25, best first; needs a text term every match contains). The order never changes which rows match', default: 'stored' },
    { flags: '--wide', description: 'tables: print every cell whole (on a terminal, long cells are clipped to fit)' },
    { flags: '--max-results <n>', description: `matches to return at most (default ${FIND_DEFAULTS.maxResults})` },
    { flags: '--max-preview-bytes <n>', description: `bytes of preview per match (default ${FIND_DEFAULTS.maxPreviewBytes})` },
    { flags: '--max-total-bytes <n>', description: 'bytes of matches in all (default 8MiB)' },
    { flags: '--timeout <duration>', description: 'give up after this long (default 30s)' },
  ],
  examples: [
    'trajstore find ./ds --match "disk full"',
    'trajstore find ./ds --match \'#system(prompt) OR #reasoning("retry")\' --format json',
    'trajstore find ./ds --match \'$.status = "done"\'',
    'trajstore find ./ds --match "timeout" --sort relevance --max-results 10',
    'trajstore find ./ds --session-id s-1 --step-id 2',
  ],
  flags,
  async run(ctx, f) {
    const doc = await find(resolveContext(ctx), {
      dataset: f.dataset,
      matches: f.matches,
      ...(f.identity ? { identity: f.identity } : {}),
      ...(f.sourcePath !== undefined ? { sourcePath: f.sourcePath } : {}),
      sort: f.sort,
      maxResults: f.maxResults,
      maxPreviewBytes: f.maxPreviewBytes,
      maxTotalBytes: f.maxTotalBytes,
      timeoutMs: f.timeoutMs,
      progress: progressOn(ctx),
    });
    if (!doc.search.fts_available && doc.search.mode !== 'json' && doc.search.mode !== 'identity') {
      ctx.log.warn(`the full-text index of ${doc.dataset_uri} is not available; text terms were matched by a full scan (LIKE)`);
    }
    if (f.sort !== doc.search.sort) {
      ctx.log.warn(`--sort ${f.sort}: nothing to rank by (no text term that every match contains, or no full-text index); the matches are in ${doc.search.sort} order`);
    }
    const format = f.format === 'auto' ? (ctx.stdout.isTTY ? 'table' : 'json') : f.format;
    if (format === 'json') ctx.stdout.write(`${jsonText(doc, 2)}\n`);
    else printMatches(ctx, { format, wide: f.wide }, doc);
  },
});
