/**
 * A ticket: what one user needs to open one library, and nothing else (no other library, no
 * user or grant of the ACL): its uri, and for an s3:// library its endpoint, region and the
 * library's credentials. A ticket expires TICKET_LIFETIME_MS after it is issued; clients refuse
 * an expired ticket and fetch a new one, so a revoked grant stops working at the latest one
 * lifetime after `serve` restarts with the changed file.
 */
import { Type, type Static } from '@sinclair/typebox';
import type { Acl } from './acl.js';
import { libraryOf } from './acl.js';
import { dirname } from 'node:path';
import { TICKET_LIFETIME_MS } from './constants.js';


export const Ticket = Type.Object(
  {
    dataset: Type.String({ description: 'the library name' }),
    uri: Type.String({ description: 'a local path or an s3:// uri' }),
    endpoint: Type.Optional(Type.String()),
    region: Type.Optional(Type.String()),
    access_key: Type.Optional(Type.String()),
    secret_key: Type.Optional(Type.String()),
    issued_at: Type.String({ format: 'date-time' }),
    expires_at: Type.String({ format: 'date-time' }),
  },
  { additionalProperties: false },
);
export type Ticket = Static<typeof Ticket>;

/** The libraries granted to `user` that exist, by name. */
export function grantedTo(acl: Acl, user: string): string[] {
  return [...(acl.grants.get(user) ?? [])].filter((name) => acl.datasets.has(name)).sort();
}

/** A ticket for `dataset`, or undefined when `user` is not granted it (or it does not exist: the caller cannot tell). */
export function ticketFor(acl: Acl, user: string, dataset: string, now: number, lifetimeMs = TICKET_LIFETIME_MS): Ticket | undefined {
  const entry = acl.datasets.get(dataset);
  if (entry === undefined || !acl.grants.get(user)?.has(dataset)) return undefined;
  const library = libraryOf(dataset, entry, dirname(acl.path));
  const base = { dataset, issued_at: new Date(now).toISOString(), expires_at: new Date(now + lifetimeMs).toISOString() };
  if (library.kind === 'local') return { ...base, uri: library.path };
  return {
    ...base,
    uri: library.uri,
    ...(library.endpoint !== undefined ? { endpoint: library.endpoint } : {}),
    region: library.region,
    ...(library.credentials ? { access_key: library.credentials.accessKeyId, secret_key: library.credentials.secretAccessKey } : {}),
  };
}
