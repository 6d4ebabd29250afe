/**
 * A path the user gave, with how messages name it: its flag (`--images-dir`), the configuration
 * line it came from (`/etc/sandboxd.toml:1 (images_dir)`) or the default it fell back to; an
 * error then names the input the user can act on, never a flag they did not pass.
 */
import { existsSync, statSync } from 'node:fs';

export interface PathInput {
  path: string;
  input: string;
}

/** `<input> <path>: no such directory` (or `not a directory`); undefined for a directory. */
export function directoryProblem({ path, input }: PathInput): string | undefined {
  if (!existsSync(path)) return `${input} ${path}: no such directory`;
  if (!statSync(path).isDirectory()) return `${input} ${path}: not a directory`;
  return undefined;
}
