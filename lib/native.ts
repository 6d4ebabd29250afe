/**
 * The project's optional Node-API modules (built by scripts/build-native.sh into dist/): loaded once
 * from the installation, since the code asking may run from a start-up bundle in dist/bin/; a module
 * that is not built (another libc, a build without gcc) is undefined, and its caller does without.
 */
import { createRequire } from 'node:module';
import { distPath } from './install.js';

const loaded = new Map<string, unknown>();

/** `dist/<parts>` as a Node-API module, or undefined where it does not load. */
export function optionalNative<T>(...parts: string[]): T | undefined {
  const path = distPath(...parts);
  if (!loaded.has(path)) {
    let module: unknown;
    try {
      module = createRequire(import.meta.url)(path);
    } catch {
      module = undefined;
    }
    loaded.set(path, module);
  }
  return loaded.get(path) as T | undefined;
}
