/**
 * The JSON Schemas a reply can be held to (OpenAI's `response_format: {type: "json_schema"}`): the
 * part of JSON Schema that node-llama-cpp turns into a grammar faithfully. Its converter reads what
 * it knows and drops the rest without a word: an `anyOf`, a `{}` or an unknown type becomes
 * `null`, a `minimum` or a `pattern` is not kept. So a schema is checked here first, and anything
 * outside that part is refused by its JSON pointer, rather than generated to another shape.
 *
 * `anyOf` is read as `oneOf` (for generating one value, they allow the same values: it matches one
 * alternative at least, and the grammar picks one). A `type` beside an `enum` or `const` is taken
 * when every value has that type (zod and pydantic write enums so). Annotations are left out of
 * what is passed on: they constrain nothing.
 *
 * The size of what a grammar holds is bounded too. The grammar is checked against every candidate
 * token at every step, for every alternative still open, on the thread that decodes the whole
 * batch: a 6,000-value enum took 116 ms a token there, and slowed every other reply as much.
 * llama.cpp refuses repetition counts from 1,000 on, and node-llama-cpp drops those past 2,000.
 */
import type { GbnfJsonSchema } from 'node-llama-cpp';
import { ownValue } from '../../lib/own-property.js';
import { isJsonObject, type JsonObject } from '../../lib/json-object.js';

/** A schema whose JSON text is longer is refused: its grammar is made on the worker's thread. */
export const MAX_SCHEMA_CHARS = 64 * 1024;
/** Nesting deeper than this is refused (the check and the converter both recurse). */
const MAX_SCHEMA_DEPTH = 32;
/** Values of `enum` and `const`, and options of `oneOf`/`anyOf`, in the whole schema. */
const MAX_ALTERNATIVES = 256;
/** Characters of all `enum` and `const` strings together (OpenAI's bound for a large enum). */
const MAX_ENUM_CHARS = 15_000;
/** Properties named in the whole schema. */
const MAX_PROPERTIES = 1_000;
/** The largest `minLength`, `maxLength`, `minItems`, `maxItems`, `minProperties`, `maxProperties`. */
export const MAX_REPETITIONS = 500;
/**
 * A bound of a number at or past the safe integers' (zod writes ±(2^53 - 1) for `.int()`) is taken as
 * none; any other `minimum` or `maximum` is refused, as the grammar cannot hold a reply to it.
 */
const SAFE_BOUND = Number.MAX_SAFE_INTEGER;

/** Words that describe a schema and constrain nothing: taken anywhere, and left to the converter to ignore. */
const ANNOTATIONS = new Set(['description', 'title', 'default', 'examples', '$schema', '$id', '$comment', 'deprecated', 'readOnly', 'writeOnly']);
/** The words each kind of schema may have besides the annotations and `$defs`. */
const KINDS: Record<string, ReadonlySet<string>> = {
  string: new Set(['type', 'minLength', 'maxLength', 'format']),
  number: new Set(['type']),
  integer: new Set(['type']),
  boolean: new Set(['type']),
  null: new Set(['type']),
  object: new Set(['type', 'properties', 'additionalProperties', 'required', 'minProperties', 'maxProperties']),
  array: new Set(['type', 'items', 'prefixItems', 'minItems', 'maxItems']),
};
/** Types a list of types may hold (`["string", "null"]`). */
const LISTABLE_TYPES = new Set(['string', 'number', 'integer', 'boolean', 'null']);
const STRING_FORMATS = new Set(['date-time', 'date', 'time']);

export type ReplySchema = { schema: GbnfJsonSchema } | { problem: string };

const isCount = (value: unknown): boolean => Number.isSafeInteger(value) && (value as number) >= 0;

/** The schema as node-llama-cpp takes it, or the first thing in it that would not be kept. */
export function replySchema(schema: unknown): ReplySchema {
  const refused = (why: string): ReplySchema => ({ problem: `the JSON Schema is not one a reply can be held to: ${why}` });
  let text: string | undefined;
  try {
    text = JSON.stringify(schema);
  } catch {
    return refused('it nests too deep to be read');
  }
  if ((text ?? '').length > MAX_SCHEMA_CHARS) return refused(`it is longer than ${MAX_SCHEMA_CHARS} characters of JSON`);
  const defs = new Set<string>();
  collectDefs(schema, defs, 0);
  try {
    return { schema: check(schema, '', { defs, alternatives: 0, enumChars: 0, properties: 0 }, 0) as GbnfJsonSchema };
  } catch (error) {
    if (error instanceof SchemaProblem) return refused(error.message);
    throw error;
  }
}

class SchemaProblem extends Error {}

/** What the check has met so far across the schema, against the bounds above. */
interface Walk {
  readonly defs: ReadonlySet<string>;
  alternatives: number;
  enumChars: number;
  properties: number;
}

/** Counts `n` more of a bounded thing, failing at `at` past `max`. */
function spend(walk: Walk, what: 'alternatives' | 'enumChars' | 'properties', n: number, max: number, at: string, described: string): void {
  walk[what] += n;
  if (walk[what] > max) fail(at, `the schema has more than ${max} ${described} in all`);
}

/** A string a grammar writes as it is: no control characters (a reply would hold them raw) and no lone surrogates. */
function checkText(text: string, at: string, what: string): void {
  if (/[\u0000-\u001f\u007f]/.test(text) || !text.isWellFormed()) fail(at, `${what} ${JSON.stringify(text.slice(0, 40))} holds a control character or a lone surrogate`);
}

function fail(pointer: string, what: string): never {
  throw new SchemaProblem(`${pointer || '(the root)'}: ${what}`);
}

/** Every `$defs` name anywhere in the schema: node-llama-cpp resolves `#/$defs/<name>` against all of them. */
function collectDefs(node: unknown, defs: Set<string>, depth: number): void {
  if (depth > MAX_SCHEMA_DEPTH || (!isJsonObject(node) && !Array.isArray(node))) return;
  if (isJsonObject(node) && isJsonObject(node['$defs'])) for (const name of Object.keys(node['$defs'])) defs.add(name);
  for (const value of Object.values(node)) collectDefs(value, defs, depth + 1);
}

/** Checks one schema and returns it as the converter takes it (`anyOf` as `oneOf`, each part checked). */
function check(node: unknown, at: string, walk: Walk, depth: number): unknown {
  if (depth > MAX_SCHEMA_DEPTH) fail(at, `nested deeper than ${MAX_SCHEMA_DEPTH} levels`);
  if (!isJsonObject(node)) fail(at, 'a schema must be an object (true, false and other values are not taken)');
  const out: JsonObject = {};
  const words = Object.keys(node).filter((word) => !ANNOTATIONS.has(word));
  if (isJsonObject(node['$defs'])) out['$defs'] = Object.fromEntries(Object.entries(node['$defs']).map(([name, def]) => [name, check(def, `${at}/$defs/${escape(name)}`, walk, depth + 1)]));
  else if ('$defs' in node) fail(`${at}/$defs`, 'must be an object of schemas');
  const rest = words.filter((word) => word !== '$defs');
  const only = (allowed: readonly string[]): void => {
    const other = rest.find((word) => !allowed.includes(word));
    if (other !== undefined) fail(`${at}/${escape(other)}`, `'${other}' cannot be combined with '${allowed[0]}' here`);
  };
  for (const word of ['const', 'enum']) {
    if (!(word in node)) continue;
    only([word, 'type']);
    const values = word === 'const' ? [node['const']] : node['enum'];
    if (!Array.isArray(values) || values.length === 0 || !values.every(isScalar)) fail(`${at}/${word}`, word === 'const' ? 'must be a string, number, boolean or null' : 'must be a non-empty list of strings, numbers, booleans or nulls');
    spend(walk, 'alternatives', values.length, MAX_ALTERNATIVES, `${at}/${word}`, 'enum values, consts and oneOf/anyOf options');
    for (const value of values) {
      if (typeof value !== 'string') continue;
      checkText(value, `${at}/${word}`, 'the value');
      spend(walk, 'enumChars', [...value].length, MAX_ENUM_CHARS, `${at}/${word}`, 'characters of enum and const strings');
    }
    if ('type' in node) {
      const types = Array.isArray(node['type']) ? node['type'] : [node['type']];
      const stray = values.find((value) => !types.some((type) => hasType(value, type)));
      if (stray !== undefined) fail(`${at}/${word}`, `${JSON.stringify(stray)} is not of the schema's type ${JSON.stringify(node['type'])}`);
    }
    return word === 'const' ? { ...out, const: node['const'] } : { ...out, enum: values };
  }
  for (const word of ['oneOf', 'anyOf']) {
    if (!(word in node)) continue;
    only([word]);
    const options = node[word];
    if (!Array.isArray(options) || options.length === 0) fail(`${at}/${word}`, 'must be a non-empty list of schemas');
    spend(walk, 'alternatives', options.length, MAX_ALTERNATIVES, `${at}/${word}`, 'enum values, consts and oneOf/anyOf options');
    return { ...out, oneOf: options.map((option, i) => check(option, `${at}/${word}/${i}`, walk, depth + 1)) };
  }
  if ('$ref' in node) {
    only(['$ref']);
    const ref = node['$ref'];
    const name = typeof ref === 'string' && ref.startsWith('#/$defs/') ? ref.slice('#/$defs/'.length) : undefined;
    if (name === undefined || !walk.defs.has(name)) fail(`${at}/$ref`, `only '#/$defs/<name>' of a definition in the schema is taken, not ${JSON.stringify(String(ref).slice(0, 80))}`);
    return { ...out, $ref: ref };
  }
  return { ...out, ...typed(node, rest, at, walk, depth) };
}

function typed(node: JsonObject, words: readonly string[], at: string, walk: Walk, depth: number): JsonObject {
  const type = node['type'];
  if (type === undefined) fail(at, words.length ? `'${words[0]}' is not taken here: give a 'type', 'const', 'enum', 'oneOf', 'anyOf' or '$ref'` : "a schema that allows any value is not taken: give a 'type', 'const', 'enum', 'oneOf', 'anyOf' or '$ref'");
  if (Array.isArray(type)) {
    if (type.length === 0 || !type.every((t) => typeof t === 'string' && LISTABLE_TYPES.has(t))) fail(`${at}/type`, `a list of types may hold only ${[...LISTABLE_TYPES].join(', ')}`);
    const other = words.find((word) => word !== 'type');
    if (other !== undefined) fail(`${at}/${escape(other)}`, `'${other}' is not taken with a list of types`);
    return { type };
  }
  const allowed = typeof type === 'string' ? ownValue(KINDS, type) : undefined;
  if (!allowed) fail(`${at}/type`, `${JSON.stringify(type)} is not a JSON Schema type`);
  const numeric = type === 'integer' || type === 'number';
  const other = words.find((word) => !allowed.has(word) && !(numeric && ownValue(NO_BOUND, word)?.(node[word])));
  if (other !== undefined) fail(`${at}/${escape(other)}`, `'${other}' is not taken for a schema of type '${type}' (the reply could not be held to it)`);
  const out: JsonObject = { type };
  for (const word of ['minLength', 'maxLength', 'minProperties', 'maxProperties', 'minItems', 'maxItems']) {
    if (!(word in node)) continue;
    if (!isCount(node[word])) fail(`${at}/${word}`, 'must be a whole number, 0 or more');
    if ((node[word] as number) > MAX_REPETITIONS) fail(`${at}/${word}`, `at most ${MAX_REPETITIONS} is taken (a grammar holds no larger count)`);
    out[word] = node[word];
  }
  if ('format' in node) {
    if (!STRING_FORMATS.has(node['format'] as string)) fail(`${at}/format`, `only ${[...STRING_FORMATS].join(', ')} are taken, not ${JSON.stringify(String(node['format']).slice(0, 40))}`);
    if ('minLength' in node || 'maxLength' in node) fail(`${at}/format`, 'is not taken together with minLength or maxLength');
    out['format'] = node['format'];
  }
  if ('properties' in node) {
    const properties = node['properties'];
    if (!isJsonObject(properties)) fail(`${at}/properties`, 'must be an object of schemas');
    spend(walk, 'properties', Object.keys(properties).length, MAX_PROPERTIES, `${at}/properties`, 'properties');
    for (const name of Object.keys(properties)) checkText(name, `${at}/properties`, 'the property name');
    out['properties'] = Object.fromEntries(Object.entries(properties).map(([name, schema]) => [name, check(schema, `${at}/properties/${escape(name)}`, walk, depth + 1)]));
  }
  if ('required' in node) {
    const required = node['required'];
    if (!Array.isArray(required) || !required.every((name) => typeof name === 'string')) fail(`${at}/required`, 'must be a list of property names');
    const properties = isJsonObject(node['properties']) ? node['properties'] : {};
    const unknown = required.find((name) => !Object.hasOwn(properties, name));
    if (unknown !== undefined) fail(`${at}/required`, `names '${unknown.slice(0, 80)}', which is not among the properties`);
    out['required'] = required;
  }
  if ('additionalProperties' in node) {
    const extra = node['additionalProperties'];
    out['additionalProperties'] = typeof extra === 'boolean' ? extra : check(extra, `${at}/additionalProperties`, walk, depth + 1);
  }
  if ('items' in node) out['items'] = check(node['items'], `${at}/items`, walk, depth + 1);
  if ('prefixItems' in node) {
    const prefix = node['prefixItems'];
    if (!Array.isArray(prefix)) fail(`${at}/prefixItems`, 'must be a list of schemas');
    out['prefixItems'] = prefix.map((item, i) => check(item, `${at}/prefixItems/${i}`, walk, depth + 1));
  }
  return out;
}

/** Numeric bounds that bound nothing a reply could hold in practice (see SAFE_BOUND). */
const NO_BOUND: Record<string, (value: unknown) => boolean> = {
  minimum: (value) => typeof value === 'number' && value <= -SAFE_BOUND,
  exclusiveMinimum: (value) => typeof value === 'number' && value <= -SAFE_BOUND,
  maximum: (value) => typeof value === 'number' && value >= SAFE_BOUND,
  exclusiveMaximum: (value) => typeof value === 'number' && value >= SAFE_BOUND,
};

/** Whether a scalar is of a JSON Schema type. */
function hasType(value: unknown, type: unknown): boolean {
  if (type === 'integer') return Number.isInteger(value);
  if (type === 'null') return value === null;
  return typeof value === type;
}

const isScalar = (value: unknown): boolean => value === null || ['string', 'number', 'boolean'].includes(typeof value);
/** A JSON pointer's escaping of one name (RFC 6901). */
const escape = (name: string): string => name.replaceAll('~', '~0').replaceAll('/', '~1');
