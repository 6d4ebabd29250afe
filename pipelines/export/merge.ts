/**
 * An export into an existing directory, moved in all or nothing: the files staged inside it are
 * renamed to their places only once every place is known to take one (nothing in the way that the
 * export may not replace, a directory it can write, on the staging's filesystem). Otherwise the
 * export fails having moved nothing, where moving file by file until one failed (a subdirectory
 * named as a document's file, a read-only subdirectory) left a directory half merged.
 */
import { accessSync, constants, lstatSync, mkdirSync, renameSync, rmdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { ConflictError, InvalidInputError, pathError } from '../../lib/errors.js';
import { fsyncPath, renameExclusive } from '../../lib/durable.js';

/**
 * Checks the place in `dir` of the export's file `key` (`a/b.json`): every directory on its way
 * is a directory (not a file, nor a symbolic link that would lead elsewhere), and what is at the
 * place itself is nothing, or a regular file and `overwrite`. Returns whether the file replaces one,
 * and the deepest directory on its way that exists (the one its move writes into or under).
 */
export function checkDestination(dir: string, key: string, overwrite: boolean): { replaces: boolean; existing: string } {
  const segments = key.split('/');
  let path = dir;
  for (const [index, segment] of segments.entries()) {
    const parent = path;
    path = join(path, segment);
    let stat;
    try {
      stat = lstatSync(path, { throwIfNoEntry: false });
    } catch (error) {
      throw pathError(error, path);
    }
    if (!stat) return { replaces: false, existing: parent };
    if (index < segments.length - 1) {
      if (!stat.isDirectory()) throw new InvalidInputError(`${path}: not a directory (the export writes ${join(dir, key)})`, { hint: 'export into a new directory, or move it out of the way' });
      continue;
    }
    if (!overwrite) throw new ConflictError(`${path}: already exists`, { hint: 'export into a new directory, or add --overwrite' });
    if (!stat.isFile()) {
      throw new InvalidInputError(`${path}: not a regular file (a directory, device, FIFO, socket or symbolic link); only regular files are replaced`, { hint: 'export into a new directory, or move it out of the way' });
    }
  }
  return { replaces: true, existing: dirname(path) };
}

/** Checks that the directory `existing` takes new names, and on `device` (a rename cannot cross filesystems). */
function checkWritable(existing: string, device: number): void {
  try {
    accessSync(existing, constants.W_OK | constants.X_OK);
    if (statSync(existing).dev !== device) throw new InvalidInputError(`${existing}: on another filesystem than the export's staging; its files cannot be moved there at once`, { hint: 'export into a new directory, then move it' });
  } catch (error) {
    throw pathError(error, existing);
  }
}

function undo(step: () => void): void {
  try {
    step();
  } catch {
    // Reported through the error being undone.
  }
}

/** A file moved in: where it came from and went, and which file it is (to take back that one only). */
interface Moved {
  from: string;
  to: string;
  ino: number;
  dev: number;
}

/** Moves a file taken back to the staging: only while the place holds this export's own file (another's that replaced it with --overwrite stays). */
function takeBack({ from, to, ino, dev }: Moved): void {
  const there = lstatSync(to, { throwIfNoEntry: false });
  if (there?.ino === ino && there.dev === dev) renameSync(to, from);
}

/**
 * Moves the files `keys` staged under `from` into the existing directory `dir`, all or nothing, and
 * fsyncs the directories they went to. Every place is checked first (`checkDestination`, then that
 * its directory can be written). The missing directories are made and the files with new names moved
 * next, each only while its name is still free (`renameExclusive`): another export merging into `dir`
 * at the same time may have taken it since the check. If one of those fails (that, or a directory
 * that cannot grow on a full disk), the files moved are taken back and the directories made removed,
 * and a name taken meanwhile is exit 4. The files replacing others (--overwrite) go last: renaming
 * over a name takes no room. Two exports with --overwrite at once each replace files, and what is
 * left of a name is the last one's.
 */
export function moveInto(from: string, dir: string, keys: readonly string[], overwrite: boolean): void {
  const device = statSync(from).dev;
  const writable = new Set<string>();
  const plan = keys.map((key) => {
    const { replaces, existing } = checkDestination(dir, key, overwrite);
    if (!writable.has(existing)) {
      checkWritable(existing, device);
      writable.add(existing);
    }
    return { replaces, from: join(from, ...key.split('/')), to: join(dir, ...key.split('/')) };
  });
  const made = new Set<string>();
  const moved: Moved[] = [];
  try {
    for (const { to } of plan) {
      const missing: string[] = [];
      for (let up = dirname(to); up !== dir && !made.has(up) && lstatSync(up, { throwIfNoEntry: false }) === undefined; up = dirname(up)) missing.unshift(up);
      for (const directory of missing) {
        mkdirSync(directory);
        made.add(directory);
      }
    }
    for (const step of plan) {
      if (step.replaces) continue;
      const { ino, dev } = lstatSync(step.from);
      try {
        renameExclusive(step.from, step.to);
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        if (code === 'EEXIST') throw new ConflictError(`${step.to}: already exists: put there while this export moved its files in`, { hint: 'export into a new directory, or add --overwrite' });
        throw error;
      }
      moved.push({ ...step, ino, dev });
    }
  } catch (error) {
    // Back as it was: a file taken back into the staging frees the name it took; a directory made is empty again.
    // What cannot be undone stays, and the error that stopped the export is the one reported.
    for (const step of moved.reverse()) undo(() => takeBack(step));
    for (const directory of [...made].reverse()) undo(() => rmdirSync(directory));
    throw error;
  }
  for (const step of plan) if (step.replaces) renameSync(step.from, step.to);
  for (const directory of new Set([dir, ...plan.map((step) => dirname(step.to))])) fsyncPath(directory);
}
