/** Fresh random tokens for sandboxes and their guest services. */
import { randomBytes } from 'node:crypto';

export function newToken(): string {
  return randomBytes(32).toString('hex');
}
