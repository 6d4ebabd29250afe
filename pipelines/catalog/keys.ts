/**
 * A directory-service user's key pair: an access key (an identifier, stored as it is) and a secret
 * key (shown once, when issued; the ACL file keeps only a salted scrypt hash of it). Secrets are
 * compared in constant time, and a request with an unknown access key costs the same scrypt as
 * one with a known key, so timing tells nothing of which users exist.
 */
import { randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';

/** scrypt cost (N=2^14, r=8, p=1: about 16 MiB and tens of milliseconds per check; OWASP's floor is N=2^13 at r=8). */
const SCRYPT = { N: 16384, r: 8, p: 1 } as const;
const KEY_BYTES = 32;
const SALT_BYTES = 16;
const HASH_PREFIX = 'scrypt';

export interface IssuedKeys {
  accessKey: string;
  secretKey: string;
  /** What the ACL file stores: `scrypt$N$r$p$salt$hash` (base64url). */
  secretHash: string;
}

function derive(secret: string, salt: Buffer, options: ScryptOptions & { N: number; r: number; p: number }): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scrypt(secret, salt, KEY_BYTES, { ...options, maxmem: 128 * options.N * options.r * 2 }, (error, key) => (error ? reject(error) : resolve(key))),
  );
}

/** `TSAK` and 20 upper-case base32 characters: recognisable in a config file, never mistaken for the secret. */
function newAccessKey(): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
  return `TSAK${[...randomBytes(20)].map((b) => alphabet[b % 32]).join('')}`;
}

export async function issueKeys(): Promise<IssuedKeys> {
  const secretKey = `tssk_${randomBytes(KEY_BYTES).toString('base64url')}`;
  const salt = randomBytes(SALT_BYTES);
  const hash = await derive(secretKey, salt, SCRYPT);
  return { accessKey: newAccessKey(), secretKey, secretHash: [HASH_PREFIX, SCRYPT.N, SCRYPT.r, SCRYPT.p, salt.toString('base64url'), hash.toString('base64url')].join('$') };
}

/** Whether a stored hash has the shape `issueKeys` writes (checked when the ACL file is read). */
export function wellFormedHash(stored: string): boolean {
  const parts = stored.split('$');
  return parts.length === 6 && parts[0] === HASH_PREFIX && parts.slice(1, 4).every((n) => /^[1-9]\d{0,7}$/.test(n)) && /^[\w-]{16,}$/.test(parts[4] ?? '') && /^[\w-]{32,}$/.test(parts[5] ?? '');
}

/** A hash no secret matches, checked when the access key is unknown so that both cases cost the same. */
const DECOY = `${HASH_PREFIX}$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${Buffer.alloc(SALT_BYTES).toString('base64url')}$${Buffer.alloc(KEY_BYTES, 1).toString('base64url')}`;

/** Whether `secret` is the one `stored` was made from; `stored` undefined runs the same work and says no. */
export async function verifySecret(secret: string, stored: string | undefined): Promise<boolean> {
  const [, n, r, p, salt, hash] = (stored ?? DECOY).split('$');
  const expected = Buffer.from(hash ?? '', 'base64url');
  const actual = await derive(secret, Buffer.from(salt ?? '', 'base64url'), { N: Number(n), r: Number(r), p: Number(p) });
  return actual.length === expected.length && timingSafeEqual(actual, expected) && stored !== undefined;
}
