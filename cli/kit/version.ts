import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

let cached: string | undefined;

/** The product version from the repository's package.json, found by walking up from this module. */
export function productVersion(): string {
  if (cached !== undefined) return cached;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { version?: string; bin?: unknown };
      if (pkg.bin !== undefined && typeof pkg.version === 'string') return (cached = pkg.version);
    } catch {
      // not here; keep walking up
    }
    const parent = dirname(dir);
    if (parent === dir) return (cached = '0.0.0');
    dir = parent;
  }
}
