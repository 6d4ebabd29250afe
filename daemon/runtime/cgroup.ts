/**
 * Each sandbox's cgroup v2 directory: made with its hard limits, bound to its device and inode
 * and to the boot, and cleaned up by `cgroup.kill` on that very directory, never by a process id.
 */
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, rmdirSync, statSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { currentBootId } from '../../lib/process.js';
import type { CgroupBinding } from '../store/record.js';

export const PIDS_MAX = 512;

export interface Limits {
  cpuMillis: number;
  memoryBytes: number;
}

/** The limit files and their contents: `cpu.max` in 100 ms periods, memory without swap, one OOM group. */
export function limitFiles(limits: Limits): [string, string][] {
  return [
    ['cpu.max', `${limits.cpuMillis * 100} 100000`],
    ['memory.max', String(limits.memoryBytes)],
    ['memory.swap.max', '0'],
    ['memory.oom.group', '1'],
    ['pids.max', String(PIDS_MAX)],
  ];
}

function bootId(): string {
  const id = currentBootId();
  if (id === null) throw new Error('/proc/sys/kernel/random/boot_id is unreadable: cgroup bindings need the boot id');
  return id;
}

function writeFile(path: string, value: string): void {
  const fd = openSync(path, 'w');
  try {
    writeSync(fd, value);
  } finally {
    closeSync(fd);
  }
}

/**
 * Makes the cgroup and writes its limits. `limits: 'required'` (the product) fails on any limit
 * file that is missing; 'where-available' (the test supervisor on hosts without controllers)
 * writes those that exist.
 */
export function createCgroup(path: string, limits: Limits, mode: 'required' | 'where-available'): CgroupBinding {
  mkdirSync(path);
  try {
    for (const [file, value] of limitFiles(limits)) {
      const target = join(path, file);
      if (mode === 'where-available' && !existsSync(target)) continue;
      writeFile(target, value);
    }
  } catch (error) {
    rmdirSync(path);
    throw error;
  }
  const st = statSync(path, { bigint: true });
  return { path, device: String(st.dev), inode: String(st.ino), bootId: bootId() };
}

/** Whether the binding still names the directory it was made for: same boot, same device and inode. */
export function cgroupStatus(binding: CgroupBinding): 'same' | 'other-boot' | 'gone' | 'replaced' {
  if (binding.bootId !== bootId()) return 'other-boot';
  let st;
  try {
    st = statSync(binding.path, { bigint: true });
  } catch {
    return 'gone';
  }
  return String(st.dev) === binding.device && String(st.ino) === binding.inode ? 'same' : 'replaced';
}

/** Whether any process is left in the cgroup directory or below it. */
export function populated(path: string): boolean {
  return /^populated 1$/m.test(readFileSync(join(path, 'cgroup.events'), 'utf8'));
}

/**
 * Kills every process of the bound cgroup. The kill file is opened first and the directory's
 * identity checked after: a directory replaced before the open shows its new inode and is refused.
 */
export function killCgroup(binding: CgroupBinding): void {
  const fd = openSync(join(binding.path, 'cgroup.kill'), 'w');
  try {
    if (cgroupStatus(binding) !== 'same') throw new Error(`cgroup ${binding.path} is not the one the sandbox was bound to`);
    writeSync(fd, '1');
  } finally {
    closeSync(fd);
  }
}

/** Removes the cgroup directory's (empty) child directories and then itself. */
export function removeCgroup(path: string): void {
  const remove = (dir: string): void => {
    for (const line of readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n')) if (line) throw new Error(`cgroup ${dir} still has process ${line}`);
    for (const entry of statChildren(dir)) remove(join(dir, entry));
    rmdirSync(dir);
  };
  remove(path);
}

function statChildren(dir: string): string[] {
  // A cgroup's children are its only subdirectories.
  return readdirSync(dir, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name);
}
