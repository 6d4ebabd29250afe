/**
 * An exclusive lock around a read-modify-write of the configuration file, so that two commands
 * changing pins at the same time cannot lose one another's change (each rewrites the whole file).
 * The lock is a file `<config>.lock` holding the owner's pid. It appears whole: the pid is written
 * to a file of the owner's own and hard-linked to the lock's name, which fails if the lock exists, so
 * no command ever sees a lock without its owner (a lock seen empty and taken over as abandoned let
 * two commands in at once under load). A lock whose owner is no longer running (killed mid-change)
 * is taken over.
 */
import { link, mkdir, readFile, realpath, unlink, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ConfigLocation } from '../../lib/config.js';
import { UnavailableError } from '../../lib/errors.js';
import { processAlive } from '../../lib/process.js';

/** How long a command waits for another one to finish its change. */
const WAIT_MS = 10_000;
const RETRY_MS = 25;

/** The pid recorded in a lock file; undefined when there is none (the lock went meanwhile, or a foreign file). */
async function ownerOf(lockPath: string): Promise<number | undefined> {
  const text = await readFile(lockPath, 'utf8').catch(() => '');
  const pid = Number.parseInt(text, 10);
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

export async function withConfigLock<T>(location: ConfigLocation, change: () => Promise<T>): Promise<T> {
  // A symlinked configuration is locked where it really is, like it is written there.
  const path = await realpath(location.path).catch(() => location.path);
  const lockPath = `${path}.lock`;
  await mkdir(dirname(lockPath), { recursive: true, mode: 0o700 });
  const deadline = Date.now() + WAIT_MS;
  const mine = `${lockPath}.${process.pid}`;
  await writeFile(mine, `${process.pid}\n`, { mode: 0o600 });
  try {
    for (;;) {
      try {
        await link(mine, lockPath);
        break;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      }
      const owner = await ownerOf(lockPath);
      if (owner !== undefined && !processAlive(owner)) {
        await unlink(lockPath).catch(() => {});
        continue;
      }
      if (Date.now() > deadline) {
        throw new UnavailableError(`${path}: another trajstore command${owner ? ` (pid ${owner})` : ''} is changing the configuration`, {
          hint: `try again when it has finished; if no such command runs, remove ${lockPath}`,
        });
      }
      await sleep(RETRY_MS);
    }
  } finally {
    await unlink(mine).catch(() => {});
  }
  try {
    return await change();
  } finally {
    await unlink(lockPath).catch(() => {});
  }
}
