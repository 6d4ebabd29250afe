/**
 * Numbers in query strings are decimal, and finite. Fastify's validator coerces a query value with
 * JavaScript's `+value`, which also takes `0x10`, ` 5` and `1e400`; the last becomes Infinity and
 * then passes `maximum` (a limit of 1e400 read every run), or reaches SQL as a value it cannot bind.
 * This hook checks, before validation, every value given for a parameter the route's schema types
 * as a number or integer.
 */
import type { FastifyInstance } from 'fastify';

const DECIMAL = /^-?\d{1,16}(\.\d{1,16})?$/;

interface SchemaProperty {
  type?: unknown;
}

/** Adds the check to `app`; a bad value is a 400 naming the parameter. */
export function strictQueryNumbers(app: FastifyInstance): void {
  app.addHook('preValidation', async (req) => {
    const properties = (req.routeOptions.schema?.querystring as { properties?: Record<string, SchemaProperty> } | undefined)?.properties;
    if (!properties) return;
    for (const [name, given] of Object.entries(req.query as Record<string, unknown>)) {
      const type = Object.hasOwn(properties, name) ? properties[name]!.type : undefined;
      if (type !== 'integer' && type !== 'number') continue;
      for (const value of Array.isArray(given) ? given : [given]) {
        if (typeof value === 'string' && !DECIMAL.test(value)) {
          throw Object.assign(new Error(`querystring/${name} must be a decimal number, not ${JSON.stringify(value.slice(0, 40))}`), { statusCode: 400, validation: [] });
        }
      }
    }
  });
}
