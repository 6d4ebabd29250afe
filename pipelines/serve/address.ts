/**
 * Listener addresses of `serve`: every one must be loopback (spec/trajstore.md, serve rule 1), and
 * this is checked on the text given, before anything binds. A host name other than `localhost` is
 * refused rather than resolved: what a name resolves to may change between the check and the bind.
 */
import { InvalidInputError } from '../../lib/errors.js';
import { isLoopbackHost } from '../../lib/loopback.js';

export interface ListenAddress {
  host: string;
  port: number;
}

/** `HOST:PORT`, `[V6]:PORT` or `PORT` (on 127.0.0.1); `flag` names the option in errors. */
export function parseListenAddress(text: string, flag: string): ListenAddress {
  const bracketed = /^\[([^\]]+)\]:(\d+)$/.exec(text);
  const plain = /^([^:]*):(\d+)$/.exec(text);
  const portOnly = /^\d+$/.test(text) ? ['', '127.0.0.1', text] : undefined;
  const parts = bracketed ?? plain ?? portOnly;
  if (!parts) throw new InvalidInputError(`invalid ${flag} ${JSON.stringify(text)}: expected HOST:PORT`, { hint: 'e.g. 127.0.0.1:8080, [::1]:8080 or 8080' });
  const host = parts[1] as string;
  const port = Number(parts[2]);
  if (!Number.isInteger(port) || port > 65535) throw new InvalidInputError(`invalid ${flag} ${JSON.stringify(text)}: the port must be 0 to 65535`);
  if (!isLoopbackHost(host)) {
    throw new InvalidInputError(`${flag} ${JSON.stringify(text)} is not a loopback address: serve only listens on this machine`, {
      hint: 'use 127.0.0.1, [::1] or localhost; put a reverse proxy in front to share it',
    });
  }
  return { host: host.toLowerCase() === 'localhost' ? '127.0.0.1' : host, port };
}
