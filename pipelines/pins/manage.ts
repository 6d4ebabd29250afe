/**
 * The `dataset pin|unpin|list|show|set|rename` operations on the configuration file. Pins only
 * change configuration: nothing here creates, moves or deletes a dataset.
 */
import { stat } from 'node:fs/promises';
import { ConflictError, InvalidInputError, NotFoundError } from '../../lib/errors.js';
import { redactUserInfo } from '../../lib/redact.js';
import type { ResolveContext } from './resolve.js';
import { checkEntry, loadConfig, saveConfig, type LoadedConfig } from './config.js';
import { withConfigLock } from './lock.js';
import {
  BUILTIN_PINS,
  DEFAULT_PIN,
  builtinPin,
  isBuiltinPin,
  parseUri,
  PinError,
  pinNameProblem,
  stripAt,
  type Pin,
  type PinEntry,
} from './pins.js';

export interface PinRequest {
  name: string;
  uri: string;
  endpoint?: string;
  region?: string;
  accessKey?: string;
  secretKey?: string;
}

/** The kind a uri would have, before credentials are gathered (they depend on it). */
export function uriKind(uri: string, env: NodeJS.ProcessEnv): Pin['kind'] {
  try {
    return parseUri(uri, process.cwd(), env).kind;
  } catch (error) {
    if (error instanceof PinError) throw new InvalidInputError(`URI ${JSON.stringify(redactUserInfo(uri))}: ${error.message}`);
    throw error;
  }
}

/** Local paths are stored absolute: the file may be read from another working directory. */
function storedUri(uri: string, env: NodeJS.ProcessEnv): string {
  const parsed = parseUri(uri, process.cwd(), env);
  return parsed.kind === 'local' ? parsed.path : uri;
}

async function mustBeDirectoryIfDefault(name: string, pin: Pin): Promise<void> {
  if (name !== DEFAULT_PIN || pin.kind !== 'local') return;
  try {
    if (!(await stat(pin.path)).isDirectory()) throw new InvalidInputError(`the "default" pin must be a local directory, and ${pin.path} is a file`);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}

function userPinName(raw: string): string {
  const name = stripAt(raw);
  const problem = pinNameProblem(name);
  if (problem) throw new InvalidInputError(problem);
  return name;
}

function existing(config: LoadedConfig, name: string): PinEntry {
  const entry = config.entries.get(name);
  if (!entry) {
    throw new NotFoundError(`no pin named @${name} in ${config.location.path}`, { hint: '`trajstore dataset list` shows the pins' });
  }
  return entry;
}

export async function addPin({ config: location, env }: ResolveContext, request: PinRequest): Promise<Pin> {
  const name = userPinName(request.name);
  return withConfigLock(location, async () => {
    const config = await loadConfig(location, { env, allowMissing: true });
    if (config.entries.has(name)) {
      throw new ConflictError(`pin @${name} already exists in ${location.path}`, { hint: `change its uri with \`trajstore dataset set ${name} URI\`, or unpin it first` });
    }
    const entry: PinEntry = { uri: storedUri(request.uri, env) };
    if (request.endpoint !== undefined) entry.endpoint = request.endpoint;
    if (request.region !== undefined) entry.region = request.region;
    if (request.accessKey !== undefined) entry.access_key = request.accessKey;
    if (request.secretKey !== undefined) entry.secret_key = request.secretKey;
    const pin = checkEntry(config, name, entry, env);
    await mustBeDirectoryIfDefault(name, pin);
    const entries = new Map(config.entries);
    entries.set(name, entry);
    await saveConfig(config, entries);
    return pin;
  });
}

export async function removePin({ config: location, env }: ResolveContext, rawName: string): Promise<void> {
  const name = userPinName(rawName);
  await withConfigLock(location, async () => {
    const config = await loadConfig(location, { env });
    existing(config, name);
    const entries = new Map(config.entries);
    entries.delete(name);
    await saveConfig(config, entries);
  });
}

const SERVICE_OF: Record<Pin['kind'], string> = { local: 'a local path', s3: 'an s3:// store', catalog: 'a catalog:// directory service' };
const SAME_KIND_HINT = 'to change what kind of place a pin names, unpin it and pin it again';

/**
 * Changes a pin's uri, keeping its other keys (which must still fit the new uri's kind). Keys are
 * issued by one kind of service and never go to another: a catalog:// pin sends its pair as HTTP
 * Basic to the loopback port it names, so an S3 secret kept across the change would reach
 * whatever listens there, and a directory-service key pair would be offered to an object store.
 */
export async function setPinUri({ config: location, env }: ResolveContext, rawName: string, uri: string): Promise<Pin> {
  const name = userPinName(rawName);
  return withConfigLock(location, async () => {
    const config = await loadConfig(location, { env });
    const entry = { ...existing(config, name), uri: storedUri(uri, env) };
    const from = (config.pins.get(name) as Pin).kind;
    const to = uriKind(uri, env);
    if (entry.secret_key !== undefined && from !== to) {
      throw new InvalidInputError(`pin @${name} holds credentials for ${SERVICE_OF[from]}; they would be sent to ${SERVICE_OF[to]}`, { hint: SAME_KIND_HINT });
    }
    let pin: Pin;
    try {
      pin = checkEntry(config, name, entry, env);
    } catch (error) {
      if (error instanceof InvalidInputError) {
        throw new InvalidInputError(error.message, { hint: SAME_KIND_HINT });
      }
      throw error;
    }
    await mustBeDirectoryIfDefault(name, pin);
    const entries = new Map(config.entries);
    entries.set(name, entry);
    await saveConfig(config, entries);
    return pin;
  });
}

export async function renamePin({ config: location, env }: ResolveContext, rawOld: string, rawNew: string): Promise<Pin> {
  const from = userPinName(rawOld);
  const to = userPinName(rawNew);
  return withConfigLock(location, async () => {
    const config = await loadConfig(location, { env });
    const entry = existing(config, from);
    if (from === to) return checkEntry(config, to, entry, env);
    if (config.entries.has(to)) throw new ConflictError(`pin @${to} already exists in ${location.path}`, { hint: `unpin @${to} first` });
    const pin = checkEntry(config, to, entry, env);
    await mustBeDirectoryIfDefault(to, pin);
    // Keep the file order: the renamed pin stays where it was.
    const entries = new Map<string, PinEntry>();
    for (const [name, e] of config.entries) entries.set(name === from ? to : name, e);
    await saveConfig(config, entries);
    return pin;
  });
}

export interface PinListing {
  pins: Pin[];
  /** Problems of the configuration file that did not stop the command. */
  warnings: string[];
}

/** User pins by name, then the built-in pins. */
export async function listPins({ config: location, env }: ResolveContext): Promise<PinListing> {
  const config = await loadConfig(location, { env });
  const user = [...config.pins.values()].sort((a, b) => a.name.localeCompare(b.name));
  return { pins: [...user, ...BUILTIN_PINS.map((name) => builtinPin(name, env))], warnings: config.warnings };
}

export interface PinDetails {
  pin: Pin;
  /** Whether a local pin's directory exists; null for other pins. */
  exists: boolean | null;
  warnings: string[];
}

export async function showPin({ config: location, env }: ResolveContext, rawName: string): Promise<PinDetails> {
  const name = stripAt(rawName);
  if (isBuiltinPin(name)) {
    const pin = builtinPin(name, env);
    return { pin, exists: await existsLocally(pin), warnings: [] };
  }
  const config = await loadConfig(location, { env });
  const valid = userPinName(name);
  existing(config, valid);
  const pin = config.pins.get(valid) as Pin;
  return { pin, exists: await existsLocally(pin), warnings: config.warnings };
}

async function existsLocally(pin: Pin): Promise<boolean | null> {
  if (pin.kind !== 'local') return null;
  try {
    await stat(pin.path);
    return true;
  } catch {
    return false;
  }
}
