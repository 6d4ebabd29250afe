/** Fastify's `schemaErrorFormatter` shared by the HTTP servers: schema failures in words that name the input. */
import type { FastifySchemaValidationError } from 'fastify';

/** What a request part's names are, for a message about an unknown one. */
const NAMES: Record<string, string> = { querystring: 'query parameter', body: 'body field', params: 'path parameter', headers: 'header' };

/**
 * A request that breaks its schema. Ajv's own words for an unknown parameter or field
 * ("querystring must NOT have additional properties") leave out which one it is, and for a value
 * outside an enum which values are taken; other failures name their place already
 * (`querystring/limit must be <= 500`).
 */
export function schemaError(errors: FastifySchemaValidationError[], part: string): Error {
  const described = errors.map(({ keyword, instancePath, params, message }) => {
    // Ajv's "must be equal to one of the allowed values" leaves out the values, which are few and what a client needs.
    if (keyword === 'enum' && Array.isArray(params.allowedValues)) return `${part}${instancePath} must be one of: ${params.allowedValues.map(String).join(', ')}`;
    if (keyword !== 'additionalProperties') return `${part}${instancePath} ${message ?? 'is not valid'}`;
    const path = instancePath === '' ? '' : `${instancePath.slice(1)}/`;
    return `unknown ${NAMES[part] ?? part} '${path}${String(params.additionalProperty)}'`;
  });
  return new Error(described.join(', '));
}
