/**
 * Finds an actor class from a class path `module.path.ClassName` and turns command-line words into
 * typed constructor parameters using the class's TypeBox schema. What the user gave wrong is an
 * InvalidInputError naming it (and, for a class path, every place that was tried).
 */
import { existsSync } from 'node:fs';
import { join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { TObject, TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { InvalidInputError } from '../../lib/errors.js';
import { distPath } from '../../lib/install.js';
import { actorMeta, type ActorMeta } from './actor.js';
import type { ActorClass } from './context.js';

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
    const shown = relative(process.cwd(), file) || file;
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

export interface ParamInfo {
  name: string;
  type: string;
  default: unknown;
  description: string | undefined;
  required: boolean;
}

/** The constructor parameters of a schema, for help and error messages. */
export function describeParams(schema: TObject): ParamInfo[] {
  const required = new Set(schema.required ?? []);
  return Object.entries(schema.properties).map(([name, s]) => ({
    name,
    type: typeName(s),
    default: (s as { default?: unknown }).default,
    description: (s as { description?: string }).description,
    required: required.has(name) && (s as { default?: unknown }).default === undefined,
  }));
}

function typeName(s: TSchema): string {
  const t = (s as { type?: unknown }).type;
  if (typeof t === 'string') return t;
  if (Array.isArray(s.anyOf)) return (s.anyOf as TSchema[]).map(typeName).join('|');
  if ('const' in s) return JSON.stringify(s.const);
  return 'json';
}

function accepted(schema: TObject): string {
  const params = describeParams(schema);
  return params.length ? params.map((p) => `--${p.name} <${p.type}>`).join(', ') : 'none (this class takes no parameters)';
}

const TRUE = new Set(['true', '1', 'yes', 'y', 'on']);
const FALSE = new Set(['false', '0', 'no', 'n', 'off']);

/** A word from the command line, typed by its schema. */
function coerce(name: string, s: TSchema, raw: string): unknown {
  const type = typeName(s);
  const bad = (what: string): never => {
    throw new InvalidInputError(`--${name}: '${raw}' is not ${what}`);
  };
  switch (type) {
    case 'string':
      return raw;
    case 'boolean':
      if (TRUE.has(raw.toLowerCase())) return true;
      if (FALSE.has(raw.toLowerCase())) return false;
      return bad('a boolean (true/false)');
    case 'integer':
      return /^[-+]?\d+$/.test(raw.trim()) ? Number(raw) : bad('an integer');
    case 'number': {
      const n = Number(raw);
      return raw.trim() !== '' && Number.isFinite(n) ? n : bad('a number');
    }
    default:
      try {
        return JSON.parse(raw);
      } catch {
        return raw; // unions with string, or free-form values: keep the word
      }
  }
}

/**
 * `--key value` pairs after `--` -> parameters. A value may start with `-` (negative numbers); a
 * boolean key alone means true; `--key=value` works too; `-` in keys reads as `_`.
 */
function parseParamWords(words: readonly string[], schema: TObject): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (let i = 0; i < words.length; ) {
    const word = words[i]!;
    if (!word.startsWith('--') || word === '--') throw new InvalidInputError(`expected --key after '--', got '${word}' (accepted parameters: ${accepted(schema)})`);
    const eq = word.indexOf('=');
    const name = (eq < 0 ? word.slice(2) : word.slice(2, eq)).replaceAll('-', '_');
    const s = schema.properties[name];
    if (!s) throw new InvalidInputError(`unknown constructor parameter --${name} (accepted parameters: ${accepted(schema)})`);
    let raw: string;
    if (eq >= 0) {
      raw = word.slice(eq + 1);
      i++;
    } else if (typeName(s) === 'boolean') {
      const next = words[i + 1];
      if (next !== undefined && (TRUE.has(next.toLowerCase()) || FALSE.has(next.toLowerCase()))) {
        raw = next;
        i += 2;
      } else {
        raw = 'true';
        i++;
      }
    } else {
      const next = words[i + 1];
      if (next === undefined) throw new InvalidInputError(`--${name} needs a value (${typeName(s)})`);
      raw = next;
      i += 2;
    }
    out[name] = coerce(name, s, raw);
  }
  return out;
}

/** A JSON object of parameters (`-D actor.extra_kwargs=...`): unknown keys are refused too. */
function parseParamJson(text: string, schema: TObject): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new InvalidInputError(`actor.extra_kwargs is not JSON: ${(error as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new InvalidInputError('actor.extra_kwargs must be a JSON object');
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(value)) {
    const name = key.replaceAll('-', '_');
    const s = schema.properties[name];
    if (!s) throw new InvalidInputError(`unknown constructor parameter '${key}' in actor.extra_kwargs (accepted parameters: ${accepted(schema)})`);
    out[name] = typeof v === 'string' && typeName(s) !== 'string' ? coerce(name, s, v) : v;
  }
  return out;
}

/**
 * The constructor parameters of a class: the JSON objects of `-D actor.extra_kwargs` in order, then
 * the `--key value` words after `--` (which win), with the schema's defaults, checked.
 */
export function actorParams(schema: TObject, given: { json: readonly string[]; words: readonly string[] }): Record<string, unknown> {
  const params = Object.assign({}, ...given.json.map((text) => parseParamJson(text, schema)), parseParamWords(given.words, schema)) as Record<string, unknown>;
  const full = Value.Default(schema, params) as Record<string, unknown>;
  const errors = [...Value.Errors(schema, full)];
  if (errors.length) {
    throw new InvalidInputError(
      `invalid constructor parameters: ${errors
        .slice(0, 5)
        .map((e) => `${e.path ? `--${e.path.slice(1)}` : '(object)'}: ${e.message}`)
        .join('; ')}`,
    );
  }
  return full;
}
