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

test('taken: anyOf as oneOf, annotations left out, $defs anywhere, lists of plain types, enums and bounds as zod writes them', () => {
  const checked = replySchema({
    title: 'Person',
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 20, description: 'given name' },
      tag: { anyOf: [{ $ref: '#/$defs/tag' }, { type: 'null' }] },
      note: { type: ['string', 'null'] },
      mood: { type: 'string', enum: ['calm', 'busy'] },
      age: { type: 'integer', minimum: -Number.MAX_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER },
    },
    required: ['name'],
    additionalProperties: { type: 'integer' },
    $defs: { tag: { enum: ['a', 'b'], examples: [{ deep: [[[['ignored']]]] }] } },
  });
  assert.equal(checked, {
    schema: {
      $defs: { tag: { enum: ['a', 'b'] } },
      type: 'object',
      properties: { name: { type: 'string', maxLength: 20 }, tag: { oneOf: [{ $ref: '#/$defs/tag' }, { type: 'null' }] }, note: { type: ['string', 'null'] }, mood: { enum: ['calm', 'busy'] }, age: { type: 'integer' } },
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
    [{ const: 1, minimum: 0 }, "/minimum: 'minimum' cannot be combined with 'const' here"],
    [{ type: 'string', enum: ['a', 1] }, '/enum: 1 is not of the schema\'s type "string"'],
    [{ type: 'integer', minimum: 0 }, "/minimum: 'minimum' is not taken for a schema of type 'integer'"],
    [{ type: 'string', maxLength: 1000 }, '/maxLength: at most 500 is taken'],
    [{ type: 'array', items: { type: 'string' }, minItems: 501 }, '/minItems: at most 500 is taken'],
    [{ enum: Array.from({ length: 300 }, (_, i) => `v${i}`) }, '/enum: the schema has more than 256 enum values, consts and oneOf/anyOf options in all'],
    [{ type: 'array', prefixItems: Array.from({ length: 200 }, () => ({ enum: ['a', 'b'] })) }, 'more than 256 enum values'],
    [{ enum: ['x'.repeat(15_001)] }, 'more than 15000 characters of enum and const strings'],
    [{ type: 'object', properties: { 'a\u0001': { type: 'string' } } }, '/properties: the property name "a\\u0001" holds a control character or a lone surrogate'],
    [{ enum: ['\ud800'] }, '/enum: the value "\\ud800" holds a control character or a lone surrogate'],
    [{ type: 'object', properties: {}, required: ['toString'] }, "/required: names 'toString', which is not among the properties"],
    // Words an object inherits are no kinds or bounds.
    [{ type: 'constructor' }, '/type: "constructor" is not a JSON Schema type'],
    [{ type: '__proto__' }, '/type: "__proto__" is not a JSON Schema type'],
    [{ type: 'integer', constructor: 1 }, "/constructor: 'constructor' is not taken for a schema of type 'integer'"],
    [{ type: 'number', toString: 1 }, "/toString: 'toString' is not taken for a schema of type 'number'"],
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
