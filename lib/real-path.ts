/**
 * Where a path really is, for telling whether one path lies inside another: symbolic links and
 * `..` resolved, as the file system resolves them. A path not made yet is placed under its nearest
 * existing ancestor, so an output about to be created can be checked before anything is written.
 */
import { realpathSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from 'node:path';

export function realPathOf(path: string): string {
  const absolute = resolve(path);
  try {
    return realpathSync(absolute);
  } catch {
    const parent = dirname(absolute);
    return parent === absolute ? absolute : join(realPathOf(parent), basename(absolute));
  }
}

/** Whether `path` is `dir` or lies inside it, both resolved as realPathOf does. */
export function isInsideOrSame(path: string, dir: string): boolean {
  const rel = relative(realPathOf(dir), realPathOf(path));
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${sep}`) && !isAbsolute(rel));
}
