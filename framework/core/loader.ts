/**
 * Finds an actor class from a class path `module.path.ClassName` and turns command-line words into
 * typed constructor parameters using the class's TypeBox schema. What the user gave wrong is an
 * InvalidInputError naming it (and, for a class path, every place that was tried).
 */
import { existsSync } from 'node:fs';
import { join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { TObject, TSchema } from '@sinclair/typebox';
import { InvalidInputError } from '../../lib/errors.js';
import { distPath } from '../../lib/install.js';
import { actorMeta, type ActorMeta } from './actor.js';
import type { ActorClass } from './context.js';
import { acceptedParams, checkParams, declaredParam, problemText, typeName } from './params.js';

export { describeParams } from './params.js';

/** dist/ of this build: module paths of this repository resolve under it (also from the bundles in dist/bin/). */
const DIST_ROOT = distPath();

/** A class path that leads to no actor class: the hint lists every place tried. */
function loadError(message: string, tried: string[]): InvalidInputError {
  return new InvalidInputError(message, { hint: tried.length ? `tried: ${tried.join('; ')}` : 'example: framework.examples.Echo' });
}

export interface LoadedActorClass {
  cls: ActorClass<never>;
  meta: ActorMeta;
  className: string;
  module: string;
}

export async function loadActorClass(classPath: string): Promise<LoadedActorClass> {
  const parts = classPath.split('.');
  if (parts.length < 2 || parts.some((p) => !/^[A-Za-z_$@][\w$-]*$/.test(p))) {
    throw loadError(`class path '${classPath}' must look like module.path.ClassName`, []);
  }
  const className = parts.pop()!;
  const modulePath = parts.join('/');
  const tried: string[] = [];
  const candidates = [join(DIST_ROOT, `${modulePath}.js`), join(DIST_ROOT, modulePath, 'index.js')];
  for (const file of candidates) {
    // Relative to where the command runs when it is below it; else whole (`../../x` helps nobody).
    const below = relative(process.cwd(), file);
    const shown = below && !below.startsWith('..') ? below : file;
    if (!existsSync(file)) {
      tried.push(`${shown}: no such file`);
      continue;
    }
    return pickExport(await importOrExplain(pathToFileURL(file).href, shown, tried), className, shown, classPath, tried);
  }
  // Then the Node module path, as `import('module/path')` would resolve it.
  let mod: Record<string, unknown>;
  try {
    mod = (await import(modulePath)) as Record<string, unknown>;
  } catch (error) {
    tried.push(`node module '${modulePath}': ${(error as Error).message.split('\n')[0]}`);
    throw loadError(`cannot import a module for '${classPath}'`, tried);
  }
  return pickExport(mod, className, `node module '${modulePath}'`, classPath, tried);
}

async function importOrExplain(url: string, shown: string, tried: string[]): Promise<Record<string, unknown>> {
  try {
    return (await import(url)) as Record<string, unknown>;
  } catch (error) {
    tried.push(`${shown}: import failed: ${(error as Error).message.split('\n')[0]}`);
    throw loadError(`module for class path could not be imported`, tried);
  }
}

function pickExport(mod: Record<string, unknown>, className: string, shown: string, classPath: string, tried: string[]): LoadedActorClass {
  const value = mod[className];
  if (value === undefined) {
    const exports = Object.keys(mod).filter((k) => actorMeta(mod[k]));
    tried.push(`${shown}: no export '${className}' (actor classes exported: ${exports.join(', ') || 'none'})`);
    throw loadError(`no actor class '${className}' for '${classPath}'`, tried);
  }
  const meta = actorMeta(value);
  if (!meta) {
    tried.push(`${shown}: export '${className}' is a ${typeof value}, not an Actor subclass or a remote() class`);
    throw loadError(`'${classPath}' is not an actor class`, tried);
  }
  return { cls: value as ActorClass<never>, meta, className, module: shown };
}

const TRUE = 'true';
const FALSE = 'false';
const INTEGER = /^-?\d+$/;
const DECIMAL = /^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/;

/**
 * A word from the command line read as its declared type. Words are text, so reading them is
 * parsing, never guessing: a boolean is `true` or `false`, an integer or number is written in
 * decimal, a string is the word itself, and anything else (arrays, objects, unions) is JSON; a
 * union that takes a string also takes a word that is not JSON as that string.
 */
function readWord(name: string, s: TSchema, raw: string, schema: TObject): unknown {
  const type = typeName(s);
  const bad = (what: string): never => {
    throw new InvalidInputError(`--${name}: '${raw}' is not ${what}`, { hint: `accepted parameters: ${acceptedParams(schema)}` });
  };
  switch (type) {
    case 'string':
      return raw;
    case 'boolean': {
      const lower = raw.toLowerCase();
      return lower === TRUE ? true : lower === FALSE ? false : bad('a boolean (true or false)');
    }
    case 'integer':
      return INTEGER.test(raw) && Number.isSafeInteger(Number(raw)) ? Number(raw) : bad('an integer');
    case 'number':
      return DECIMAL.test(raw) && Number.isFinite(Number(raw)) ? Number(raw) : bad('a number');
    default:
      try {
        return JSON.parse(raw);
      } catch {
        return type.split('|').includes('string') ? raw : bad(`JSON of type ${type}`);
      }
  }
}

/**
 * `--key value` pairs after `--` -> parameters. A value may start with `-` (negative numbers); a
 * boolean key alone means true; `--key=value` works too; `-` in keys reads as `_`. A key the class
 * does not declare itself, or given twice, is refused.
 */
function parseParamWords(words: readonly string[], schema: TObject): Map<string, unknown> {
  const out = new Map<string, unknown>();
  for (let i = 0; i < words.length; ) {
    const word = words[i]!;
    if (!word.startsWith('--') || word === '--') throw new InvalidInputError(`expected --key after '--', got '${word}' (accepted parameters: ${acceptedParams(schema)})`);
    const eq = word.indexOf('=');
    const name = (eq < 0 ? word.slice(2) : word.slice(2, eq)).replaceAll('-', '_');
    const s = declaredParam(schema, name);
    if (!s) throw new InvalidInputError(`unknown constructor parameter --${name} (accepted parameters: ${acceptedParams(schema)})`);
    if (out.has(name)) throw new InvalidInputError(`constructor parameter --${name} is given twice`);
    let raw: string;
    if (eq >= 0) {
      raw = word.slice(eq + 1);
      i++;
    } else if (typeName(s) === 'boolean') {
      const next = words[i + 1]?.toLowerCase();
      if (next === TRUE || next === FALSE) {
        raw = next;
        i += 2;
      } else {
        raw = TRUE;
        i++;
      }
    } else {
      const next = words[i + 1];
      if (next === undefined) throw new InvalidInputError(`--${name} needs a value (${typeName(s)})`);
      raw = next;
      i += 2;
    }
    out.set(name, readWord(name, s, raw, schema));
  }
  return out;
}

/** A JSON object of parameters (`-D actor.extra_kwargs=...`): values are taken as they are typed in JSON. */
function parseParamJson(text: string, schema: TObject): Map<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new InvalidInputError(`actor.extra_kwargs is not JSON: ${(error as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new InvalidInputError('actor.extra_kwargs must be a JSON object');
  const out = new Map<string, unknown>();
  for (const [key, v] of Object.entries(value)) {
    const name = key.replaceAll('-', '_');
    if (!declaredParam(schema, name)) throw new InvalidInputError(`unknown constructor parameter '${key}' in actor.extra_kwargs (accepted parameters: ${acceptedParams(schema)})`);
    out.set(name, v);
  }
  return out;
}

/**
 * The constructor parameters of a class: the JSON objects of `-D actor.extra_kwargs` in order, then
 * the `--key value` words after `--` (which win), with the schema's defaults, checked.
 */
export function actorParams(schema: TObject, given: { json: readonly string[]; words: readonly string[] }): Record<string, unknown> {
  const entries = [...given.json.flatMap((text) => [...parseParamJson(text, schema)]), ...parseParamWords(given.words, schema)];
  // fromEntries defines each key as an own property, so no name can reach an object's prototype.
  const checked = checkParams(schema, Object.fromEntries(entries));
  if ('problems' in checked) {
    const problems = checked.problems.slice(0, 5).map((p) => problemText(p, '--'));
    throw new InvalidInputError(`invalid constructor parameters: ${problems.join('; ')} (accepted parameters: ${acceptedParams(schema)})`);
  }
  return checked.params;
}
