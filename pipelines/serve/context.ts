/** What every route of `serve` is given: the mounts, the thread their SQL runs on, and where to trace. */
import type { Logger } from '../../lib/log.js';
import type { SqlThread } from '../search/sql/thread/client.js';
import type { Mounts } from './mounts.js';

export interface ServeContext {
  mounts: Mounts;
  /** Where query and find run their statements, one at a time, off the event loop. */
  sql: SqlThread;
  log: Logger;
}
