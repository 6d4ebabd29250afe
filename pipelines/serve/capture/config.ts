/**
 * The capture gateway's configuration (`serve --gateway-config FILE`), a TOML file read strictly:
 * an unknown key, a value of the wrong type, a duplicate or malformed route name, a `forward` that
 * names no route, chains or is combined with `upstream`, a listener that is not loopback, or a
 * credential variable that is not set are refused (exit 2) with the file, line and key, before
 * anything listens. Credentials are read from the environment here and kept in memory only; no
 * message ever holds one.
 *
 *   listen = "127.0.0.1:4000"            required; loopback; port 0 picks a free one
 *   admin_listen = "127.0.0.1:9876"      /admin/status, /admin/sessions; loopback (default shown)
 *   agent_id = "default"                 stamped on captures (the agent header overrides it per request)
 *   session_header = "x-trajstore-session-id"
 *   capture_level = "dialogue"           summary | dialogue | full
 *   debug = false                        the same as --gateway-debug
 *   upstream_timeout = 300               seconds an upstream may send nothing (before its answer's head, between its bytes)
 *
 *   [[models]]                           ordered; the first whose name matches the request's model wins
 *   name = "gpt-4o*"                     exact, prefix*, *suffix or *; unique
 *   provider = "openai"                  openai (default) or anthropic: how the credential is sent
 *   upstream = "https://api.openai.com/v1"          base URL, with its API prefix
 *   upstream_anthropic = "https://api.anthropic.com" optional base for /v1/messages
 *   api_key_env = "OPENAI_API_KEY"       the variable holding the route's credential
 *   api_key = "..."                      inline credential (discouraged: the file then holds a secret)
 *   forward = "gpt-4o-mini"              instead of upstream: send to that route, rewriting the model
 */
import { readFileSync } from 'node:fs';
import { InvalidInputError, NotFoundError } from '../../../lib/errors.js';
import { isPlainTable, KeyLines, parseToml } from '../../../lib/toml.js';
import { parseListenAddress } from '../address.js';
import { pathSegmentProblem } from '../gateway/identity.js';

export const CAPTURE_LEVELS = ['summary', 'dialogue', 'full'] as const;
export type CaptureLevel = (typeof CAPTURE_LEVELS)[number];
export const PROVIDERS = ['openai', 'anthropic'] as const;
export type Provider = (typeof PROVIDERS)[number];

export const CAPTURE_DEFAULTS = {
  adminListen: '127.0.0.1:9876',
  agentId: 'default',
  sessionHeader: 'x-trajstore-session-id',
  captureLevel: 'dialogue' as CaptureLevel,
  upstreamTimeoutS: 300,
};

export interface ModelRoute {
  name: string;
  provider: Provider;
  /** Base URLs (with their API prefix); absent on a forwarding route. */
  upstream?: URL;
  upstreamAnthropic?: URL;
  /** Where the credential came from, for messages (`$OPENAI_API_KEY`, `api_key`); never the value. */
  credentialSource?: string;
  /** The credential; not enumerable, so no JSON of a route ever holds it. */
  readonly apiKey?: string;
  /** The route this one forwards to (its exact name). */
  forward?: string;
}

export interface CaptureConfig {
  path: string;
  listen: string;
  adminListen: string;
  agentId: string;
  sessionHeader: string;
  captureLevel: CaptureLevel;
  debug: boolean;
  /** How long an upstream may send nothing, waiting for its answer's head or between its bytes. */
  upstreamTimeoutMs: number;
  routes: ModelRoute[];
}

const TOP_KEYS = ['listen', 'admin_listen', 'agent_id', 'session_header', 'capture_level', 'debug', 'upstream_timeout', 'models'];
const ROUTE_KEYS = ['name', 'provider', 'upstream', 'upstream_anthropic', 'api_key_env', 'api_key', 'forward'];

/** Whether a route name pattern matches a model. */
export function nameMatches(pattern: string, model: string): boolean {
  if (pattern === '*') return true;
  if (pattern.endsWith('*')) return model.startsWith(pattern.slice(0, -1));
  if (pattern.startsWith('*')) return model.endsWith(pattern.slice(1));
  return pattern === model;
}

const isPattern = (name: string): boolean => name.includes('*');

/** Lines of the `[[models]]` headers, in order. */
function routeLines(text: string): number[] {
  const lines: number[] = [];
  text.split(/\r?\n/).forEach((line, i) => {
    if (/^\s*\[\[\s*models\s*\]\]\s*(#.*)?$/.test(line)) lines.push(i + 1);
  });
  return lines;
}

export function loadCaptureConfig(path: string, env: NodeJS.ProcessEnv): CaptureConfig {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') throw new NotFoundError(`--gateway-config ${path}: no such file`);
    throw error;
  }
  const fail = (message: string, line?: number, hint?: string): never => {
    throw new InvalidInputError(`${path}${line ? `:${line}` : ''}: ${message}`, hint === undefined ? {} : { hint });
  };
  const doc = parseToml(text, fail);
  const lines = new KeyLines(text);
  for (const key of Object.keys(doc)) if (!TOP_KEYS.includes(key)) fail(`unknown key \`${key}\``, lines.find([], key), `keys: ${TOP_KEYS.join(', ')}`);
  const str = (key: string, fallback?: string): string => {
    const value = doc[key] ?? fallback;
    if (value === undefined) return fail(`\`${key}\` is required`);
    if (typeof value !== 'string' || value === '') return fail(`\`${key}\` must be a non-empty string`, lines.find([], key));
    return value;
  };
  const listen = str('listen');
  const adminListen = str('admin_listen', CAPTURE_DEFAULTS.adminListen);
  for (const [key, value] of [['listen', listen], ['admin_listen', adminListen]] as const) {
    try {
      parseListenAddress(value, key);
    } catch (error) {
      fail((error as Error).message, lines.find([], key));
    }
  }
  const sessionHeader = str('session_header', CAPTURE_DEFAULTS.sessionHeader).toLowerCase();
  if (!/^[a-z0-9-]+$/.test(sessionHeader)) fail('`session_header` must be an HTTP header name (letters, digits and -)', lines.find([], 'session_header'));
  const captureLevel = str('capture_level', CAPTURE_DEFAULTS.captureLevel);
  if (!(CAPTURE_LEVELS as readonly string[]).includes(captureLevel)) fail(`\`capture_level\` must be one of ${CAPTURE_LEVELS.join(', ')}`, lines.find([], 'capture_level'));
  if (doc.debug !== undefined && typeof doc.debug !== 'boolean') fail('`debug` must be true or false', lines.find([], 'debug'));
  // The agent is a directory of the trace's storage and of the Markdown files: one segment, as the event gateway takes.
  const agentId = str('agent_id', CAPTURE_DEFAULTS.agentId);
  const agentProblem = pathSegmentProblem(agentId);
  if (agentProblem !== undefined) fail(`\`agent_id\` must be one path-safe segment: ${agentProblem}`, lines.find([], 'agent_id'));
  const timeout = doc.upstream_timeout ?? CAPTURE_DEFAULTS.upstreamTimeoutS;
  if (typeof timeout !== 'number' || !(timeout > 0 && timeout <= 86_400)) fail('`upstream_timeout` must be a number of seconds above 0, at most 86400', lines.find([], 'upstream_timeout'));
  const routes = parseRoutes(doc.models, routeLines(text), env, fail);
  return { path, listen, adminListen, agentId, sessionHeader, captureLevel: captureLevel as CaptureLevel, debug: doc.debug === true, upstreamTimeoutMs: (timeout as number) * 1000, routes };
}

function parseRoutes(value: unknown, at: number[], env: NodeJS.ProcessEnv, fail: (message: string, line?: number, hint?: string) => never): ModelRoute[] {
  if (value === undefined) return fail('at least one [[models]] route is required');
  if (!Array.isArray(value) || value.length === 0 || !value.every(isPlainTable)) return fail('`models` must be a list of [[models]] tables');
  const routes: ModelRoute[] = [];
  (value as Array<Record<string, unknown>>).forEach((table, i) => {
    const line = at[i];
    const where = `models[${i + 1}]`;
    for (const key of Object.keys(table)) if (!ROUTE_KEYS.includes(key)) fail(`${where}: unknown key \`${key}\``, line, `route keys: ${ROUTE_KEYS.join(', ')}`);
    for (const key of ROUTE_KEYS) if (table[key] !== undefined && (typeof table[key] !== 'string' || table[key] === '')) fail(`${where}: \`${key}\` must be a non-empty string`, line);
    const s = (key: string): string | undefined => table[key] as string | undefined;
    const name = s('name') ?? fail(`${where}: \`name\` is required`, line);
    if (name.slice(1, -1).includes('*') || (name.startsWith('*') && name.endsWith('*') && name !== '*')) fail(`${where}: name ${JSON.stringify(name)}: \`*\` may only be the whole name, its start or its end`, line);
    if (routes.some((r) => r.name === name)) fail(`${where}: the route name ${JSON.stringify(name)} is given twice`, line);
    const provider = s('provider') ?? 'openai';
    if (!(PROVIDERS as readonly string[]).includes(provider)) fail(`${where}: \`provider\` must be one of ${PROVIDERS.join(', ')} (${JSON.stringify(provider)} is not supported)`, line);
    const url = (key: string): URL | undefined => {
      const text = s(key);
      if (text === undefined) return undefined;
      let parsed: URL | undefined;
      try {
        parsed = new URL(text);
      } catch {
        // reported below
      }
      if (!parsed || (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') || parsed.username || parsed.password || parsed.search || parsed.hash) {
        return fail(`${where}: \`${key}\` must be an http:// or https:// base URL without credentials, query or fragment`, line);
      }
      return parsed;
    };
    const forward = s('forward');
    const upstream = url('upstream');
    const upstreamAnthropic = url('upstream_anthropic');
    if (forward !== undefined && (upstream || upstreamAnthropic || s('api_key_env') || s('api_key'))) fail(`${where}: \`forward\` cannot be combined with an upstream or a credential: the route it names has those`, line);
    if (forward === undefined && !upstream && !upstreamAnthropic) fail(`${where}: needs \`upstream\` (or \`upstream_anthropic\`), or \`forward\``, line);
    if (s('api_key_env') !== undefined && s('api_key') !== undefined) fail(`${where}: give \`api_key_env\` or \`api_key\`, not both`, line);
    const route: ModelRoute = { name, provider: provider as Provider };
    if (upstream) route.upstream = upstream;
    if (upstreamAnthropic) route.upstreamAnthropic = upstreamAnthropic;
    if (forward !== undefined) route.forward = forward;
    const variable = s('api_key_env');
    let key: string | undefined;
    if (variable !== undefined) {
      key = env[variable];
      if (!key) fail(`${where}: the environment variable ${variable} (its \`api_key_env\`) is not set`, line);
      route.credentialSource = `$${variable}`;
    } else if (s('api_key') !== undefined) {
      key = s('api_key');
      route.credentialSource = 'api_key in the file';
    }
    if (key !== undefined) Object.defineProperty(route, 'apiKey', { value: key, enumerable: false });
    routes.push(route);
  });
  routes.forEach((route, i) => {
    if (route.forward === undefined) return;
    const target = routes.find((r) => r.name === route.forward);
    if (!target) fail(`models[${i + 1}]: \`forward\` names no route: ${JSON.stringify(route.forward)}`, at[i]);
    if (target?.forward !== undefined) fail(`models[${i + 1}]: \`forward\` may not name a forwarding route (${JSON.stringify(route.forward)} forwards too): no chains`, at[i]);
    if (isPattern(route.forward as string)) fail(`models[${i + 1}]: \`forward\` must name a route with an exact name (the model is rewritten to it), not a pattern`, at[i]);
  });
  return routes;
}

export interface RouteChoice {
  /** The route the request's model matched. */
  matched: ModelRoute;
  /** The route with the upstream (the forward target, or the matched route). */
  target: ModelRoute;
  /** The model sent upstream (the forward target's name when rewritten). */
  modelSent: string;
  rewritten: boolean;
}

/** The first route whose name matches `model`, and where it sends the request; undefined when none matches. */
export function chooseRoute(routes: readonly ModelRoute[], model: string): RouteChoice | undefined {
  const matched = routes.find((r) => nameMatches(r.name, model));
  if (!matched) return undefined;
  if (matched.forward === undefined) return { matched, target: matched, modelSent: model, rewritten: false };
  const target = routes.find((r) => r.name === matched.forward) as ModelRoute;
  return { matched, target, modelSent: target.name, rewritten: target.name !== model };
}
