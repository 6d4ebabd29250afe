/** Secrets: fresh random tokens, and comparison in constant time whatever the lengths. */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

export function newToken(): string {
  return randomBytes(32).toString('hex');
}

/** Hashing first makes both sides one length, so neither the content nor the length leaks through timing. */
export function secretEquals(given: string, expected: string): boolean {
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b);
}
