/**
 * The directory service seen from a `catalog://127.0.0.1:<port>` pin: the datasets granted to the
 * pin's key pair, and tickets to open them (plugin.ts). Credentials travel as HTTP Basic over
 * loopback only (the locator must be a loopback address) and never appear in a message.
 */
import { InvalidInputError, NotFoundError, UnavailableError } from '../../lib/errors.js';
import type { Credentials } from '../pins/pins.js';
import { CATALOG_PREFIX } from './constants.js';
import type { Ticket } from './tickets.js';

export interface CatalogEndpoint {
  /** The pin reference, for messages (`@team`). */
  display: string;
  host: string;
  port: number;
  credentials: Credentials;
}

/** How long a request to the directory service may take. */
const REQUEST_TIMEOUT_MS = 10_000;

async function call(endpoint: CatalogEndpoint, method: 'GET' | 'POST', path: string, body?: object): Promise<unknown> {
  const { host, port, credentials } = endpoint;
  const url = `http://${host}:${port}${CATALOG_PREFIX}${path}`;
  const authorization = `Basic ${Buffer.from(`${credentials.accessKeyId}:${credentials.secretAccessKey}`).toString('base64')}`;
  let response: Response;
  try {
    response = await fetch(url, {
      method,
      headers: { authorization, ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
  } catch (error) {
    const cause = (error as { cause?: { code?: string } }).cause?.code ?? (error as Error).name;
    throw new UnavailableError(`${endpoint.display}: the directory service at catalog://${host}:${port} did not answer (${cause})`, { hint: 'is `trajstore serve --catalog-config FILE` running on that port?' });
  }
  const text = await response.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new UnavailableError(`${endpoint.display}: catalog://${host}:${port} answered ${response.status} with something other than JSON; is it a trajstore directory service?`);
  }
  if (response.ok) return parsed;
  const message = (parsed as { error?: { message?: string } }).error?.message ?? `HTTP ${response.status}`;
  if (response.status === 401) throw new InvalidInputError(`${endpoint.display}: the directory service refused the pin's keys (${message})`, { hint: `check the pin's access and secret key: trajstore dataset show ${endpoint.display.slice(1).split('/')[0]}` });
  if (response.status === 403) throw new NotFoundError(`${endpoint.display}: ${message}`, { hint: `list the datasets granted to you: trajstore list @${endpoint.display.slice(1).split('/')[0]}` });
  if (response.status === 404) throw new UnavailableError(`${endpoint.display}: catalog://${host}:${port} serves no directory service`, { hint: 'start serve with --catalog-config FILE' });
  throw new UnavailableError(`${endpoint.display}: the directory service answered ${response.status}: ${message}`);
}

/** The names of the datasets granted to the pin's key pair. */
export async function grantedDatasets(endpoint: CatalogEndpoint): Promise<string[]> {
  const reply = (await call(endpoint, 'GET', '/datasets')) as { datasets?: Array<{ name?: unknown }> };
  return (reply.datasets ?? []).map((d) => String(d.name));
}

/** A ticket for one dataset; an expired one (a clock far off, a stale answer) is refused. */
export async function fetchTicket(endpoint: CatalogEndpoint, dataset: string): Promise<Ticket> {
  const reply = (await call(endpoint, 'POST', '/tickets', { dataset })) as { ticket?: Ticket };
  const now = Date.now();
  const ticket = reply.ticket;
  if (!ticket || typeof ticket.uri !== 'string') throw new UnavailableError(`${endpoint.display}: the directory service sent no ticket`);
  if (!(Date.parse(ticket.expires_at) > now)) throw new UnavailableError(`${endpoint.display}: the directory service sent a ticket that expired at ${ticket.expires_at}`, { hint: 'check the clocks of this machine and the server' });
  return ticket;
}
