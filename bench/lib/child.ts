/**
 * Child processes of a benchmark (actor nodes, servers): started with this Node.js, their stderr passed
 * through, and killed (SIGKILL) when the benchmark's process exits, however it ends.
 */
import { spawn, type ChildProcess } from 'node:child_process';

const children = new Set<ChildProcess>();
process.on('exit', killChildren);

/** Kills every child still running (SIGKILL). */
export function killChildren(): void {
  for (const c of children) c.kill('SIGKILL');
}

export interface Child {
  proc: ChildProcess;
  /** What `ready` matched in the child's stdout. */
  match: RegExpExecArray;
}

/** `node <args>`; resolves once its stdout matches `ready`, rejects if it exits first. */
export function startChild(args: string[], ready: RegExp): Promise<Child> {
  const proc = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  children.add(proc);
  proc.once('exit', () => children.delete(proc));
  let out = '';
  return new Promise((resolve, reject) => {
    proc.stdout!.on('data', (c: Buffer) => {
      out += c;
      const match = ready.exec(out);
      if (match) resolve({ proc, match });
    });
    proc.once('exit', (code) => reject(new Error(`${args.slice(0, 3).join(' ')} exited (${code}) before it was ready: ${out}`)));
  });
}
