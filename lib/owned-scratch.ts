/**
 * Scratch directories that name the process writing them, so that a later command can remove what
 * a killed one left (kill -9, a crash, a power cut: nothing of the killed command runs to remove it)
 * and never what a live one is writing. The identity is `owner.json` inside the directory
 * (lib/process.ts: pid, boot and start time, as a pid alone is reused).
 */
import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { currentProcess, processState, type ProcessIdentity } from './process.js';

/** Scratch older than this without an owner belongs to a command that was killed (one at work writes it, or marks it, far more often). */
export const STALE_SCRATCH_MS = 60 * 60_000;

const OWNER = 'owner.json';

/**
 * Makes `dir` (a new name, and its missing parents) a scratch directory owned by this process. The
 * identity is read first, so that the directory goes without an owner (and then waits
 * STALE_SCRATCH_MS to be removed) for the two system calls between its making and its naming, not
 * for the reads of /proc; one made but not named (a full disk) is removed at once.
 */
export function makeOwnedScratch(dir: string): void {
  const owner = JSON.stringify(currentProcess());
  mkdirSync(dir, { recursive: true });
  try {
    writeFileSync(join(dir, OWNER), owner);
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
}

function ownerOf(dir: string): ProcessIdentity | undefined {
  try {
    const owner = JSON.parse(readFileSync(join(dir, OWNER), 'utf8')) as Partial<ProcessIdentity>;
    return typeof owner.pid === 'number' && typeof owner.hostname === 'string' ? (owner as ProcessIdentity) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether the scratch at `path` was left by a command that is gone: its owner no longer runs. One of
 * another machine (a directory shared over the network) cannot be asked and stays; one without a
 * readable owner (killed between making it and naming its owner, or left by a writer that names none)
 * is abandoned once untouched for STALE_SCRATCH_MS.
 */
function isAbandoned(path: string, now = Date.now()): boolean {
  const owner = ownerOf(path);
  if (owner) return processState(owner) === 'gone';
  const stat = statSync(path, { throwIfNoEntry: false });
  return stat !== undefined && now - stat.mtimeMs > STALE_SCRATCH_MS;
}

/** Removes the scratch at `path` if it is abandoned; one that is not ours to remove (another user's) stays. Says whether it went. */
export function removeIfAbandoned(path: string): boolean {
  if (!isAbandoned(path)) return false;
  try {
    rmSync(path, { recursive: true, force: true });
    return true;
  } catch {
    return false;
  }
}
