/**
 * The JSON Schemas a reply can be held to (reply-schema.ts): what is taken, as node-llama-cpp's
 * converter takes it, and what is refused, by its JSON pointer. The serving Router's test holds real
 * replies to schemas; this one covers the check's edges without a model.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { MAX_SCHEMA_CHARS, replySchema } from '../serving/reply-schema.js';

const problemOf = (schema: unknown): string => {
  const checked = replySchema(schema);
  if (!('problem' in checked)) throw new Error(`taken: ${JSON.stringify(schema)}`);
  return checked.problem;
};

test('taken: anyOf as oneOf, annotations kept, $defs anywhere, lists of plain types', () => {
  const checked = replySchema({
    title: 'Person',
    type: 'object',
    properties: { name: { type: 'string', maxLength: 20, description: 'given name' }, tag: { anyOf: [{ $ref: '#/$defs/tag' }, { type: 'null' }] }, note: { type: ['string', 'null'] } },
    required: ['name'],
    additionalProperties: { type: 'integer' },
    $defs: { tag: { enum: ['a', 'b'] } },
  });
  assert.equal(checked, {
    schema: {
      title: 'Person',
      $defs: { tag: { enum: ['a', 'b'] } },
      type: 'object',
      properties: { name: { description: 'given name', type: 'string', maxLength: 20 }, tag: { oneOf: [{ $ref: '#/$defs/tag' }, { type: 'null' }] }, note: { type: ['string', 'null'] } },
      required: ['name'],
      additionalProperties: { type: 'integer' },
    },
  });
});

test('refused, by pointer: what the converter would drop or turn into null', () => {
  const cases: Array<[unknown, string]> = [
    [true, '(the root): a schema must be an object'],
    [{ type: ['object', 'null'] }, '/type: a list of types may hold only string, number, integer, boolean, null'],
    [{ type: 'widget' }, '/type: "widget" is not a JSON Schema type'],
    [{ type: 'array', items: { not: { type: 'string' } } }, "/items: 'not' is not taken here"],
    [{ type: 'object', properties: { 'a/b': { type: 'number', multipleOf: 2 } } }, "/properties/a~1b/multipleOf: 'multipleOf' is not taken for a schema of type 'number'"],
    [{ enum: [] }, '/enum: must be a non-empty list'],
    [{ enum: [{ a: 1 }] }, '/enum: must be a non-empty list of strings, numbers, booleans or nulls'],
    [{ const: 1, type: 'integer' }, "/type: 'type' cannot be combined with 'const' here"],
    [{ oneOf: [{ type: 'string' }, {}] }, '/oneOf/1: a schema that allows any value is not taken'],
    [{ type: 'string', minLength: -1 }, '/minLength: must be a whole number, 0 or more'],
    [{ type: 'string', format: 'date', maxLength: 3 }, '/format: is not taken together with minLength or maxLength'],
    [{ $ref: 'https://example.com/schema' }, "/$ref: only '#/$defs/<name>' of a definition in the schema is taken"],
    [{ type: 'object', $defs: [] }, '/$defs: must be an object of schemas'],
  ];
  for (const [schema, problem] of cases) assert.match(problemOf(schema), problem, JSON.stringify(schema));
});

test('refused: a schema too long or too deep to make a grammar of on the worker thread', () => {
  const long = { type: 'object', properties: Object.fromEntries(Array.from({ length: 4000 }, (_, i) => [`property_${i}`, { type: 'string' }])) };
  assert.ok(JSON.stringify(long).length > MAX_SCHEMA_CHARS);
  assert.match(problemOf(long), `longer than ${MAX_SCHEMA_CHARS} characters`);
  let deep: unknown = { type: 'string' };
  for (let i = 0; i < 40; i++) deep = { type: 'array', items: deep };
  assert.match(problemOf(deep), 'nested deeper than 32 levels');
});

test.run();
