/** What a tool's configuration file may hold (config-file.ts): the kinds of settings and the keys by table. */

/** `text`; `path` (resolved against the file's directory); `integer` (whole, at least 0); `positive` (whole, above 0); `boolean`; `list` (of text). */
export type SettingKind = 'text' | 'path' | 'integer' | 'positive' | 'boolean' | 'list';

/** The keys a tool takes, by table; the table '' holds top-level keys. */
export type ConfigSchema = Readonly<Record<string, Readonly<Record<string, SettingKind>>>>;

export type SettingValue = string | number | boolean | string[];

/** The kind of a `table.key` (a top-level key: `key`), or undefined when the tool takes no such key. */
export function settingKind(schema: ConfigSchema, key: string): SettingKind | undefined {
  const dot = key.indexOf('.');
  const [table, name] = dot < 0 ? ['', key] : [key.slice(0, dot), key.slice(dot + 1)];
  const keys = Object.hasOwn(schema, table) ? schema[table]! : undefined;
  return keys && Object.hasOwn(keys, name) ? keys[name] : undefined;
}

/** Every key a tool takes, as `table.key`, for hints. */
export function settingKeys(schema: ConfigSchema): string[] {
  return Object.entries(schema).flatMap(([table, keys]) => Object.keys(keys).map((k) => (table ? `${table}.${k}` : k)));
}

