/**
 * The TOML side of the configuration file (config-file.ts): the file parsed, and each key checked
 * against the tool's schema with the line it is on. Loaded only when there is a file.
 */
import { dirname, resolve } from 'node:path';
import { TomlError, parse } from 'smol-toml';
import { InvalidInputError } from '../../lib/errors.js';
import { settingKeys, settingKind, type ConfigSchema, type SettingKind, type SettingValue } from './config-schema.js';

export interface Entry {
  key: string;
  value: SettingValue;
  line: number | undefined;
}

export function parseSettingsFile(path: string, text: string, schema: ConfigSchema): Entry[] {
  const fail = (message: string, line: number | undefined): never => {
    throw new InvalidInputError(`${path}${line ? `:${line}` : ''}: ${message}`, { hint: `keys: ${settingKeys(schema).join(', ')}` });
  };
  let doc: Record<string, unknown>;
  try {
    doc = parse(text) as Record<string, unknown>;
  } catch (error) {
    if (!(error instanceof TomlError)) throw error;
    // smol-toml quotes the offending line in its message; only its first line (the reason) is kept.
    return fail(`invalid TOML at column ${error.column}: ${error.message.split('\n')[0]?.replace(/^Invalid TOML document: /, '')}`, error.line);
  }
  const lines = keyLines(text);
  const entries: Entry[] = [];
  const take = (table: string, name: string, value: unknown): void => {
    const key = table ? `${table}.${name}` : name;
    const line = lines.get(key);
    const kind = settingKind(schema, key);
    if (!kind) return fail(`unknown key \`${key}\``, line);
    entries.push({ key, value: fromToml(kind, value, key, dirname(path), (m) => fail(m, line)), line });
  };
  for (const [name, value] of Object.entries(doc)) {
    if (isTable(value) && Object.hasOwn(schema, name) && name !== '') {
      for (const [key, v] of Object.entries(value)) take(name, key, v);
    } else if (isTable(value)) fail(`unknown table [${name}]`, lines.get(name));
    else take('', name, value);
  }
  return entries;
}

function isTable(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Date);
}

/** The line of each `[table]` and `key` / `table.key` of a file whose keys are plain words. */
function keyLines(text: string): Map<string, number> {
  const found = new Map<string, number>();
  let table = '';
  text.split(/\r?\n/).forEach((raw, i) => {
    const header = /^\s*\[\s*([A-Za-z0-9_-]+)\s*\]/.exec(raw);
    const assignment = /^\s*([A-Za-z0-9_-]+)\s*=/.exec(raw);
    if (header) table = header[1]!;
    const key = header ? table : assignment ? (table ? `${table}.${assignment[1]}` : assignment[1]!) : undefined;
    if (key !== undefined && !found.has(key)) found.set(key, i + 1);
  });
  return found;
}

/** A value of the file, of its key's kind. */
function fromToml(kind: SettingKind, value: unknown, key: string, base: string, fail: (message: string) => never): SettingValue {
  const wrong = (what: string): never => fail(`\`${key}\` must be ${what}`);
  switch (kind) {
    case 'text':
      return typeof value === 'string' ? value : wrong('a string');
    case 'path':
      return typeof value === 'string' && value !== '' ? resolve(base, value) : wrong('a path (a non-empty string)');
    case 'integer':
      return Number.isSafeInteger(value) && (value as number) >= 0 ? (value as number) : wrong('a whole number, at least 0');
    case 'positive':
      return Number.isSafeInteger(value) && (value as number) > 0 ? (value as number) : wrong('a whole number above 0');
    case 'boolean':
      return typeof value === 'boolean' ? value : wrong('true or false');
    case 'list':
      return Array.isArray(value) && value.every((v) => typeof v === 'string') ? value : wrong('a list of strings');
  }
}

