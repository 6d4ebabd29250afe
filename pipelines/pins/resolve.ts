/**
 * Turns a command's DATASET argument into a place:
 * - omitted -> the `default` pin, else `$XDG_DATA_HOME/trajstore/default` (`~/.local/share/trajstore/default`);
 * - `@name` or `@name/sub/path` -> a user pin or a built-in pin (`@agenta`, `@agentb`, `@agentb-code`);
 * - `s3://bucket/prefix` -> an object-store prefix; anything else -> a local path.
 */
import { statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { ConfigLocation } from '../../lib/config.js';
import { InvalidInputError, NotFoundError, UnavailableError } from '../../lib/errors.js';
import type { CatalogEndpoint } from '../catalog/client.js';
import { redactUserInfo } from '../../lib/redact.js';
import {
  BUILTIN_PINS,
  DEFAULT_PIN,
  DEFAULT_S3_REGION,
  PIN_NAME,
  PinError,
  builtinPin,
  homeOf,
  isBuiltinPin,
  parseUri,
  type Credentials,
  toPin,
  type Pin,
  type PinEntry,
  type S3Place,
} from './pins.js';

export type DatasetLocation = { kind: 'local'; path: string; display: string } | ({ kind: 's3'; display: string } & S3Place);

/** What `openDataset` accepts: a local path, or a resolved location (`DatasetLocation`). */
export type DatasetRef = string | { kind: 'local'; path: string; display?: string } | ({ kind: 's3'; display?: string } & S3Place);

/** The local directory of a dataset; for commands that work on local datasets only, an object-store one is refused (exit 2). */
export function localPathOf(ref: DatasetRef): string {
  if (typeof ref === 'string') return resolve(ref);
  if (ref.kind === 'local') return resolve(ref.path);
  throw new InvalidInputError(`${ref.display ?? ref.uri}: this command works on local datasets only`);
}

/** The object-store place of a resolved s3 location, without what only shows it. */
export function placeOf(ref: { kind: 's3' } & S3Place): S3Place {
  const { kind: _kind, display: _display, ...place } = ref as { kind: 's3'; display?: string } & S3Place;
  return place;
}

/** What resolving a DATASET argument needs: where the configuration (with the pins) is, and the environment. */
export interface ResolveContext {
  config: ConfigLocation;
  env: NodeJS.ProcessEnv;
  /** The command's stop (a signal): requests to an object store end with it. */
  signal?: AbortSignal;
}

export interface ResolveOptions extends ResolveContext {
  /** Built-in pins (agent session roots) can be read, never written. */
  purpose: 'read' | 'write';
  /** Base of relative local paths; the working directory by default. */
  cwd?: string;
}

/** Where the default dataset lives when no `default` pin is configured. */
export function defaultDatasetPath(env: NodeJS.ProcessEnv): string {
  const dataHome = env.XDG_DATA_HOME || join(homeOf(env), '.local', 'share');
  return join(dataHome, 'trajstore', 'default');
}

/** `@name/sub/path` -> name and sub-path segments; rejects bad names and empty, `.` or `..` segments. */
export function parsePinRef(arg: string): { name: string; segments: string[] } {
  const [name = '', ...segments] = arg.slice(1).split('/');
  if (!PIN_NAME.test(name)) {
    throw new InvalidInputError(`invalid pin reference ${JSON.stringify(arg)}: ${JSON.stringify(name)} is not a pin name`, {
      hint: 'pin names are a lower-case letter, then up to 63 of a-z 0-9 . _ -; `trajstore dataset list` shows them',
    });
  }
  for (const segment of segments) {
    if (segment === '' || segment === '.' || segment === '..') {
      throw new InvalidInputError(`invalid pin reference ${JSON.stringify(arg)}: sub-path segments may not be empty, "." or ".."`);
    }
  }
  return { name, segments };
}

export async function resolveDataset(arg: string | undefined, opts: ResolveOptions): Promise<DatasetLocation> {
  const cwd = opts.cwd ?? process.cwd();
  if (arg === undefined) {
    const config = await loadUserConfig(opts);
    const pin = config.pins.get(DEFAULT_PIN);
    if (pin) return fromPin(pin, [], opts);
    const path = defaultDatasetPath(opts.env);
    return { kind: 'local', path, display: path };
  }
  if (arg === '') throw new InvalidInputError('the dataset argument is empty');
  if (arg.startsWith('@')) {
    const { name, segments } = parsePinRef(arg);
    if (isBuiltinPin(name)) return fromPin(builtinPin(name, opts.env), segments, opts);
    const config = await loadUserConfig(opts);
    const pin = config.pins.get(name);
    if (!pin) {
      const known = [...config.pins.keys(), ...BUILTIN_PINS].map((n) => `@${n}`);
      throw new NotFoundError(`no pin named @${name} in ${opts.config.path}`, { hint: `known pins: ${known.join(', ')}; add one with \`trajstore dataset pin ${name} URI\`` });
    }
    return fromPin(pin, segments, opts);
  }
  let parsed;
  try {
    parsed = parseUri(arg, cwd, opts.env);
  } catch (error) {
    if (error instanceof PinError) throw new InvalidInputError(`dataset ${JSON.stringify(redactUserInfo(arg))}: ${error.message}`);
    throw error;
  }
  switch (parsed.kind) {
    case 'local':
      return { kind: 'local', path: parsed.path, display: arg };
    case 'catalog':
      throw catalogUnsupported(arg);
    case 's3': {
      // A bare s3:// uri has no pin to carry endpoint or region: take the standard variables.
      const endpoint = opts.env.AWS_ENDPOINT_URL_S3 || opts.env.AWS_ENDPOINT_URL;
      return {
        kind: 's3',
        uri: s3Uri(parsed.bucket, parsed.prefix),
        bucket: parsed.bucket,
        prefix: parsed.prefix,
        ...(endpoint ? { endpoint } : {}),
        region: opts.env.AWS_REGION || opts.env.AWS_DEFAULT_REGION || DEFAULT_S3_REGION,
        display: s3Uri(parsed.bucket, parsed.prefix),
      };
    }
  }
}

async function fromPin(pin: Pin, segments: string[], opts: ResolveOptions, display = `@${[pin.name, ...segments].join('/')}`): Promise<DatasetLocation> {
  if (pin.builtin && opts.purpose === 'write') {
    throw new InvalidInputError(`${display} is a local agent's session root: it can be imported from but not written`, {
      hint: 'import it into a dataset: trajstore import -f @agentb-code -t DATASET',
    });
  }
  switch (pin.kind) {
    case 'local': {
      const path = resolve(pin.path, ...segments);
      if (pin.name === DEFAULT_PIN) await mustNotBeFile(path, display);
      return { kind: 'local', path, display };
    }
    case 'catalog':
      return fromTicket(pin, segments, opts, display);
    case 's3': {
      const prefix = [pin.prefix, ...segments].filter((s) => s !== '').join('/');
      const credentials: Credentials | undefined = pin.credentials;
      return {
        kind: 's3',
        uri: s3Uri(pin.bucket, prefix),
        bucket: pin.bucket,
        prefix,
        ...(pin.endpoint ? { endpoint: pin.endpoint } : {}),
        region: pin.region,
        display,
        ...(credentials ? { credentials: { ...credentials } } : {}),
      };
    }
  }
}

function endpointOf(pin: Extract<Pin, { kind: 'catalog' }>, display: string): CatalogEndpoint {
  if (!pin.credentials) throw new InvalidInputError(`${display}: a directory-service pin needs --ak and --sk`);
  return { display, host: pin.host, port: pin.port, credentials: pin.credentials };
}

/**
 * `@team/<name>[/sub/path]`: a ticket for the dataset `<name>` from the directory service, and the
 * place it names (a sub-path goes on from there). The ticket's credentials serve this one place.
 */
async function fromTicket(pin: Extract<Pin, { kind: 'catalog' }>, segments: string[], opts: ResolveOptions, display: string): Promise<DatasetLocation> {
  const [dataset, ...rest] = segments;
  if (dataset === undefined) {
    throw new InvalidInputError(`${display} is a directory service: name one of its datasets as ${display}/NAME`, { hint: `list the datasets granted to you: trajstore list ${display}` });
  }
  if (opts.purpose === 'write') throw new InvalidInputError(`${display}: datasets of a directory service are read-only`);
  const { fetchTicket } = await import('../catalog/client.js');
  const ticket = await fetchTicket(endpointOf(pin, `@${pin.name}/${dataset}`), dataset);
  const entry: PinEntry = {
    uri: ticket.uri,
    ...(ticket.endpoint !== undefined ? { endpoint: ticket.endpoint } : {}),
    ...(ticket.region !== undefined ? { region: ticket.region } : {}),
    ...(ticket.access_key !== undefined ? { access_key: ticket.access_key } : {}),
    ...(ticket.secret_key !== undefined ? { secret_key: ticket.secret_key } : {}),
  };
  let place: Pin;
  try {
    // A ticket's local path is absolute; the base is never used.
    place = toPin(pin.name, entry, '/', opts.env);
  } catch (error) {
    if (error instanceof PinError) throw new UnavailableError(`${display}: the directory service sent a ticket this tool cannot use (${error.message})`);
    throw error;
  }
  if (place.kind === 'catalog') throw new UnavailableError(`${display}: the directory service sent a ticket for another directory service`);
  return fromPin(place, rest, opts, display);
}

/** The directory service a DATASET argument names as a whole (`@team`, no dataset after it); undefined for anything else. */
export async function catalogRoot(rc: ResolveContext, arg: string | undefined): Promise<CatalogEndpoint | undefined> {
  if (arg === undefined || !arg.startsWith('@')) return undefined;
  const { name, segments } = parsePinRef(arg);
  if (segments.length > 0 || isBuiltinPin(name)) return undefined;
  const pin = (await loadUserConfig({ ...rc, purpose: 'read' })).pins.get(name);
  return pin?.kind === 'catalog' ? endpointOf(pin, `@${name}`) : undefined;
}

function s3Uri(bucket: string, prefix: string): string {
  return prefix === '' ? `s3://${bucket}` : `s3://${bucket}/${prefix}`;
}

/** The default dataset must be a directory: an existing plain file there is refused. */
async function mustNotBeFile(path: string, display: string): Promise<void> {
  try {
    if (!statSync(path).isDirectory()) throw new InvalidInputError(`${display} (${path}) must be a local directory, and it is a file`);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}

function catalogUnsupported(what: string): InvalidInputError {
  return new InvalidInputError(`${what} is a directory-service locator: it needs an access key and secret key, which only a pin holds`, {
    hint: 'pin it (trajstore dataset pin team catalog://127.0.0.1:PORT --ak KEY --sk-stdin), then use @team/NAME',
  });
}

/** The configuration, loaded only when a pin or the default dataset is asked for: a path needs none. */
async function loadUserConfig(opts: ResolveOptions): ReturnType<typeof import('./config.js').loadConfig> {
  const { loadConfig } = await import('./config.js');
  return loadConfig(opts.config, { env: opts.env });
}
