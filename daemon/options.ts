/** `sandboxd serve`'s settings, checked before anything is touched; each error names its flag. */
import { isAbsolute } from 'node:path';
import { InvalidInputError } from '../lib/errors.js';
import { parseHostPort, WILDCARDS } from './listen.js';
import type { PathInput } from './path-input.js';

export interface ServeOptions {
  /** From `--images-dir`, else the configuration's `images_dir`. */
  imagesDir: PathInput;
  cgroupRoot: string;
  listen: string;
  state: string;
  maxSandboxes: number;
  cpuMillis: number;
  memoryBytes: number;
  publicEndpoint?: string;
  maxTimeoutSeconds: number;
  /** The lifecycle secret (from SVC_API_KEY; never a flag); empty when it is not set. */
  apiKey: string;
}

/** `<state>/run/<sb-uuid>/vsock.sock_44770` must fit a socket path (107 bytes), control.sock stay below 104. */
export const STATE_PATH_MAX = 46;
export const MAX_TIMEOUT_LIMIT = 365 * 24 * 3600;
export const MIN_API_KEY_BYTES = 32;
/** How to make a lifecycle secret, for the errors about a missing or short one. */
const API_KEY_HINT = 'e.g. export SVC_API_KEY=$(openssl rand -hex 32)';

export function checkServeOptions(o: ServeOptions): void {
  if (o.apiKey === '') throw new InvalidInputError('SVC_API_KEY: the lifecycle secret must be set in the environment', { hint: API_KEY_HINT });
  if (Buffer.byteLength(o.apiKey) < MIN_API_KEY_BYTES) {
    throw new InvalidInputError(`SVC_API_KEY: the lifecycle secret must be at least ${MIN_API_KEY_BYTES} bytes`, { hint: API_KEY_HINT });
  }
  for (const { input, path } of [o.imagesDir, { input: '--cgroup-root', path: o.cgroupRoot }, { input: '--state', path: o.state }]) {
    if (!isAbsolute(path)) throw new InvalidInputError(`${input} ${path}: must be an absolute path`);
  }
  if (Buffer.byteLength(o.state) > STATE_PATH_MAX) throw new InvalidInputError(`--state ${o.state}: at most ${STATE_PATH_MAX} bytes (socket paths below it must stay short)`);
  for (const [flag, value, max] of [['--max-sandboxes', o.maxSandboxes, 1e6], ['--cpu-millis', o.cpuMillis, 1e9], ['--memory-bytes', o.memoryBytes, 2 ** 52]] as const) {
    if (!Number.isSafeInteger(value) || value < 1 || value > max) throw new InvalidInputError(`${flag} ${value}: must be a positive integer`);
  }
  if (!Number.isSafeInteger(o.maxTimeoutSeconds) || o.maxTimeoutSeconds < 60 || o.maxTimeoutSeconds > MAX_TIMEOUT_LIMIT) {
    throw new InvalidInputError(`--max-timeout-seconds ${o.maxTimeoutSeconds}: must be from 60 to ${MAX_TIMEOUT_LIMIT} (one year)`);
  }
  const { host } = parseHostPort('--listen', o.listen);
  if (o.publicEndpoint !== undefined) parseHostPort('--public-endpoint', o.publicEndpoint);
  else if (WILDCARDS.includes(host)) throw new InvalidInputError(`--public-endpoint is required when --listen ${o.listen} is a wildcard address`);
}
