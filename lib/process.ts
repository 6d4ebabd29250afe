/** Facts about other processes, for taking over what a killed command left behind. */
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';

/** Whether a process with this pid is running (as any user). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists but belongs to another user.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Who a process is, precisely enough to tell later whether it still runs: a pid alone is not, as
 * pids are reused (soon after a reboot, or on a busy machine). Linux adds the boot id (a process
 * of an earlier boot is gone) and the process's start time (a pid now running something else has
 * another one); elsewhere they are null and the pid decides alone.
 */
export interface ProcessIdentity {
  pid: number;
  hostname: string;
  boot_id: string | null;
  /** Start time in clock ticks since boot (/proc/<pid>/stat, field 22). */
  start: string | null;
}

function readText(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}

let bootId: string | null | undefined;

/** This boot's id (read once; it cannot change while we run), or null where Linux's is not there. */
export function currentBootId(): string | null {
  bootId ??= readText('/proc/sys/kernel/random/boot_id')?.trim() || null;
  return bootId;
}

function startOf(pid: number): string | null {
  // The command name (field 2) is in parentheses and may hold spaces and parentheses itself.
  const stat = readText(`/proc/${pid}/stat`);
  const fields = stat?.slice(stat.lastIndexOf(')') + 2).split(' ');
  return fields?.[19] ?? null;
}

export function currentProcess(): ProcessIdentity {
  return { pid: process.pid, hostname: hostname(), boot_id: currentBootId(), start: startOf(process.pid) };
}

/**
 * Whether the process an identity names still runs: `gone` only when that is certain;
 * `unknown` for a process of another machine (a shared filesystem), which cannot be asked.
 */
export function processState(identity: ProcessIdentity): 'running' | 'gone' | 'unknown' {
  if (identity.hostname !== hostname()) return 'unknown';
  const boot = currentBootId();
  if (identity.boot_id !== null && boot !== null && identity.boot_id !== boot) return 'gone';
  if (!processAlive(identity.pid)) return 'gone';
  const start = identity.start === null ? null : startOf(identity.pid);
  return start !== null && start !== identity.start ? 'gone' : 'running';
}
