/**
 * `serve catalog ...`: the management operations on the ACL file. They change the file only:
 * registering or removing a library never creates, moves or deletes a dataset (local or in an
 * object store), and nothing here starts a server (`serve` reads the file when it starts).
 */
import { dirname, isAbsolute, resolve } from 'node:path';
import { ConflictError, InvalidInputError, NotFoundError } from '../../lib/errors.js';
import type { PinRequest } from '../pins/manage.js';
import type { PinEntry } from '../pins/pins.js';
import { changeAcl, checkName, libraryOf, loadAcl, type Acl } from './acl.js';
import { issueKeys } from './keys.js';

/** A library is registered with what a pin is made of. */
export type LibraryRequest = PinRequest;

/** A library as `dataset list` shows it: never its credentials. */
export interface LibraryListing {
  name: string;
  uri: string;
  kind: 'local' | 's3';
  endpoint: string | null;
  region: string | null;
  credentials: boolean;
  /** Users granted it. */
  users: string[];
}

export interface IssuedUser {
  name: string;
  access_key: string;
  /** Shown once; the file keeps only its hash. */
  secret_key: string;
  rotated: boolean;
}

export async function addLibrary(path: string, request: LibraryRequest, cwd = process.cwd()): Promise<LibraryListing> {
  checkName(request.name, 'dataset');
  // A relative local path means the working directory's, stored absolute (the file may be read from elsewhere).
  const local = !/^[a-zA-Z][a-zA-Z0-9+.-]*:\/\//.test(request.uri) && !request.uri.startsWith('~') && !isAbsolute(request.uri);
  const entry: PinEntry = {
    uri: local ? resolve(cwd, request.uri) : request.uri,
    ...(request.endpoint !== undefined ? { endpoint: request.endpoint } : {}),
    ...(request.region !== undefined ? { region: request.region } : {}),
    ...(request.accessKey !== undefined ? { access_key: request.accessKey } : {}),
    ...(request.secretKey !== undefined ? { secret_key: request.secretKey } : {}),
  };
  libraryOf(request.name, entry, cwd);
  return changeAcl(path, (acl) => {
    if (acl.datasets.has(request.name)) {
      throw new ConflictError(`dataset ${JSON.stringify(request.name)} is already registered in ${acl.path}`, { hint: `remove it first: trajstore serve catalog dataset remove --catalog-config ${acl.path} ${request.name}` });
    }
    acl.datasets.set(request.name, entry);
    return listingOf(acl, request.name);
  });
}

/** Removes libraries (and their grants); all names must exist, or nothing changes. */
export async function removeLibraries(path: string, names: readonly string[]): Promise<string[]> {
  if (names.length === 0) throw new InvalidInputError('name at least one dataset to remove');
  return changeAcl(path, (acl) => {
    const unknown = names.filter((n) => !acl.datasets.has(n));
    if (unknown.length > 0) throw new NotFoundError(`no dataset ${unknown.map((n) => JSON.stringify(n)).join(', ')} in ${acl.path}`);
    for (const name of names) {
      acl.datasets.delete(name);
      for (const granted of acl.grants.values()) granted.delete(name);
    }
    return [...new Set(names)];
  });
}

function listingOf(acl: Acl, name: string): LibraryListing {
  const entry = acl.datasets.get(name) as PinEntry;
  const library = libraryOf(name, entry, dirname(acl.path));
  return {
    name,
    uri: entry.uri,
    kind: library.kind,
    endpoint: entry.endpoint ?? null,
    region: library.kind === 's3' ? library.region : null,
    credentials: entry.access_key !== undefined,
    users: [...acl.grants].filter(([, set]) => set.has(name)).map(([user]) => user).sort(),
  };
}

/** The libraries of the file, by name. A missing file lists nothing (and is not created). */
export function listLibraries(path: string): LibraryListing[] {
  const acl = loadAcl(path, 'empty');
  return [...acl.datasets.keys()].sort().map((name) => listingOf(acl, name));
}

/** A new user with a new key pair; an existing user's keys are replaced only with `rotate`. */
export async function issueUser(path: string, name: string, rotate: boolean): Promise<IssuedUser> {
  checkName(name, 'user');
  const keys = await issueKeys();
  return changeAcl(path, (acl) => {
    const existing = acl.users.has(name);
    if (existing && !rotate) {
      throw new ConflictError(`user ${JSON.stringify(name)} already has keys in ${acl.path}`, { hint: 'give --rotate to replace them (the old secret stops working when serve restarts)' });
    }
    if (!existing && rotate) throw new NotFoundError(`no user ${JSON.stringify(name)} in ${acl.path} to rotate`);
    acl.users.set(name, { access_key: keys.accessKey, secret_hash: keys.secretHash, issued_at: new Date().toISOString() });
    return { name, access_key: keys.accessKey, secret_key: keys.secretKey, rotated: existing };
  });
}

/** Grants (or revokes) libraries to a user; every name must exist, or nothing changes. Returns the user's grants after. */
export async function changeGrants(path: string, user: string, datasets: readonly string[], change: 'grant' | 'revoke'): Promise<string[]> {
  if (datasets.length === 0) throw new InvalidInputError(`name at least one dataset to ${change}`);
  return changeAcl(path, (acl) => {
    if (!acl.users.has(user)) throw new NotFoundError(`no user ${JSON.stringify(user)} in ${acl.path}`, { hint: `issue keys first: trajstore serve catalog issue --catalog-config ${acl.path} ${user}` });
    const unknown = datasets.filter((d) => !acl.datasets.has(d));
    if (unknown.length > 0) throw new NotFoundError(`no dataset ${unknown.map((n) => JSON.stringify(n)).join(', ')} in ${acl.path}`, { hint: 'register it with `trajstore serve catalog dataset add`' });
    const granted = acl.grants.get(user) ?? new Set<string>();
    for (const dataset of datasets) {
      if (change === 'grant') granted.add(dataset);
      else granted.delete(dataset);
    }
    acl.grants.set(user, granted);
    return [...granted].sort();
  });
}
