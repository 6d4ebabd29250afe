/**
 * Pins: short names (`@work`) for datasets, stored as `[pins.<name>]` tables in the user
 * configuration (spec/trajstore.md, "Pin"). This module knows what a pin may say; reading and
 * writing the file is config.ts, turning an argument into a place is resolve.ts.
 *
 * Nothing here ever puts a credential into a message: problems name the key, never its value.
 */
import { homedir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';

export const PIN_NAME = /^[a-z][a-z0-9._-]{0,63}$/;
export const PIN_KEYS = ['uri', 'endpoint', 'region', 'access_key', 'secret_key'] as const;
export type PinKey = (typeof PIN_KEYS)[number];
/** The pin used when a command omits the dataset; it must be a local directory. */
export const DEFAULT_PIN = 'default';
export const DEFAULT_S3_REGION = 'us-west-2';

/** A pin as stored in the file: only the keys the spec allows, all strings. */
export interface PinEntry {
  uri: string;
  endpoint?: string;
  region?: string;
  access_key?: string;
  secret_key?: string;
}

export interface Credentials {
  accessKeyId: string;
  secretAccessKey: string;
}

/** An object-store prefix and what it takes to reach it: an s3 pin's, or a dataset's resolved from one. */
export interface S3Place {
  uri: string;
  bucket: string;
  prefix: string;
  endpoint?: string;
  region: string;
  credentials?: Credentials;
}

/** A pin with its uri understood. */
export type Pin =
  | { name: string; builtin: boolean; kind: 'local'; uri: string; path: string }
  | ({
      name: string;
      builtin: false;
      kind: 's3';
      /** True when the pin omits `region` and us-west-2 applies. */
      regionDefaulted: boolean;
    } & S3Place)
  | { name: string; builtin: false; kind: 'catalog'; uri: string; host: string; port: number; credentials?: Credentials };

export type PinKind = Pin['kind'];

/** A problem with one pin; `key` names the offending key when there is one. */
export interface PinProblem {
  key?: PinKey;
  message: string;
}

export class PinError extends Error {
  constructor(readonly problem: PinProblem) {
    super(problem.message);
  }
}

/** The built-in pins: local agent session roots, read-only, shown by `dataset list`. */
export const BUILTIN_PINS = ['agenta', 'agentb', 'agentb-code'] as const;
export type BuiltinPin = (typeof BUILTIN_PINS)[number];

export const BUILTIN_DESCRIPTIONS: Record<BuiltinPin, string> = {
  agenta: 'Codex CLI sessions ($CODEX_HOME/sessions, else ~/.codex/sessions)',
  agentb: 'Claude configuration root ($CLAUDE_CONFIG_DIR, else ~/.claude)',
  'agentb-code': 'Claude Code projects (<@agentb>/projects)',
};

export function isBuiltinPin(name: string): name is BuiltinPin {
  return (BUILTIN_PINS as readonly string[]).includes(name);
}

export function homeOf(env: NodeJS.ProcessEnv): string {
  return env.HOME || homedir();
}

export function builtinPath(name: BuiltinPin, env: NodeJS.ProcessEnv): string {
  const home = homeOf(env);
  const claude = env.CLAUDE_CONFIG_DIR || join(home, '.claude');
  switch (name) {
    case 'agenta':
      return env.CODEX_HOME ? join(env.CODEX_HOME, 'sessions') : join(home, '.codex', 'sessions');
    case 'agentb':
      return claude;
    case 'agentb-code':
      return join(claude, 'projects');
  }
}

export function builtinPin(name: BuiltinPin, env: NodeJS.ProcessEnv): Pin {
  const path = builtinPath(name, env);
  return { name, builtin: true, kind: 'local', uri: path, path };
}

/** Why `name` cannot be a user pin, or undefined when it can. */
export function pinNameProblem(name: string): string | undefined {
  if (!PIN_NAME.test(name)) {
    return `invalid pin name ${JSON.stringify(name)}: use a lower-case letter, then up to 63 of a-z 0-9 . _ -`;
  }
  if (isBuiltinPin(name)) return `pin name ${JSON.stringify(name)} is built in (@${name}) and cannot be redefined`;
  return undefined;
}

/** `@name` and `name` both name the pin `name`. */
export function stripAt(name: string): string {
  return name.startsWith('@') ? name.slice(1) : name;
}

const S3_BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
const LOOPBACK_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]']);

/** What a uri (of a pin or a command argument) points at. */
export type ParsedUri =
  | { kind: 'local'; path: string }
  | { kind: 's3'; bucket: string; prefix: string }
  | { kind: 'catalog'; host: string; port: number };

/**
 * Classifies a uri. Local paths are made absolute against `base` (the config file's directory
 * for a stored pin, the working directory for a command argument); `~/` is the home directory.
 */
export function parseUri(uri: string, base: string, env: NodeJS.ProcessEnv): ParsedUri {
  if (uri === '') throw new PinError({ key: 'uri', message: 'uri is empty' });
  if (uri.startsWith('@')) {
    throw new PinError({ key: 'uri', message: `uri ${JSON.stringify(uri)} points at another pin; a pin must name a path or an s3:// or catalog:// uri` });
  }
  // `s3:/bucket` is a slash short of a uri, not a directory named `s3:`: pinned as a path it would fail only when used.
  const mistyped = /^(s3|catalog):(?!\/\/)/i.exec(uri)?.[1];
  if (mistyped) {
    throw new PinError({ key: 'uri', message: `the uri starts with "${mistyped}:" but not "${mistyped}://"; a local path that starts so is written ./${mistyped}:...` });
  }
  const scheme = /^([a-zA-Z][a-zA-Z0-9+.-]*):\/\//.exec(uri)?.[1]?.toLowerCase();
  if ((scheme === 's3' || scheme === 'catalog') && uri.slice(scheme.length + 3).split('/')[0]!.includes('@')) {
    // Never echo it: `user:secret@` would put a credential into the message.
    throw new PinError({ key: 'uri', message: `${scheme === 's3' ? 'an' : 'a'} ${scheme}:// uri must not carry a user name or password; use --ak/--sk` });
  }
  if (scheme === 's3') {
    const rest = uri.slice('s3://'.length);
    const slash = rest.indexOf('/');
    const bucket = slash < 0 ? rest : rest.slice(0, slash);
    const prefix = slash < 0 ? '' : rest.slice(slash + 1).replace(/^\/+|\/+$/g, '');
    if (!S3_BUCKET.test(bucket)) throw new PinError({ key: 'uri', message: `invalid bucket name ${JSON.stringify(bucket)} in ${JSON.stringify(uri)}` });
    if (prefix.split('/').some((s) => s === '.' || s === '..' || (prefix !== '' && s === ''))) {
      throw new PinError({ key: 'uri', message: `invalid prefix in ${JSON.stringify(uri)}: no empty, "." or ".." segments` });
    }
    return { kind: 's3', bucket, prefix };
  }
  if (scheme === 'catalog') {
    const match = /^catalog:\/\/(\[::1\]|[^/:]+):(\d{1,5})\/?$/i.exec(uri);
    const host = match?.[1]?.toLowerCase();
    const port = Number(match?.[2]);
    if (!host || !LOOPBACK_HOSTS.has(host) || !(port >= 1 && port <= 65535)) {
      throw new PinError({ key: 'uri', message: `invalid directory-service locator ${JSON.stringify(uri)}: use catalog://127.0.0.1:<port>` });
    }
    return { kind: 'catalog', host, port };
  }
  if (scheme !== undefined) {
    throw new PinError({ key: 'uri', message: `unsupported uri scheme ${JSON.stringify(`${scheme}://`)}: use a local path, s3://bucket/prefix or catalog://127.0.0.1:<port>` });
  }
  const expanded = uri === '~' ? homeOf(env) : uri.startsWith('~/') ? join(homeOf(env), uri.slice(2)) : uri;
  return { kind: 'local', path: isAbsolute(expanded) ? resolve(expanded) : resolve(base, expanded) };
}

/**
 * Checks a stored entry and understands it. `base` resolves relative local paths. Rules:
 * endpoint/region only on s3 pins; credentials come in pairs; a directory-service pin needs
 * credentials and takes no endpoint or region; `default` must be local.
 */
export function toPin(name: string, entry: PinEntry, base: string, env: NodeJS.ProcessEnv): Pin {
  const parsed = parseUri(entry.uri, base, env);
  const hasAk = entry.access_key !== undefined;
  const hasSk = entry.secret_key !== undefined;
  if (hasAk !== hasSk) {
    throw new PinError({ key: hasAk ? 'access_key' : 'secret_key', message: 'access_key and secret_key must be given together' });
  }
  for (const key of ['access_key', 'secret_key', 'region'] as const) {
    if (entry[key] === '') throw new PinError({ key, message: `${key} is empty` });
  }
  const credentials = hasAk ? { accessKeyId: entry.access_key as string, secretAccessKey: entry.secret_key as string } : undefined;
  if (name === DEFAULT_PIN && parsed.kind !== 'local') {
    throw new PinError({ key: 'uri', message: `the "default" pin must be a local directory, not ${parsed.kind === 's3' ? 'an s3://' : 'a catalog://'} uri` });
  }
  if (parsed.kind !== 's3') {
    for (const key of ['endpoint', 'region'] as const) {
      if (entry[key] !== undefined) {
        throw new PinError({ key, message: `${key} applies to s3:// pins only, and this pin is ${parsed.kind === 'local' ? 'a local path' : 'a directory-service pin'}` });
      }
    }
  }
  switch (parsed.kind) {
    case 'local':
      if (credentials) throw new PinError({ key: 'access_key', message: 'credentials apply to s3:// and catalog:// pins only, and this pin is a local path' });
      return { name, builtin: false, kind: 'local', uri: entry.uri, path: parsed.path };
    case 'catalog':
      if (!credentials) throw new PinError({ key: 'access_key', message: 'a directory-service pin needs access_key and secret_key (--ak and --sk)' });
      return { name, builtin: false, kind: 'catalog', uri: entry.uri, host: parsed.host, port: parsed.port, credentials };
    case 's3': {
      if (entry.endpoint !== undefined) checkEndpoint(entry.endpoint);
      return {
        name,
        builtin: false,
        kind: 's3',
        uri: entry.uri,
        bucket: parsed.bucket,
        prefix: parsed.prefix,
        ...(entry.endpoint !== undefined ? { endpoint: entry.endpoint } : {}),
        region: entry.region ?? DEFAULT_S3_REGION,
        regionDefaulted: entry.region === undefined,
        ...(credentials ? { credentials } : {}),
      };
    }
  }
}

function checkEndpoint(endpoint: string): void {
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    throw new PinError({ key: 'endpoint', message: `endpoint ${JSON.stringify(endpoint)} is not a URL` });
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new PinError({ key: 'endpoint', message: `endpoint ${JSON.stringify(endpoint)} must be an http:// or https:// URL` });
  }
  if (url.username || url.password) {
    // Never echo it: the URL carries a credential.
    throw new PinError({ key: 'endpoint', message: 'endpoint must not carry a user name or password; use --ak/--sk' });
  }
}
