/**
 * The TOML side of the configuration file (config-file.ts): the file parsed, and each key checked
 * against the tool's schema with the line it is on. Loaded only when there is a file.
 */
import { dirname, resolve } from 'node:path';
import { InvalidInputError } from '../../lib/errors.js';
import { isPlainTable, KeyLines, parseToml } from '../../lib/toml.js';
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
  const doc = parseToml(text, fail);
  const lines = new KeyLines(text);
  const entries: Entry[] = [];
  const take = (table: string, name: string, value: unknown): void => {
    const key = table ? `${table}.${name}` : name;
    const line = lines.find(table ? [table] : [], name);
    const kind = settingKind(schema, key);
    if (!kind) return fail(`unknown key \`${key}\``, line);
    entries.push({ key, value: fromToml(kind, value, key, dirname(path), (m) => fail(m, line)), line });
  };
  for (const [name, value] of Object.entries(doc)) {
    if (isPlainTable(value) && Object.hasOwn(schema, name) && name !== '') {
      for (const [key, v] of Object.entries(value)) take(name, key, v);
    } else if (isPlainTable(value)) fail(`unknown table [${name}]`, lines.find([], name));
    else take('', name, value);
  }
  return entries;
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

