/** A scratch home for CLI tests (removed when the test process exits): its own XDG directories, and trajstore run inside it. */
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { runTool } from '../../../lib/testing/run-tool.js';
import { scratchDir } from '../../../lib/testing/scratch.js';
import { homeEnv } from '../../../bench/lib/home-env.js';

export function sandbox(prefix: string) {
  const home = scratchDir(prefix);
  const env = homeEnv(home);
  const run = (args: string[], input?: string | Buffer) => runTool('trajstore', args, { env, cwd: home, ...(input !== undefined ? { input } : {}) });
  return { home, env, run, path: (...p: string[]) => join(home, ...p) };
}

/**
 * A sandbox whose trajstore runs as a user that file permissions bind. Root reads and writes
 * chmod-000 paths, so under root it runs as nobody (uid 65534), and the home (with what the test
 * wrote in it) is made nobody's before each run.
 */
export function unprivilegedSandbox(prefix: string) {
  const s = sandbox(prefix);
  const root = process.getuid?.() === 0;
  const run = (args: string[], input?: string | Buffer) => {
    if (root) spawnSync('chown', ['-R', '65534:65534', s.home]);
    return runTool('trajstore', args, { env: s.env, cwd: s.home, ...(root ? { uid: 65534, gid: 65534 } : {}), ...(input !== undefined ? { input } : {}) });
  };
  return { ...s, run };
}

/** Every file under a directory, relative, in byte order. */
export function filesUnder(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(d, e.name));
      else out.push(relative(dir, join(d, e.name)));
    }
  };
  walk(dir);
  return out.sort();
}
