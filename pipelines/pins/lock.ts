/**
 * An exclusive lock around a read-modify-write of the configuration file, so that two commands
 * changing pins at the same time cannot lose one another's change (each rewrites the whole file).
 * The lock is a file `<config>.lock` created with O_EXCL and holding the owner's pid; a lock whose
 * owner is no longer running (killed mid-write) is taken over.
 */
import { constants } from 'node:fs';
import { mkdir, open, readFile, realpath, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ConfigLocation } from '../../lib/config.js';
import { UnavailableError } from '../../lib/errors.js';
import { processAlive } from '../../lib/process.js';

/** How long a command waits for another one to finish its change. */
const WAIT_MS = 10_000;
const RETRY_MS = 25;

/** The pid recorded in a lock file; undefined while its owner has not written it yet. */
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
  let unreadable = 0;
  for (;;) {
    try {
      const handle = await open(lockPath, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600);
      try {
        await handle.writeFile(`${process.pid}\n`);
      } finally {
        await handle.close();
      }
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const owner = await ownerOf(lockPath);
    // No pid for a while: its owner died between creating and writing it.
    unreadable = owner === undefined ? unreadable + 1 : 0;
    if ((owner !== undefined && !processAlive(owner)) || unreadable > 20) {
      await unlink(lockPath).catch(() => {});
      unreadable = 0;
      continue;
    }
    if (Date.now() > deadline) {
      throw new UnavailableError(`${path}: another trajstore command${owner ? ` (pid ${owner})` : ''} is changing the configuration`, {
        hint: `try again when it has finished; if no such command runs, remove ${lockPath}`,
      });
    }
    await sleep(RETRY_MS);
  }
  try {
    return await change();
  } finally {
    await unlink(lockPath).catch(() => {});
  }
}
