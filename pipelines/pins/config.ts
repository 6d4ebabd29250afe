/**
 * The user configuration file (TOML): `[pins.<name>]` tables and `[prices."<model>"]` tables, and
 * nothing else. Where it is comes from the CLI kit (`-c`, `TRAJSTORE_CONFIG`, else
 * `$XDG_CONFIG_HOME/trajstore/config.toml`).
 *
 * Reading rejects every key it does not know, legacy ones (`default_warehouse`, `aliases`,
 * `[[datasets]]`) with a pointer to the pin table layout, naming the file, key and line.
 * Writing is crash-safe (temp file, fsync, rename, fsync of the directory) and the file is
 * mode 0600 whenever it holds credentials. Error messages never contain a value of the file:
 * a TOML syntax error reports its line and column but not the line's text, which may be a secret.
 */
// Synchronous fs: a configuration file is small, and fs/promises costs every command start-up time to load.
import { mkdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import { stringify } from 'smol-toml';
import type { ConfigLocation } from '../../lib/config.js';
import { writeFileDurably } from '../../lib/durable.js';
import { InvalidInputError, NotFoundError, pathError } from '../../lib/errors.js';
import { isPlainTable, KeyLines, parseToml } from '../../lib/toml.js';
import type { Price } from '../pricing/prices.js';
import { PIN_KEYS, PinError, pinNameProblem, toPin, DEFAULT_PIN, type Pin, type PinEntry, type PinKey } from './pins.js';

/** The keys of a `[prices."<model>"]` table: dollars per million tokens. */
const PRICE_KEYS = { input: 'input', output: 'output', cache_write: 'cacheWrite', cache_read: 'cacheRead' } as const;

/** Keys earlier configuration layouts used; each gets its own explanation. */
const LEGACY_KEYS: Record<string, string> = {
  default_warehouse: 'the default dataset is now the pin [pins.default] (a local directory)',
  default_dataset: 'the default dataset is now the pin [pins.default] (a local directory)',
  aliases: 'aliases are now [pins.<name>] tables with a uri key',
  datasets: '[[datasets]] entries are now [pins.<name>] tables with a uri key',
  warehouse: 'warehouses are now [pins.<name>] tables with a uri key',
};

export interface LoadedConfig {
  location: ConfigLocation;
  /** False when the file does not exist (only allowed for the default location, or before a write). */
  exists: boolean;
  /** Stored entries in file order, as written (for rewriting). */
  entries: Map<string, PinEntry>;
  /** The same pins understood (absolute paths, default region). */
  pins: Map<string, Pin>;
  /** `[prices."<model>"]`: the user's model prices, over the built-in table. */
  prices: Record<string, Price>;
  /** Non-fatal findings, e.g. credentials in a file others can read. */
  warnings: string[];
}

export interface LoadOptions {
  env: NodeJS.ProcessEnv;
  /** A missing explicitly named file is normally an error (exit 3); a command about to write it may create it. */
  allowMissing?: boolean;
}

export async function loadConfig(location: ConfigLocation, options: LoadOptions): Promise<LoadedConfig> {
  let text: string;
  let mode = 0;
  try {
    text = readFileSync(location.path, 'utf8');
    mode = statSync(location.path).mode;
  } catch (error) {
    // A read's error (EISDIR) names no path.
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw pathError(error, `configuration file ${location.path}`);
    if (location.source !== 'default' && !options.allowMissing) {
      const via = location.source === 'flag' ? '-c/--config' : 'TRAJSTORE_CONFIG';
      throw new NotFoundError(`configuration file ${location.path} (from ${via}) does not exist`);
    }
    return { location, exists: false, entries: new Map(), pins: new Map(), prices: {}, warnings: [] };
  }
  const config = parseConfig(text, location, options.env);
  const holdsSecrets = [...config.entries.values()].some((e) => e.secret_key !== undefined);
  if (holdsSecrets && (mode & 0o077) !== 0) {
    config.warnings.push(`${location.path} holds credentials and is readable by others (mode ${(mode & 0o777).toString(8)}); run: chmod 600 ${location.path}`);
  }
  return config;
}

/** Parses and checks the text of a configuration file. Exported for tests of every bad input. */
export function parseConfig(text: string, location: ConfigLocation, env: NodeJS.ProcessEnv): LoadedConfig {
  const path = location.path;
  const fail = (message: string, line?: number, hint?: string): never => {
    throw new InvalidInputError(`${path}${line ? `:${line}` : ''}: ${message}`, hint ? { hint } : {});
  };
  const doc = parseToml(text, fail);
  const lines = new KeyLines(text);
  for (const key of Object.keys(doc)) {
    if (key === 'pins' || key === 'prices') continue;
    const legacy = LEGACY_KEYS[key];
    if (legacy) fail(`legacy key \`${key}\` is not accepted: ${legacy}`, lines.find([], key), 'see `trajstore dataset pin --help`');
    fail(`unknown key \`${key}\`: the configuration holds only [pins.<name>] and [prices."<model>"] tables`, lines.find([], key));
  }
  const entries = new Map<string, PinEntry>();
  const pins = new Map<string, Pin>();
  const prices = parsePrices(doc.prices, lines, fail);
  const table = doc.pins;
  if (table === undefined) return { location, exists: true, entries, pins, prices, warnings: [] };
  if (!isPlainTable(table)) return fail('`pins` must be a table of [pins.<name>] tables', lines.find([], 'pins'));
  const base = dirname(path);
  for (const [name, value] of Object.entries(table)) {
    const where = lines.find(['pins'], name);
    const nameProblem = pinNameProblem(name);
    if (nameProblem) fail(nameProblem, where);
    if (!isPlainTable(value)) fail(`pins.${name} must be a table ([pins.${name}] with a uri key)`, where);
    const raw = value as Record<string, unknown>;
    for (const [key, v] of Object.entries(raw)) {
      const at = lines.find(['pins', name], key) ?? where;
      if (!(PIN_KEYS as readonly string[]).includes(key)) {
        const legacy = LEGACY_KEYS[key];
        fail(`${legacy ? 'legacy' : 'unknown'} key \`pins.${name}.${key}\`${legacy ? `: ${legacy}` : ''}`, at, `a pin takes only: ${PIN_KEYS.join(', ')}`);
      }
      if (typeof v !== 'string') fail(`\`pins.${name}.${key}\` must be a string`, at);
    }
    if (raw.uri === undefined) fail(`pins.${name} has no uri`, where);
    const entry = raw as unknown as PinEntry;
    try {
      pins.set(name, toPin(name, entry, base, env));
    } catch (error) {
      if (!(error instanceof PinError)) throw error;
      const key = error.problem.key;
      fail(`pins.${name}${key ? `.${key}` : ''}: ${error.message}`, key ? (lines.find(['pins', name], key) ?? where) : where);
    }
    entries.set(name, entry);
  }
  return { location, exists: true, entries, pins, prices, warnings: [] };
}

/** `[prices."<model>"]` tables: `input` and `output` required, `cache_write` and `cache_read` optional, all dollars per million tokens. */
function parsePrices(table: unknown, lines: KeyLines, fail: (message: string, line?: number, hint?: string) => never): Record<string, Price> {
  const prices: Record<string, Price> = {};
  if (table === undefined) return prices;
  if (!isPlainTable(table)) return fail('`prices` must be a table of [prices."<model>"] tables', lines.find([], 'prices'));
  const hint = 'a price takes input, output, cache_write and cache_read: dollars per million tokens';
  for (const [model, value] of Object.entries(table)) {
    const where = lines.find(['prices'], model);
    if (!isPlainTable(value)) fail(`prices.${JSON.stringify(model)} must be a table ([prices."${model}"] with input and output)`, where, hint);
    const price: Price = { input: NaN, output: NaN, cacheWrite: null, cacheRead: null };
    for (const [key, v] of Object.entries(value as Record<string, unknown>)) {
      const at = lines.find(['prices', model], key) ?? where;
      const field = PRICE_KEYS[key as keyof typeof PRICE_KEYS];
      if (field === undefined) fail(`unknown key \`prices.${JSON.stringify(model)}.${key}\``, at, hint);
      if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) fail(`\`prices.${JSON.stringify(model)}.${key}\` must be a number of dollars per million tokens, at least 0`, at);
      price[field] = v as number;
    }
    if (Number.isNaN(price.input) || Number.isNaN(price.output)) fail(`prices.${JSON.stringify(model)} needs input and output`, where, hint);
    prices[model] = price;
  }
  return prices;
}

/**
 * Writes the pins (replacing the file) crash-safely: a reader sees the old file or the new one,
 * never a torn one. Mode 0600 when any pin holds credentials; otherwise the existing file's mode
 * (0644 for a new file). The rewritten file keeps no comments of the old one.
 */
export async function saveConfig(config: LoadedConfig, entries: Map<string, PinEntry>): Promise<void> {
  // A symlinked configuration (dotfile managers) is rewritten where it really is, not replaced by a file.
  let path = config.location.path;
  try {
    path = realpathSync(path);
  } catch {
    // a new file: written where it is named
  }
  const holdsSecrets = [...entries.values()].some((e) => e.secret_key !== undefined || e.access_key !== undefined);
  let mode = 0o644;
  try {
    mode = statSync(path).mode & 0o777;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  if (holdsSecrets) mode = 0o600;
  const pins: Record<string, Record<string, string>> = {};
  for (const [name, entry] of entries) {
    const table: Record<string, string> = {};
    for (const key of PIN_KEYS) if (entry[key] !== undefined) table[key] = entry[key] as string;
    pins[name] = table;
  }
  // Prices are kept as they were: pin commands change pins only.
  const prices: Record<string, Record<string, number>> = {};
  for (const [model, price] of Object.entries(config.prices)) {
    const table: Record<string, number> = {};
    for (const [key, field] of Object.entries(PRICE_KEYS)) if (price[field] !== null) table[key] = price[field];
    prices[model] = table;
  }
  const document = { ...(entries.size > 0 ? { pins } : {}), ...(Object.keys(prices).length > 0 ? { prices } : {}) };
  const body = Object.keys(document).length === 0 ? '' : `${stringify(document)}\n`;
  const text = `# trajstore configuration: [pins.<name>] and [prices."<model>"] tables (see the README, Pins and configuration).\n${body}`;

  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  writeFileDurably(path, text, { mode });
}

/** A stored entry checked the same way as when loading (for writes from the command line). */
export function checkEntry(config: LoadedConfig, name: string, entry: PinEntry, env: NodeJS.ProcessEnv): Pin {
  const nameProblem = pinNameProblem(name);
  if (nameProblem) throw new InvalidInputError(nameProblem);
  try {
    return toPin(name, entry, dirname(config.location.path), env);
  } catch (error) {
    if (!(error instanceof PinError)) throw error;
    throw new InvalidInputError(`pin ${JSON.stringify(name)}: ${error.message}`, { hint: hintFor(error.problem.key, name) });
  }
}

function hintFor(key: PinKey | undefined, name: string): string {
  if (name === DEFAULT_PIN) return 'the default pin takes a local directory path';
  switch (key) {
    case 'endpoint':
    case 'region':
      return '--endpoint and --region apply to s3:// pins only';
    case 'access_key':
    case 'secret_key':
      return 'give both --ak and --sk (or TRAJSTORE_ACCESS_KEY and TRAJSTORE_SECRET_KEY)';
    default:
      return 'a pin uri is a local path, s3://bucket/prefix or catalog://127.0.0.1:<port>';
  }
}
