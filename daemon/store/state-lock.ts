/**
 * The state directory's exclusive lock, held for the daemon's life.
 *
 * Node has no flock(2); an abstract Unix socket is the operating system's equivalent here: a
 * name in the kernel's abstract namespace can be bound by one process at a time and is released
 * by the kernel when that process ends, however it ends (kill -9 included), so there is never a
 * stale lock to clear. The name is derived from the directory's device and inode, so two spellings
 * of one path (symlinks, bind mounts) are one lock, and a directory replaced under the same name
 * is another. The holder answers a connection with its process id, so that a refused daemon can
 * name it.
 */
import { connect, createServer, type Server } from 'node:net';
import { statSync } from 'node:fs';
import { ConflictError } from '../../lib/errors.js';

export interface StateLock {
  release(): Promise<void>;
}

export function lockName(dir: string): string {
  const st = statSync(dir, { bigint: true });
  return `\0sandboxd-state-${st.dev}-${st.ino}`;
}

const HOLDER_ANSWER_MS = 1_000;

/** The holder's process id as it answers on the lock's name, or undefined when it does not (in time). */
function holderPid(name: string): Promise<number | undefined> {
  return new Promise((resolve) => {
    const socket = connect(name);
    let text = '';
    const done = (): void => {
      clearTimeout(timer);
      socket.destroy();
      const pid = /^pid (\d{1,10})\n/.exec(text)?.[1];
      resolve(pid === undefined ? undefined : Number(pid));
    };
    const timer = setTimeout(done, HOLDER_ANSWER_MS);
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => {
      text += chunk;
      if (text.includes('\n') || text.length > 32) done();
    });
    socket.once('error', done);
    socket.once('end', done);
  });
}

export async function lockStateDirectory(dir: string): Promise<StateLock> {
  const name = lockName(dir);
  const server: Server = createServer((socket) => {
    socket.on('error', () => undefined);
    socket.end(`pid ${process.pid}\n`);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EADDRINUSE') return reject(error);
      void holderPid(name).then((pid) => {
        const holder = pid === undefined ? 'another sandboxd' : `sandboxd process ${pid}`;
        reject(new ConflictError(`state directory busy: ${dir} is locked by ${holder}`, { hint: 'stop that daemon first, or give this one another --state' }));
      });
    });
    server.listen(name, () => resolve());
  });
  // The lock must not keep the event loop alive on its own.
  server.unref();
  return { release: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}
