/**
 * The directory service's ACL file (spec/trajstore.md, "Directory ACL file"): TOML with three
 * sections,
 *
 *   [users.<name>]     access_key, secret_hash (salted scrypt; the secret itself is never stored), issued_at
 *   [datasets.<name>]  uri, and for s3:// libraries endpoint, region, access_key, secret_key (as a pin's)
 *   [grants]           <user> = ["<dataset>", ...]   (library membership only, no permission flags)
 *
 * Read strictly (unknown keys, bad names, grants naming unknown users or libraries are errors that
 * name the key), written whole and crash-safely with mode 0600 under a lock (`<file>.lock`), so
 * two management commands never lose each other's change.
 */
import { existsSync, mkdirSync, readFileSync, realpathSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { parse, stringify } from 'smol-toml';
import { writeFileDurably } from '../../lib/durable.js';
import { InvalidInputError, NotFoundError } from '../../lib/errors.js';
import { withConfigLock } from '../pins/lock.js';
import { PIN_KEYS, PIN_NAME, PinError, parseUri, toPin, type Pin, type PinEntry } from '../pins/pins.js';
import { wellFormedHash } from './keys.js';

export interface CatalogUser {
  access_key: string;
  secret_hash: string;
  issued_at: string;
}

export interface Acl {
  /** The file it was read from (absolute). */
  path: string;
  users: Map<string, CatalogUser>;
  datasets: Map<string, PinEntry>;
  grants: Map<string, Set<string>>;
}

/** A library as the server mounts it and a ticket describes it. */
export type Library = Exclude<Pin, { kind: 'catalog' }>;

const USER_KEYS = ['access_key', 'secret_hash', 'issued_at'] as const;

/** Names of users and libraries: those of pins, since `@team/<name>` puts a library's name in a pin reference. */
export function checkName(name: string, what: 'user' | 'dataset'): void {
  if (!PIN_NAME.test(name)) throw new InvalidInputError(`invalid ${what} name ${JSON.stringify(name)}: use a lower-case letter, then up to 63 of a-z 0-9 . _ -`);
}

function problem(path: string, key: string, message: string): InvalidInputError {
  return new InvalidInputError(`${path}: ${key}: ${message}`, { hint: 'change the file with `trajstore serve catalog ...`, not by hand' });
}

function table(value: unknown, path: string, key: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw problem(path, key, 'must be a table');
  return value as Record<string, unknown>;
}

function strings(entry: Record<string, unknown>, allowed: readonly string[], path: string, key: string): Record<string, string> {
  for (const [k, v] of Object.entries(entry)) {
    if (!allowed.includes(k)) throw problem(path, `${key}.${k}`, `unknown key (allowed: ${allowed.join(', ')})`);
    if (typeof v !== 'string') throw problem(path, `${key}.${k}`, 'must be a string');
  }
  return entry as Record<string, string>;
}

/** A library entry understood as a pin would be; a directory-service uri cannot be a library. */
export function libraryOf(name: string, entry: PinEntry, base: string): Library {
  let pin: Pin;
  try {
    if (parseUri(entry.uri, base, {}).kind === 'catalog') throw new PinError({ key: 'uri', message: 'a library is a local path or an s3:// uri, not a directory-service locator' });
    pin = toPin(name, entry, base, {});
  } catch (error) {
    if (error instanceof PinError) throw new InvalidInputError(`dataset ${JSON.stringify(name)}: ${error.message}`);
    throw error;
  }
  return pin as Library;
}

export function parseAcl(text: string, path: string): Acl {
  let document: Record<string, unknown>;
  try {
    document = parse(text) as Record<string, unknown>;
  } catch (error) {
    throw new InvalidInputError(`${path}: not valid TOML: ${(error as Error).message.split('\n')[0]}`);
  }
  const acl: Acl = { path, users: new Map(), datasets: new Map(), grants: new Map() };
  for (const key of Object.keys(document)) if (!['users', 'datasets', 'grants'].includes(key)) throw problem(path, key, 'unknown section (allowed: users, datasets, grants)');
  for (const [name, value] of Object.entries(table(document.users ?? {}, path, 'users'))) {
    checkName(name, 'user');
    const entry = strings(table(value, path, `users.${name}`), USER_KEYS, path, `users.${name}`);
    for (const k of USER_KEYS) if (entry[k] === undefined) throw problem(path, `users.${name}.${k}`, 'is missing');
    if (!wellFormedHash(entry.secret_hash as string)) throw problem(path, `users.${name}.secret_hash`, 'is not a hash this tool wrote');
    if ([...acl.users.values()].some((u) => u.access_key === entry.access_key)) throw problem(path, `users.${name}.access_key`, 'is also another user\'s');
    acl.users.set(name, entry as unknown as CatalogUser);
  }
  const base = dirname(path);
  for (const [name, value] of Object.entries(table(document.datasets ?? {}, path, 'datasets'))) {
    checkName(name, 'dataset');
    const entry = strings(table(value, path, `datasets.${name}`), PIN_KEYS, path, `datasets.${name}`) as unknown as PinEntry;
    if (entry.uri === undefined) throw problem(path, `datasets.${name}.uri`, 'is missing');
    libraryOf(name, entry, base);
    acl.datasets.set(name, entry);
  }
  for (const [user, value] of Object.entries(table(document.grants ?? {}, path, 'grants'))) {
    if (!acl.users.has(user)) throw problem(path, `grants.${user}`, 'names no user of [users]');
    if (!Array.isArray(value) || value.some((v) => typeof v !== 'string')) throw problem(path, `grants.${user}`, 'must be a list of dataset names');
    for (const dataset of value as string[]) if (!acl.datasets.has(dataset)) throw problem(path, `grants.${user}`, `names no dataset of [datasets]: ${JSON.stringify(dataset)}`);
    acl.grants.set(user, new Set(value as string[]));
  }
  return acl;
}

/** The ACL file at `path`; `missing: 'empty'` gives an empty one when there is no file yet (management commands create it). */
export function loadAcl(path: string, missing: 'empty' | 'error' = 'error'): Acl {
  const absolute = resolve(path);
  let text: string;
  try {
    text = readFileSync(absolute, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' && missing === 'empty') return { path: absolute, users: new Map(), datasets: new Map(), grants: new Map() };
    if (code === 'ENOENT') throw new NotFoundError(`--catalog-config ${path}: no such file`, { hint: 'create it with `trajstore serve catalog dataset add --catalog-config FILE NAME --uri URI`' });
    throw new InvalidInputError(`--catalog-config ${path}: cannot read it (${code ?? (error as Error).message})`);
  }
  return parseAcl(text, absolute);
}

const HEADER = '# trajstore directory service ACL: written by `trajstore serve catalog ...` (secrets are stored only as salted hashes).\n';

function render(acl: Acl): string {
  const sorted = <T>(map: Map<string, T>): Array<[string, T]> => [...map].sort(([a], [b]) => (a < b ? -1 : 1));
  const users = Object.fromEntries(sorted(acl.users).map(([name, u]) => [name, { access_key: u.access_key, secret_hash: u.secret_hash, issued_at: u.issued_at }]));
  const datasets = Object.fromEntries(
    sorted(acl.datasets).map(([name, entry]) => [name, Object.fromEntries(PIN_KEYS.filter((k) => entry[k] !== undefined).map((k) => [k, entry[k] as string]))]),
  );
  const grants = Object.fromEntries(sorted(acl.grants).filter(([, set]) => set.size > 0).map(([user, set]) => [user, [...set].sort()]));
  return `${HEADER}${stringify({ users, datasets, grants })}\n`;
}

/**
 * Reads the file (or an empty one), applies `change`, and writes the result whole, crash-safely,
 * mode 0600, all under the file's lock. Nothing is written when `change` throws.
 */
export async function changeAcl<T>(path: string, change: (acl: Acl) => T | Promise<T>): Promise<T> {
  const absolute = resolve(path);
  mkdirSync(dirname(absolute), { recursive: true, mode: 0o700 });
  return withConfigLock({ path: absolute, source: 'flag' }, async () => {
    const acl = loadAcl(absolute, 'empty');
    const result = await change(acl);
    // A symlinked file is rewritten where it really is.
    const target = existsSync(absolute) ? realpathSync(absolute) : absolute;
    writeFileDurably(target, render(acl), { mode: 0o600 });
    return result;
  });
}
