/**
 * Where an export stages its output until it is through, and the removal of what killed exports
 * (kill -9, a power cut) left there, which nothing else would ever remove. A staging is a scratch
 * directory owned by its process (lib/owned-scratch.ts) holding `content`, the file or the directory
 * of files being written, and is named as a temporary of the place it is for, where the next export
 * to that place looks (`removeKilledExports`, `stageForUpload`):
 *
 *   .<name>.tmp-<random>/                  beside a file target or a new directory target
 *   <dir>/.trajstore-export.tmp-<random>/  inside an existing directory target
 *   $XDG_CACHE_HOME/trajstore/exports/trajstore-export.tmp-<random>/
 *                                          for an object-store target, uploaded from there: on disk
 *                                          (a $TMPDIR is often a tmpfs, a share of memory, where a
 *                                          large export would not fit)
 *
 * A staging goes only once its owner no longer runs, so an export at work (or stopped, or on another
 * machine sharing the directory) keeps its own.
 */
import { readdirSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { cacheHome } from '../../lib/config.js';
import { hiddenTempSiblingOf, randomSuffix, TEMP_MARKER, tempTargetOf } from '../../lib/durable.js';
import { makeOwnedScratch, removeIfAbandoned } from '../../lib/owned-scratch.js';

export interface Staging {
  /** Where the export writes: the file, or the directory of files (made by the caller). */
  readonly content: string;
  /** Removes the staging and whatever is left in it. */
  remove(): void;
}

const INSIDE = '.trajstore-export';
const UPLOAD = 'trajstore-export';

function stageAt(dir: string): Staging {
  makeOwnedScratch(dir);
  return { content: join(dir, 'content'), remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Removes the abandoned temporaries of each of `names` in `parent` (`<name>.tmp-<random>`), reading `parent` once. */
function removeAbandonedTemporaries(parent: string, ...names: string[]): void {
  let entries: string[];
  try {
    entries = readdirSync(parent);
  } catch {
    return;
  }
  for (const entry of entries) {
    const of = tempTargetOf(entry);
    if (of !== undefined && names.includes(of)) removeIfAbandoned(join(parent, entry));
  }
}

/**
 * Removes what killed exports to `target` left: the stagings beside it, inside it when it is a
 * directory, and the visible `<name>.tmp-<random>` file that exports to a file wrote before they
 * staged in an owned directory (no owner: it goes once an hour old).
 */
export function removeKilledExports(target: string): void {
  removeAbandonedTemporaries(dirname(target), `.${basename(target)}`, basename(target));
  removeAbandonedTemporaries(target, INSIDE);
}

/** A staging beside `target` (a file, or a directory not there yet), renamed to it by the commit. */
export function stageBeside(target: string): Staging {
  return stageAt(hiddenTempSiblingOf(target));
}

/** A staging inside the existing directory `dir`: a rename from beside it could cross filesystems (a mount point). */
export function stageInside(dir: string): Staging {
  return stageAt(join(dir, `${INSIDE}${TEMP_MARKER}${randomSuffix()}`));
}

/** A staging in the cache for an upload, after removing those of killed exports. */
export function stageForUpload(env: NodeJS.ProcessEnv): Staging {
  const dir = join(cacheHome(env), 'trajstore', 'exports');
  removeAbandonedTemporaries(dir, UPLOAD);
  return stageAt(join(dir, `${UPLOAD}${TEMP_MARKER}${randomSuffix()}`));
}
