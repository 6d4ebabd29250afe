/**
 * Constructor parameters of actor classes, checked against the class's TypeBox schema: only the
 * parameters the schema itself declares (never a member every object inherits, such as
 * `constructor`, `toString` or `__proto__`), each value of its declared type as given, with the
 * schema's defaults filled in. Shared by spawning (registry.ts) and `actorctl actor` (loader.ts).
 */
import type { TObject, TSchema } from '@sinclair/typebox';
import { Value, ValueErrorType } from '@sinclair/typebox/value';

export interface ParamInfo {
  name: string;
  type: string;
  default: unknown;
  description: string | undefined;
  required: boolean;
}

/** The schema of a parameter the class declares itself, or undefined (inherited object members are not parameters). */
export function declaredParam(schema: TObject, name: string): TSchema | undefined {
  return Object.hasOwn(schema.properties, name) ? schema.properties[name] : undefined;
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

/** `string`, `integer`, `string|number`, `"a"`, or `json` for anything else. */
export function typeName(s: TSchema): string {
  const t = (s as { type?: unknown }).type;
  if (typeof t === 'string') return t;
  if (Array.isArray(s.anyOf)) return (s.anyOf as TSchema[]).map(typeName).join('|');
  if ('const' in s) return JSON.stringify(s.const);
  return 'json';
}

/** The accepted parameters in the form `--name <type>`, for messages. */
export function acceptedParams(schema: TObject): string {
  const params = describeParams(schema);
  return params.length ? params.map((p) => `--${p.name} <${p.type}>`).join(', ') : 'none (this class takes no parameters)';
}

/**
 * One thing wrong with the parameters: `name` is the parameter (empty when it is about all of them);
 * `missing`: a required one was not given, and `message` says what it is.
 */
export interface ParamProblem {
  name: string;
  message: string;
  missing?: boolean;
}

/**
 * The parameters with the schema's defaults filled in, or what is wrong with them: unknown names
 * first, then missing ones and values that do not match their declared type (nothing is
 * converted), one problem per parameter.
 */
export function checkParams(schema: TObject, given: Readonly<Record<string, unknown>>): { params: Record<string, unknown> } | { problems: ParamProblem[] } {
  const unknown = Object.keys(given).filter((name) => !declaredParam(schema, name));
  if (unknown.length) return { problems: unknown.map((name) => ({ name, message: 'unknown parameter' })) };
  const params = Value.Default(schema, structuredClone(given)) as Record<string, unknown>;
  // TypeBox reports a missing parameter twice (required, then not of its type): its first error says it.
  const byName = new Map<string, ParamProblem>();
  for (const e of Value.Errors(schema, params)) {
    const name = e.path.split('/')[1] ?? '';
    if (byName.has(name)) continue;
    if (e.type === ValueErrorType.ObjectRequiredProperty && e.path === `/${name}`) byName.set(name, { name, message: (e.schema as { description?: string }).description ?? '', missing: true });
    else byName.set(name, { name, message: `${e.message}${name && e.path === `/${name}` ? `, got ${shown(e.value)}` : ''}` });
  }
  return byName.size ? { problems: [...byName.values()] } : { params };
}

/** A problem as messages name it: `--model_name is required: <what it is>`, `--start: Expected integer, got "x"` (`prefix` before the name). */
export function problemText(p: ParamProblem, prefix: string): string {
  if (!p.name) return `(parameters): ${p.message}`;
  if (p.missing) return `${prefix}${p.name} is required${p.message ? `: ${p.message}` : ''}`;
  return `${prefix}${p.name}: ${p.message}`;
}

/** A value as a message shows it: JSON, at most 40 characters. */
function shown(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = typeof value;
  }
  return text.length > 40 ? `${text.slice(0, 39)}…` : text;
}
