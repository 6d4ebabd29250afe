/**
 * The environment of a scratch home at `root`: HOME and the XDG configuration, cache and data
 * directories under it, so that a tool run in it reads no user's configuration and writes no
 * user's cache. Benchmarks and the CLI tests' sandboxes run trajstore so.
 */
import { join } from 'node:path';

export const homeEnv = (root: string): { HOME: string; XDG_CONFIG_HOME: string; XDG_CACHE_HOME: string; XDG_DATA_HOME: string } => ({
  HOME: root,
  XDG_CONFIG_HOME: join(root, 'cfg'),
  XDG_CACHE_HOME: join(root, 'cache'),
  XDG_DATA_HOME: join(root, 'data'),
});
