/**
 * A tool's configuration file as settings for its commands: TOML, with tables of the keys the tool
 * declares (and top-level keys for the table named ''), each of a declared kind. `-D table.key=value`
 * sets the same keys from the command line, over the file; a command's own flags win over both.
 *
 * The file is optional at its default location. One named by -c/--config or the tool's variable
 * must exist (exit 3). A file that is not TOML, or holds a key or value the tool does not take,
 * exits 2 naming the file, the line and the key; messages never quote a value (it may be a secret).
 * Relative paths in the file are relative to the file, in `-D` to the working directory.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { ConfigLocation } from '../../lib/config.js';
import { InvalidInputError, NotFoundError } from '../../lib/errors.js';
import { settingKeys, settingKind, type ConfigSchema, type SettingKind, type SettingValue } from './config-schema.js';

export type { ConfigSchema, SettingKind, SettingValue } from './config-schema.js';

/** Settings from the file and `-D`, by `table.key` (top-level keys by `key`). */
export class Settings {
  constructor(
    readonly schema: ConfigSchema,
    /** The file they came from, when there was one. */
    readonly file: string | undefined,
    private readonly values: ReadonlyMap<string, { value: SettingValue; from: string }> = new Map(),
  ) {}

  get<T extends SettingValue>(key: string): T | undefined {
    return this.values.get(key)?.value as T | undefined;
  }

  /** Where a setting came from, for messages: `-D cluster.name` or `config.toml:3 (cluster.name)`. */
  source(key: string): string {
    return this.values.get(key)?.from ?? key;
  }

  /** These settings with `-D key=value` definitions applied over them. */
  withDefines(defines: readonly string[]): Settings {
    const values = new Map(this.values);
    for (const define of defines) {
      const eq = define.indexOf('=');
      if (eq < 0) throw new InvalidInputError(`-D ${define}: expected key=value`);
      const key = define.slice(0, eq);
      const kind = settingKind(this.schema, key);
      if (!kind) throw new InvalidInputError(`-D ${key}: unknown key`, { hint: `keys: ${settingKeys(this.schema).join(', ')}` });
      const from = `-D ${key}`;
      values.set(key, { value: fromText(kind, define.slice(eq + 1), from, process.cwd()), from });
    }
    return new Settings(this.schema, this.file, values);
  }
}

/** Reads the tool's configuration file, if there is one, against the tool's schema. */
export async function loadSettings(location: ConfigLocation, schema: ConfigSchema): Promise<Settings> {
  const text = readConfigText(location);
  if (text === undefined) return new Settings(schema, undefined);
  // The TOML reader is loaded only when there is a file to read: most commands on most machines have none.
  const { parseSettingsFile } = await import('./config-toml.js');
  const values = new Map(parseSettingsFile(location.path, text, schema).map((e) => [e.key, { value: e.value, from: `${location.path}:${e.line ?? '?'} (${e.key})` }]));
  return new Settings(schema, location.path, values);
}

function readConfigText(location: ConfigLocation): string | undefined {
  try {
    return readFileSync(location.path, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' && location.source === 'default') return undefined;
    const via = location.source === 'flag' ? 'from -c/--config' : 'from the environment';
    if (code === 'ENOENT') throw new NotFoundError(`configuration file ${location.path} (${via}) does not exist`);
    throw new InvalidInputError(`configuration file ${location.path} (${via}) cannot be read: ${code ?? 'error'}`);
  }
}

/** A `-D` value, of its key's kind. */
function fromText(kind: SettingKind, text: string, from: string, base: string): SettingValue {
  const wrong = (what: string): never => {
    throw new InvalidInputError(`invalid ${from} ${JSON.stringify(text)}: expected ${what}`);
  };
  switch (kind) {
    case 'text':
      return text;
    case 'path':
      return text !== '' ? resolve(base, text) : wrong('a path');
    case 'integer':
    case 'positive': {
      const n = /^\d+$/.test(text) ? Number(text) : NaN;
      return Number.isSafeInteger(n) && (kind === 'integer' || n > 0) ? n : wrong(kind === 'integer' ? 'a whole number >= 0' : 'a whole number > 0');
    }
    case 'boolean':
      return text === 'true' ? true : text === 'false' ? false : wrong('true or false');
    case 'list':
      return text.split(',').map((s) => s.trim()).filter(Boolean);
  }
}
