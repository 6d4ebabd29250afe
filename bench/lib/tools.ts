/** Where the built tools are, for benchmarks that run them as a user would. */
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** dist/ of the build the benchmarks run from (this file is dist/bench/lib/tools.js). */
export const DIST = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The script of a tool (`trajstore`, `actorctl`, `sandboxd`) to run with `node`. */
export function toolScript(tool: string): string {
  return join(DIST, 'bin', `${tool}.js`);
}
