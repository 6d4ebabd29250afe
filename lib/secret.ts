/** Comparing secrets (API keys, tokens) in constant time, whatever their lengths. */
import { createHash, timingSafeEqual } from 'node:crypto';

/** Hashing first makes both sides one length, so neither the content nor the length leaks through timing. */
export function secretEquals(given: string, expected: string): boolean {
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b);
}
