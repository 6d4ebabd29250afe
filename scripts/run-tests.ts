/**
 * The whole test suite: the type check, every uvu test file (each in its own process, two at
 * a time), and `cargo test` for the Rust workspace. Ends with one line `N passed, N failed`
 * (`, N skipped` when some were), and exits non-zero when anything failed.
 *
 *   node dist/scripts/run-tests.js [--tier default|slow|all] [PATH_FILTER | FILE.js ...]
 *
 * Tiers: test files named `*.slow.test.ts` are the slow tier, run only with `--tier slow|all`.
 * A PATH_FILTER picks the test files whose path contains it; a path to a `.js` file runs that file.
 *
 * Each command runs in a process group of its own (process-group.ts), stopped with everything it
 * started when it runs past TEST_FILE_TIMEOUT_MS (default 15 minutes) or when the runner is stopped
 * (Ctrl-C, SIGTERM: exit 130, 143; a second one kills at once).
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { killAllGroups, runGrouped, stopAllGroups, type Outcome } from './process-group.js';

const REPO = join(fileURLToPath(import.meta.url), '..', '..', '..');
const DIST = join(REPO, 'dist');
const TIMEOUT_ENV = 'TEST_FILE_TIMEOUT_MS';

/** TEST_FILE_TIMEOUT_MS, else 15 minutes. */
function fileTimeoutMs(): number {
  const text = process.env[TIMEOUT_ENV];
  if (text === undefined || text === '') return 15 * 60_000;
  const ms = Number(text);
  if (!Number.isSafeInteger(ms) || ms < 1) {
    console.error(`run-tests: invalid ${TIMEOUT_ENV} ${JSON.stringify(text)}: expected a whole number of milliseconds, at least 1`);
    process.exit(2);
  }
  return ms;
}
const FILE_TIMEOUT_MS = fileTimeoutMs();

/** The signal that stopped the runner: no command starts after it. */
let stoppedBy: NodeJS.Signals | undefined;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    // A second stop does not wait for the groups to end.
    if (stoppedBy) {
      killAllGroups();
      process.exit(signal === 'SIGTERM' ? 143 : 130);
    }
    stoppedBy = signal;
    stopAllGroups(signal);
  });
}

interface Tally {
  passed: number;
  failed: number;
  skipped: number;
}
const total: Tally = { passed: 0, failed: 0, skipped: 0 };

function run(command: string, args: string[], cwd = REPO): Promise<Outcome> {
  return runGrouped(command, args, { cwd, timeoutMs: FILE_TIMEOUT_MS });
}

function report(name: string, tally: Tally, outcome: Outcome): void {
  const ok = tally.failed === 0 && outcome.code === 0;
  if (!ok && tally.failed === 0) tally.failed = 1; // crashed before or after its tests ran
  total.passed += tally.passed;
  total.failed += tally.failed;
  total.skipped += tally.skipped;
  const counts = [`${tally.passed} passed`, tally.failed ? `${tally.failed} failed` : '', tally.skipped ? `${tally.skipped} skipped` : '']
    .filter(Boolean)
    .join(', ');
  console.log(`${ok ? 'ok  ' : 'FAIL'}  ${name}  (${counts}; ${(outcome.ms / 1000).toFixed(1)} s)`);
  if (!ok) console.log(outcome.output.replace(/^/gm, '    | '));
}

/** Test files in dist whose TypeScript source still exists (a deleted test leaves stale output). */
function findTestFiles(dir: string, tier: string, found: string[] = []): string[] {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) findTestFiles(path, tier, found);
    else if (entry.name.endsWith('.test.js')) {
      const slow = entry.name.endsWith('.slow.test.js');
      const wanted = tier === 'all' || (tier === 'slow') === slow;
      if (wanted && existsSync(join(REPO, relative(DIST, path)).replace(/\.js$/, '.ts'))) found.push(path);
    }
  }
  return found.sort();
}

/** uvu prints `Total: N`, `Passed: N`, `Skipped: N` at the end of each file. */
function uvuTally(output: string): Tally {
  const count = (label: string): number => Number(new RegExp(`${label}:\\s+(\\d+)`).exec(output)?.[1] ?? 0);
  const passed = count('Passed');
  const skipped = count('Skipped');
  return { passed, skipped, failed: Math.max(count('Total') - passed - skipped, 0) };
}

async function typecheck(): Promise<void> {
  const outcome = await run(join(REPO, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.json', '--noEmit']);
  report('typecheck (tsc --noEmit)', { passed: outcome.code === 0 ? 1 : 0, failed: outcome.code === 0 ? 0 : 1, skipped: 0 }, outcome);
}

/** The arguments that are paths to `.js` files, run as they are whatever their names. */
const isScript = (arg: string): boolean => arg.endsWith('.js') && existsSync(arg) && statSync(arg).isFile();

async function typescriptTests(tier: string, filters: string[]): Promise<void> {
  const scripts = filters.filter(isScript).map((arg) => resolve(arg));
  const patterns = filters.filter((arg) => !isScript(arg));
  const found = patterns.length === 0 && scripts.length > 0 ? [] : findTestFiles(DIST, tier).filter((f) => patterns.length === 0 || patterns.some((p) => f.includes(p)));
  const queue = [...scripts, ...found];
  const worker = async (): Promise<void> => {
    for (let file = queue.shift(); file && !stoppedBy; file = queue.shift()) {
      const outcome = await run(process.execPath, [file]);
      const tally = uvuTally(outcome.output);
      // A file that registers no test, or never calls test.run(), would pass having checked nothing.
      if (outcome.code === 0 && tally.passed + tally.failed + tally.skipped === 0) {
        tally.failed = 1;
        outcome.output += '\n[no test ran: a test file registers its tests and ends with test.run()]\n';
      }
      report(file.startsWith(DIST) ? relative(DIST, file).replace(/\.js$/, '.ts') : file, tally, outcome);
    }
  };
  await Promise.all(Array.from({ length: Math.min(availableParallelism(), 4) }, worker));
}

/** Rust's slow tier is its `#[ignore]`d tests (a real kernel boot, say). */
const RUST_TIER_ARGS: Record<string, string[]> = { default: [], slow: ['--', '--ignored'], all: ['--', '--include-ignored'] };

async function rustTests(tier: string): Promise<void> {
  const args = ['test', '--quiet', '--locked', '--workspace', '--no-fail-fast', ...(RUST_TIER_ARGS[tier] ?? [])];
  const outcome = await run('cargo', args, join(REPO, 'vmm-rs'));
  const tally: Tally = { passed: 0, failed: 0, skipped: 0 };
  for (const m of outcome.output.matchAll(/test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored/g)) {
    tally.passed += Number(m[1]);
    tally.failed += Number(m[2]);
    tally.skipped += Number(m[3]);
  }
  // A Rust test that cannot run on this host (no usable /dev/kvm, say) prints
  // `SKIP: <test>: <reason>` and returns; libtest counted it as passed, so move it.
  const skips = outcome.output.match(/SKIP: [A-Za-z_][\w:]*: /g)?.length ?? 0;
  tally.passed -= skips;
  tally.skipped += skips;
  report('vmm-rs (cargo test)', tally, outcome);
}

const args = process.argv.slice(2);
const tierAt = args.indexOf('--tier');
const tier = tierAt >= 0 ? (args.splice(tierAt, 2)[1] ?? 'default') : 'default';
if (!['default', 'slow', 'all'].includes(tier)) {
  console.error(`run-tests: unknown --tier ${tier} (default, slow or all)`);
  process.exit(2);
}
const rustOnly = args.length === 0 || args.some((a) => a.startsWith('vmm-rs'));

await typecheck();
if (!stoppedBy) await typescriptTests(tier, args.filter((a) => !a.startsWith('vmm-rs')));
if (rustOnly && !stoppedBy) await rustTests(tier);

const skipped = total.skipped ? `, ${total.skipped} skipped` : '';
console.log(`\n${total.passed} passed, ${total.failed} failed${skipped}`);
if (stoppedBy) console.log(`stopped (${stoppedBy}): the commands running were stopped with what they started, the rest not run`);
process.exitCode = stoppedBy ? (stoppedBy === 'SIGTERM' ? 143 : 130) : total.failed > 0 ? 1 : 0;
