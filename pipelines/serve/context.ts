/** What every route of `serve` is given: the mounts, and where to trace. */
import type { Logger } from '../../lib/log.js';
import type { Mounts } from './mounts.js';

export interface ServeContext {
  mounts: Mounts;
  log: Logger;
}
