/**
 * `find` and `query` over a mount, with the command line's engines and limits:
 * GET /api/mounts/:mount/find and POST /api/mounts/:mount/query.
 *
 * find answers with exactly the document `trajstore find --format json` prints (expression, scope,
 * mode, snapshot_id, previews), plus `highlight`: the terms its previews show. query attaches the
 * mount as `dataset` (as `trajstore query DATASET` does) and runs under the same watchdog; a request
 * may lower the limits, never raise them past the command line's defaults.
 *
 * Their statements run on the server's SQL thread (search/sql/thread/), one at a time, while the
 * event loop answers other requests; the snapshot a request reads stays open until its statement
 * has ended (Mounts.use waits for the work).
 */
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { clientGone } from '../../../lib/client-gone.js';
import { InvalidInputError } from '../../../lib/errors.js';
import { FIND_DEFAULTS, QUERY_DEFAULTS, DEFAULT_MOUNT } from '../../search/limits.js';
import { highlightTerms, prepareFind } from '../../search/find.js';
import { ExpressionError } from '../../search/grammar/errors.js';
import type { Identity } from '../../search/planner.js';
import { SqlTimeoutError } from '../../search/sql/runner.js';
import type { ServeContext } from '../context.js';

const MountParams = Type.Object({ mount: Type.String() });

const FindQuery = Type.Object(
  {
    match: Type.Optional(Type.Array(Type.String(), { description: 'repeatable; all must match (the `--match` grammar)' })),
    run_id: Type.Optional(Type.String()),
    document_id: Type.Optional(Type.String()),
    session_id: Type.Optional(Type.String()),
    step_id: Type.Optional(Type.String()),
    source: Type.Optional(Type.String()),
    max_results: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
    max_preview_bytes: Type.Optional(Type.Integer({ minimum: 16, maximum: FIND_DEFAULTS.maxPreviewBytes })),
    max_total_bytes: Type.Optional(Type.Integer({ minimum: 1024, maximum: FIND_DEFAULTS.maxTotalBytes })),
    timeout_ms: Type.Optional(Type.Integer({ minimum: 1, maximum: FIND_DEFAULTS.timeoutMs })),
  },
  { additionalProperties: false },
);
type FindQuery = Static<typeof FindQuery>;

const QueryBody = Type.Object(
  {
    sql: Type.String({ minLength: 1 }),
    max_output_rows: Type.Optional(Type.Integer({ minimum: 1, maximum: QUERY_DEFAULTS.maxOutputRows })),
    max_output_bytes: Type.Optional(Type.Integer({ minimum: 1, maximum: QUERY_DEFAULTS.maxOutputBytes })),
    timeout_ms: Type.Optional(Type.Integer({ minimum: 1, maximum: QUERY_DEFAULTS.timeoutMs })),
  },
  { additionalProperties: false },
);

/** The identity of a find request, with the command line's rules (one way to search; step needs session). */
function identityOf(q: FindQuery): Identity | undefined {
  const ways = [(q.match ?? []).length > 0, q.run_id !== undefined, q.document_id !== undefined, q.session_id !== undefined].filter(Boolean).length;
  if (ways !== 1) throw new InvalidInputError(ways === 0 ? 'find needs match, run_id, document_id or session_id' : 'give only one of match, run_id, document_id, session_id');
  if (q.step_id !== undefined && q.session_id === undefined) throw new InvalidInputError('step_id needs session_id');
  if ((q.match ?? []).length > 0) return undefined;
  return {
    ...(q.run_id !== undefined ? { runId: q.run_id } : {}),
    ...(q.document_id !== undefined ? { documentId: q.document_id } : {}),
    ...(q.session_id !== undefined ? { sessionId: q.session_id } : {}),
    ...(q.step_id !== undefined ? { stepId: q.step_id } : {}),
  };
}

/** A cell as JSON: integers past 2^53 as text, BLOBs as base64. */
function jsonCell(value: unknown): unknown {
  if (typeof value === 'bigint') return Number.isSafeInteger(Number(value)) ? Number(value) : value.toString();
  if (Buffer.isBuffer(value)) return value.toString('base64');
  return value;
}

/** What `parse` returns; an expression it refuses is named `match`, the parameter it came in. */
function namingMatch<T>(parse: () => T): T {
  try {
    return parse();
  } catch (error) {
    throw error instanceof ExpressionError ? error.naming('match') : error;
  }
}

export function searchRoutes(app: FastifyInstance, { mounts, sql }: ServeContext): void {
  app.get<{ Params: Static<typeof MountParams>; Querystring: FindQuery }>('/api/mounts/:mount/find', { schema: { params: MountParams, querystring: FindQuery } }, (req, reply) => {
    const q = req.query;
    const identity = identityOf(q);
    const matches = q.match ?? [];
    // The expressions are parsed here first, so a bad one is named as this API's parameter.
    const highlight = namingMatch(() => highlightTerms(matches));
    return mounts.use(req.params.mount, async (ds) => {
      const find = prepareFind(ds, {
        matches,
        ...(identity ? { identity } : {}),
        ...(q.source !== undefined ? { sourcePath: q.source } : {}),
        maxResults: q.max_results ?? FIND_DEFAULTS.maxResults,
        maxPreviewBytes: q.max_preview_bytes ?? FIND_DEFAULTS.maxPreviewBytes,
        maxTotalBytes: q.max_total_bytes ?? FIND_DEFAULTS.maxTotalBytes,
        timeoutMs: q.timeout_ms ?? FIND_DEFAULTS.timeoutMs,
      });
      const rows: unknown[][] = [];
      await sql.run({ ...find.statement, onRow: (row) => rows.push(row) }, clientGone(reply));
      return { ...find.document(rows), highlight };
    });
  });

  app.post<{ Params: Static<typeof MountParams>; Body: Static<typeof QueryBody> }>(
    '/api/mounts/:mount/query',
    { schema: { params: MountParams, body: QueryBody } },
    (req, reply) => {
      const b = req.body;
      if (b.sql.trim() === '') throw new InvalidInputError('the SQL statement is empty');
      return mounts.use(req.params.mount, async (ds) => {
        let columns: string[] = [];
        const rows: unknown[][] = [];
        let truncated: 'rows' | 'bytes' | 'timeout' | null = null;
        try {
          const outcome = await sql.run(
            {
              mounts: [{ name: DEFAULT_MOUNT, path: ds.db.name }],
              sql: b.sql,
              params: [],
              maxRows: b.max_output_rows ?? QUERY_DEFAULTS.maxOutputRows,
              maxBytes: b.max_output_bytes ?? QUERY_DEFAULTS.maxOutputBytes,
              maxMemoryBytes: QUERY_DEFAULTS.maxMemoryBytes,
              timeoutMs: b.timeout_ms ?? QUERY_DEFAULTS.timeoutMs,
              onColumns: (names) => (columns = names),
              onRow: (cells) => rows.push(cells.map(jsonCell)),
            },
            clientGone(reply),
          );
          truncated = outcome.truncated;
        } catch (error) {
          if (!(error instanceof SqlTimeoutError)) throw error;
          truncated = 'timeout';
        }
        return { snapshot_id: ds.snapshotId, columns, rows, truncated };
      });
    },
  );
}
