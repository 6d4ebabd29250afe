/**
 * The API's errors: one JSON shape for every failure, `{"error": {"status", "code", "message", "hint"?}}`,
 * with the HTTP status the kind of failure calls for. The engine's typed errors (lib/errors.ts)
 * map by kind; anything else is a 500 whose body says nothing of the server's insides.
 */
import { Type, type Static } from '@sinclair/typebox';
import { ExitCode, ToolError } from '../../lib/errors.js';

export const ErrorBody = Type.Object({
  error: Type.Object({
    status: Type.Integer(),
    code: Type.String({ description: 'stable machine-readable kind: bad_request, forbidden, invalid_input, not_found, conflict, payload_too_large, unavailable, internal' }),
    message: Type.String(),
    hint: Type.Optional(Type.String()),
  }),
});
export type ErrorBody = Static<typeof ErrorBody>;

/** A typed error's kind as an HTTP status: input the engine refuses is 422 (the request itself was well-formed). */
const BY_EXIT_CODE: Partial<Record<ExitCode, [number, string]>> = {
  [ExitCode.InvalidInput]: [422, 'invalid_input'],
  [ExitCode.NotFound]: [404, 'not_found'],
  [ExitCode.Conflict]: [409, 'conflict'],
  [ExitCode.ResourceLimit]: [413, 'payload_too_large'],
  [ExitCode.Unavailable]: [503, 'unavailable'],
};

/** Fastify's own client errors (bad JSON, body too large, wrong content type) by status. */
const CLIENT_CODES: Record<number, string> = { 400: 'bad_request', 404: 'not_found', 405: 'bad_request', 413: 'payload_too_large', 415: 'bad_request' };

export function errorBody(status: number, code: string, message: string, hint?: string): ErrorBody {
  return { error: { status, code, message, ...(hint !== undefined ? { hint } : {}) } };
}

/** The status and body for anything a route threw (`contentType`: the request's, named by a 415); `internal` is true for the 500s, which are logged. */
export function toHttpError(error: unknown, contentType?: string): { body: ErrorBody; internal: boolean } {
  if (error instanceof ToolError) {
    const [status, code] = BY_EXIT_CODE[error.exitCode] ?? [500, 'internal'];
    return { body: errorBody(status, code, error.message, error.hint), internal: status === 500 };
  }
  const e = error as { validation?: unknown; statusCode?: number; message?: string; code?: string };
  if (e.validation !== undefined) return { body: errorBody(400, 'bad_request', `invalid request: ${e.message ?? 'failed validation'}`), internal: false };
  if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) {
    const message = e.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE' ? mediaTypeMessage(contentType) : (e.message ?? 'bad request');
    return { body: errorBody(e.statusCode, CLIENT_CODES[e.statusCode] ?? 'bad_request', message), internal: false };
  }
  return { body: errorBody(500, 'internal', 'internal error (see the server log)'), internal: true };
}

/** Fastify's own 415 says only 'Unsupported Media Type': name what was sent and what is taken. */
function mediaTypeMessage(contentType: string | undefined): string {
  return `Content-Type ${JSON.stringify((contentType ?? 'none').slice(0, 100))} is not taken: send the body as application/json`;
}
