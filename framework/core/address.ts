/** Node addresses (`host:port`, IPv6 hosts in brackets): a leaf module, so the command line can check them cheaply. */
import { ActorError } from './errors.js';

/**
 * The host of an address: a DNS name or IPv4 address, or an IPv6 address in brackets. Nothing else
 * (a path, `@`, spaces, unbracketed colons), which a URL made of the address would read otherwise.
 */
export const ADDR_HOST = String.raw`\[[0-9A-Fa-f:.]{2,45}\]|[A-Za-z0-9.-]{1,253}`;
const HOST_PORT = new RegExp(`^(${ADDR_HOST}):(\\d{1,5})$`);

/** host:port -> [host, port]; IPv6 hosts in brackets (returned without them). */
export function parseAddr(addr: string): { host: string; port: number } {
  const m = HOST_PORT.exec(addr.trim());
  const port = m ? Number(m[2]) : NaN;
  if (!m || port > 65535) throw new ActorError('bad-request', `address '${addr}' is not host:port`);
  return { host: m[1]!.replace(/^\[(.*)\]$/, '$1'), port };
}

export function formatAddr(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/** The port of an address written without one, as inspect accepts it (`host` means `host:8000`). */
export const DEFAULT_NODE_PORT = 8000;

/** An address as a person may write it: a leading http:// and trailing slashes are dropped, a missing port is 8000. */
export function normalizeAddr(addr: string): string {
  const a = addr.trim().replace(/^https?:\/\//, '').replace(/\/+$/, '');
  return /:\d+$/.test(a) ? a : `${a}:${DEFAULT_NODE_PORT}`;
}
