/**
 * Where the product is installed: the directory of its package.json (the one naming the tools'
 * `bin`), found by walking up from this module. It works from the compiled modules in dist/ and
 * from the start-up bundles in dist/bin/ alike, which a fixed number of `..` would not.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface Installation {
  root: string;
  version: string;
}

let found: Installation | undefined;

export function installation(): Installation {
  if (found) return found;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { version?: string; bin?: unknown };
      if (pkg.bin !== undefined && typeof pkg.version === 'string') return (found = { root: dir, version: pkg.version });
    } catch {
      // not here; keep walking up
    }
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`no package.json of the product above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
}

/**
 * A file of the compiled build (`dist/<parts>`): the worker threads' modules and the native parts,
 * which the start-up bundles in dist/bin/ reach there rather than next to themselves.
 */
export function distPath(...parts: string[]): string {
  return join(installation().root, 'dist', ...parts);
}
