/**
 * What `sandboxd serve` decides before loading any of the daemon: defaults, the listen address and
 * the authority endpoints name. Light on purpose (the command line loads it to parse flags).
 */
import { InvalidInputError } from '../lib/errors.js';

export const WILDCARDS = ['0.0.0.0', '::', ''];

export const SERVE_DEFAULTS = {
  listen: '127.0.0.1:8080',
  maxSandboxes: 32,
  cpuMillis: 4000,
  memoryBytes: 8589934592,
  maxTimeoutSeconds: 86400,
} as const;

export function defaultStateDir(): string {
  return process.getuid?.() === 0 ? '/var/lib/sandboxd' : `/tmp/sandboxd-${process.getuid?.() ?? 'user'}`;
}

export function parseHostPort(flag: string, text: string): { host: string; port: number } {
  const m = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/.exec(text);
  if (!m || Number(m[2]) > 65535) throw new InvalidInputError(`${flag} ${JSON.stringify(text)}: expected host:port`);
  return { host: m[1]!.replace(/^\[|\]$/g, ''), port: Number(m[2]) };
}

/**
 * The authority endpoints name: --public-endpoint, or the listener when it is a fixed, specific
 * address. `serve` requires it up front; the programmatic constructor also accepts a loopback port 0
 * (the harness) and names the port it was given.
 */
export function publicAuthority(o: { listen: string; publicEndpoint?: string }): string {
  const listen = parseHostPort('--listen', o.listen);
  if (o.publicEndpoint !== undefined) {
    parseHostPort('--public-endpoint', o.publicEndpoint);
    return o.publicEndpoint;
  }
  if (WILDCARDS.includes(listen.host) || listen.port === 0) {
    throw new InvalidInputError(`--public-endpoint is required when --listen ${o.listen} is a wildcard or ephemeral address`);
  }
  return o.listen;
}

