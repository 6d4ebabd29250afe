/**
 * Opening a file a format's decoder reads beside its input (a sidecar, a parent log) by a name it
 * made up: only a regular file is read. Opened non-blocking, so that a FIFO of that name does not
 * hang the open (in the thread pool, where no signal reaches it) and a device is not read forever.
 */
import { constants } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';

/** `path` opened for reading when it is a regular file (its size is the handle's `stat`); undefined for anything else or none. */
export async function openRegularFile(path: string): Promise<{ handle: FileHandle; size: number } | undefined> {
  const handle = await open(path, constants.O_RDONLY | constants.O_NONBLOCK).catch(() => undefined);
  if (handle === undefined) return undefined;
  const stats = await handle.stat().catch(() => undefined);
  if (stats?.isFile()) return { handle, size: stats.size };
  await handle.close();
  return undefined;
}
