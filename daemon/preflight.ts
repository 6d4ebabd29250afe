/**
 * The startup preflight, with real writes: the cgroup root must be a cgroup2 mount, delegated to
 * us, with `cpu memory pids` enabled for its children, accept limits in a probe child and offer
 * `cgroup.kill`; and the VMM's own report (KVM API, capabilities, native or emulated) must be
 * clean. Every missing piece is its own problem; the daemon exits before binding if any is found.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmdirSync, statfsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { directoryProblem } from './path-input.js';
import { limitFiles } from './runtime/cgroup.js';

const run = promisify(execFile);
const CGROUP2_MAGIC = 0x63677270;
const REQUIRED_CONTROLLERS = ['cpu', 'memory', 'pids'];

export type Preflight = (cgroupRoot: string) => Promise<string[]>;

export function cgroupProblems(root: string): string[] {
  const notDirectory = directoryProblem({ path: root, input: '--cgroup-root' });
  if (notDirectory) return [notDirectory];
  if (statfsSync(root).type !== CGROUP2_MAGIC) return [`--cgroup-root ${root}: not a cgroup v2 hierarchy (an ordinary directory, or cgroup v1)`];
  const problems: string[] = [];
  const enabled = readFileSync(join(root, 'cgroup.subtree_control'), 'utf8').trim().split(/\s+/);
  for (const controller of REQUIRED_CONTROLLERS) {
    if (!enabled.includes(controller)) problems.push(`--cgroup-root ${root}: the ${controller} controller is not enabled for its children (cgroup.subtree_control)`);
  }
  const probe = join(root, `sandboxd-preflight-${randomUUID()}`);
  try {
    mkdirSync(probe);
  } catch (error) {
    return [...problems, `--cgroup-root ${root}: not delegated to this user (cannot create a child: ${(error as NodeJS.ErrnoException).code})`];
  }
  try {
    for (const [file, value] of limitFiles({ cpuMillis: 1000, memoryBytes: 64 * 1024 * 1024 })) {
      try {
        writeFileSync(join(probe, file), value);
      } catch (error) {
        problems.push(`--cgroup-root ${root}: cannot write ${file} in a child cgroup (${(error as NodeJS.ErrnoException).code})`);
      }
    }
    if (!existsSync(join(probe, 'cgroup.kill'))) problems.push(`--cgroup-root ${root}: cgroup.kill is not available (kernel 5.14 or newer needed)`);
  } finally {
    rmdirSync(probe);
  }
  return problems;
}

/** The VMM's `preflight` report: its `problems`, or why it could not be asked. */
export async function vmmProblems(vmm: string, cgroupRoot: string): Promise<string[]> {
  if (!existsSync(vmm)) return [`the VMM ${vmm} is not built (cd vmm-rs && cargo build --release -p sandbox-vmm)`];
  let stdout: string;
  try {
    stdout = (await run(vmm, ['preflight', '--cgroup-root', cgroupRoot])).stdout;
  } catch (error) {
    stdout = (error as { stdout?: string }).stdout ?? '';
    if (!stdout) return [`the VMM preflight failed: ${(error as Error).message}`];
  }
  const report = JSON.parse(stdout) as { problems?: unknown[] };
  return (report.problems ?? []).map((p) => `VMM: ${typeof p === 'string' ? p : JSON.stringify(p)}`);
}

/**
 * Both checks look at the cgroup root; when ours found problems, the VMM's about the same root are
 * left out: they say it again, some only as the bare path (`/srv/cg: No such file or directory`).
 */
export function productPreflight(vmm: string): Preflight {
  return async (cgroupRoot) => {
    const cgroup = cgroupProblems(cgroupRoot);
    const aboutTheRoot = (problem: string) => /cgroup/i.test(problem) || problem.includes(cgroupRoot);
    return [...cgroup, ...(await vmmProblems(vmm, cgroupRoot)).filter((p) => cgroup.length === 0 || !aboutTheRoot(p))];
  };
}
