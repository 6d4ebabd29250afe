/**
 * The state directory's exclusive lock, held for the daemon's life.
 *
 * Node has no flock(2); an abstract Unix socket is the operating system's equivalent here: a
 * name in the kernel's abstract namespace can be bound by one process at a time and is released
 * by the kernel when that process ends, however it ends (kill -9 included), so there is never a
 * stale lock to clear. The name is derived from the directory's device and inode, so two spellings
 * of one path (symlinks, bind mounts) are one lock, and a directory replaced under the same name
 * is another.
 */
import { createServer, type Server } from 'node:net';
import { statSync } from 'node:fs';
import { ConflictError } from '../../lib/errors.js';

export interface StateLock {
  release(): Promise<void>;
}

export function lockName(dir: string): string {
  const st = statSync(dir, { bigint: true });
  return `\0sandboxd-state-${st.dev}-${st.ino}`;
}

export async function lockStateDirectory(dir: string): Promise<StateLock> {
  const server: Server = createServer((socket) => socket.destroy());
  await new Promise<void>((resolve, reject) => {
    server.once('error', (error: NodeJS.ErrnoException) => {
      if (error.code === 'EADDRINUSE') reject(new ConflictError(`state directory busy: ${dir} is locked by another sandboxd`));
      else reject(error);
    });
    server.listen(lockName(dir), () => resolve());
  });
  // The lock must not keep the event loop alive on its own.
  server.unref();
  return { release: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}
