/**
 * A real daemon on the test supervisor, for tests, the harness and benchmarks: a private state
 * directory, a scratch cgroup of its own under this machine's cgroup2 mount (removed afterwards,
 * nothing else touched), an images directory with one test image, and a fresh API key.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmdirSync, rmSync, statfsSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Logger } from '../../../lib/log.js';
import { startDaemon, type Preflight, type RunningDaemon, type ServeOptions } from '../../index.js';
import { testSupervisorLauncher } from './launcher.js';

const CGROUP2_MAGIC = 0x63677270;
export const TEST_IMAGE = 'test';

/** This machine's cgroup v2 mount, or why there is none to test with. */
export function cgroup2Mount(): { path: string } | { skip: string } {
  for (const line of readFileSync('/proc/mounts', 'utf8').split('\n')) {
    const [, path, type] = line.split(' ');
    if (type === 'cgroup2' && path && statfsSync(path).type === CGROUP2_MAGIC) {
      if (!existsSync(join(path, 'cgroup.kill')) && !existsSync(join(path, 'cgroup.procs'))) continue;
      return { path };
    }
  }
  return { skip: 'no cgroup v2 mount on this machine' };
}

/** The test preflight: a cgroup2 directory where children can be made and killed (no controllers needed). */
export const testPreflight: Preflight = async (root) => {
  if (statfsSync(root).type !== CGROUP2_MAGIC) return [`${root}: not cgroup2`];
  const probe = join(root, `preflight-${randomBytes(4).toString('hex')}`);
  mkdirSync(probe);
  const ok = existsSync(join(probe, 'cgroup.kill'));
  rmdirSync(probe);
  return ok ? [] : [`${root}: no cgroup.kill`];
};

export interface Fixture {
  root: string;
  state: string;
  imagesDir: string;
  cgroupRoot: string;
  apiKey: string;
  options: ServeOptions;
  start(overrides?: Partial<ServeOptions>): Promise<RunningDaemon>;
  /** Kills whatever is left in the scratch cgroup and removes it and the directories. */
  cleanup(): Promise<void>;
}

export function writeTestImage(imagesDir: string, key = TEST_IMAGE): void {
  const rootfs = join(imagesDir, '..', 'rootfs');
  mkdirSync(rootfs, { recursive: true });
  writeFileSync(join(imagesDir, `${key}.json`), JSON.stringify({ rootfs, entrypoint: ['/sbin/sandbox-guest', 'bootstrap', '--'], cmd: ['sleep', 'infinity'], env: { PATH: '/usr/local/bin:/usr/bin:/bin' } }));
}

export function makeFixture(cgroupMount: string, log = new Logger('error')): Fixture {
  // Short: socket paths live below the state directory.
  const root = mkdtempSync('/tmp/sbd-');
  const state = join(root, 's');
  const imagesDir = join(root, 'images');
  mkdirSync(imagesDir);
  writeTestImage(imagesDir);
  sweepStaleCgroups(cgroupMount);
  const cgroupRoot = join(cgroupMount, `${CGROUP_PREFIX}${randomBytes(6).toString('hex')}`);
  mkdirSync(cgroupRoot);
  const apiKey = randomBytes(32).toString('hex');
  const options: ServeOptions = {
    imagesDir: { path: imagesDir, input: '--images-dir' },
    cgroupRoot,
    listen: '127.0.0.1:0',
    state,
    maxSandboxes: 32,
    cpuMillis: 4000,
    memoryBytes: 8 * 2 ** 30,
    maxTimeoutSeconds: 86400,
    apiKey,
  };
  return {
    root,
    state,
    imagesDir,
    cgroupRoot,
    apiKey,
    options,
    start: (overrides = {}) => startDaemon({ ...options, ...overrides }, { launcher: testSupervisorLauncher, preflight: testPreflight }, log),
    cleanup: async () => {
      if (existsSync(cgroupRoot)) {
        writeFileSync(join(cgroupRoot, 'cgroup.kill'), '1');
        for (let i = 0; i < 100 && readFileSync(join(cgroupRoot, 'cgroup.events'), 'utf8').includes('populated 1'); i++) await sleep(50);
        removeTree(cgroupRoot);
      }
      rmSync(root, { recursive: true, force: true });
    },
  };
}

const CGROUP_PREFIX = 'sandboxd-test-';
/** A test's scratch cgroup is this old at most while its test runs. */
const STALE_CGROUP_MS = 60 * 60 * 1000;

/**
 * Removes the scratch cgroups of test runs that were killed before their cleanup (an interrupted
 * suite): only empty ones, an hour old, so a run going on beside this one keeps its own.
 */
function sweepStaleCgroups(cgroupMount: string): void {
  for (const name of readdirSync(cgroupMount)) {
    if (!name.startsWith(CGROUP_PREFIX)) continue;
    const dir = join(cgroupMount, name);
    try {
      if (Date.now() - statSync(dir).mtimeMs < STALE_CGROUP_MS || readFileSync(join(dir, 'cgroup.events'), 'utf8').includes('populated 1')) continue;
      removeTree(dir);
    } catch {
      // Gone meanwhile, or still in use below: not ours to force.
    }
  }
}

function removeTree(dir: string): void {
  for (const entry of readdirSync(dir, { withFileTypes: true })) if (entry.isDirectory()) removeTree(join(dir, entry.name));
  rmdirSync(dir);
}
