/** The SQLite extensions of `query` and `find` (watchdog.c, pragma-guard.c), built by scripts/build-native.sh next to this module's JavaScript. */
import { existsSync } from 'node:fs';
import { ToolError, ExitCode } from '../../../lib/errors.js';
import { distPath } from '../../../lib/install.js';

/** The path of an extension's shared object; a missing one (a checkout that was not built) is said so. */
export function sqlExtension(name: 'watchdog' | 'pragma-guard'): string {
  const path = distPath('pipelines', 'search', 'sql', `${name}.so`);
  if (!existsSync(path)) throw new ToolError(ExitCode.Internal, `the SQL extension ${path} is missing`, { hint: 'build it with `npm run build` (scripts/setup.sh does)' });
  return path;
}
