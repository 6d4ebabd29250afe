/** Walking a directory tree without following symbolic links. */
import { isUtf8 } from 'node:buffer';
import { readdirSync, type Dirent } from 'node:fs';
import { basename, dirname, join } from 'node:path';

/**
 * Calls `visit` for every entry under `root` that is not a directory, with its path relative to
 * `root` (`/`-separated) and its absolute path. A directory that is missing (or removed while the
 * walk is under way) holds nothing. A directory below `root` that cannot be read (no permission)
 * goes to `unreadable` when given, and the walk goes on; otherwise its error ends the walk. So does
 * one whose name may not be UTF-8 (it holds U+FFFD) and is missing: Node names the directory by a
 * decoding that replaced the bytes, which opens nothing (ENOENT), and its files must not vanish unsaid.
 */
export function walkFiles(
  root: string,
  visit: (relPath: string, entry: Dirent, path: string) => void,
  unreadable?: (relPath: string, path: string, error: Error) => void,
): void {
  const walk = (dir: string, prefix: string): void => {
    let entries: Dirent[];
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch (error) {
      const missing = (error as NodeJS.ErrnoException).code === 'ENOENT';
      if (missing && !(unreadable && basename(dir).includes('\ufffd'))) return;
      if (!unreadable || prefix === '') throw error;
      return unreadable(prefix.slice(0, -1), dir, error as Error);
    }
    for (const entry of entries) {
      const rel = `${prefix}${entry.name}`;
      if (entry.isDirectory()) walk(join(dir, entry.name), `${rel}/`);
      else visit(rel, entry, join(dir, entry.name));
    }
  };
  walk(root, '');
}

/**
 * The name of the entry at `path` as its bytes (`bad-\xff.json`), when that name is not UTF-8:
 * Node lists such a name with U+FFFD for each bad byte, a name that opens nothing (ENOENT), so a
 * tool can say why instead of "no such file". Undefined for any other name (one removed since).
 */
export function undecodableName(path: string): string | undefined {
  const name = basename(path);
  if (!name.includes('\ufffd')) return undefined;
  const raw = readdirSync(dirname(path), { encoding: 'buffer' }).find((bytes) => !isUtf8(bytes) && bytes.toString('utf8') === name);
  return raw && [...raw].map((byte) => (byte < 0x80 ? String.fromCharCode(byte) : `\\x${byte.toString(16)}`)).join('');
}
