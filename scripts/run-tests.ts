/**
 * The whole test suite: the type check, every uvu test file (each in its own process, two at
 * a time), and `cargo test` for the Rust workspace. Ends with one line `N passed, N failed`
 * (`, N skipped` when some were), and exits non-zero when anything failed.
 *
 *   node dist/scripts/run-tests.js [--tier default|slow|all] [PATH_FILTER...]
 *
 * Tiers: test files named `*.slow.test.ts` are the slow tier, run only with `--tier slow|all`.
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO = join(fileURLToPath(import.meta.url), '..', '..', '..');
const DIST = join(REPO, 'dist');
const FILE_TIMEOUT_MS = 15 * 60_000;

interface Tally {
  passed: number;
  failed: number;
  skipped: number;
}
const total: Tally = { passed: 0, failed: 0, skipped: 0 };

interface Outcome {
  code: number | null;
  output: string;
  ms: number;
}

function run(command: string, args: string[], cwd = REPO): Promise<Outcome> {
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1' } });
    let output = '';
    const collect = (chunk: Buffer): void => void (output += chunk.toString('utf8'));
    child.stdout.on('data', collect);
    child.stderr.on('data', collect);
    const timer = setTimeout(() => {
      output += `\n[killed after ${FILE_TIMEOUT_MS / 60_000} minutes]\n`;
      child.kill('SIGKILL');
    }, FILE_TIMEOUT_MS);
    child.on('error', (error) => (output += `${error.message}\n`));
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output, ms: Date.now() - started });
    });
  });
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

async function typescriptTests(tier: string, filters: string[]): Promise<void> {
  const files = findTestFiles(DIST, tier).filter((f) => filters.length === 0 || filters.some((p) => f.includes(p)));
  const queue = [...files];
  const worker = async (): Promise<void> => {
    for (let file = queue.shift(); file; file = queue.shift()) {
      const outcome = await run(process.execPath, [file]);
      const tally = uvuTally(outcome.output);
      // A file that registers no test, or never calls test.run(), would pass having checked nothing.
      if (outcome.code === 0 && tally.passed + tally.failed + tally.skipped === 0) {
        tally.failed = 1;
        outcome.output += '\n[no test ran: a test file registers its tests and ends with test.run()]\n';
      }
      report(relative(DIST, file).replace(/\.js$/, '.ts'), tally, outcome);
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
await typescriptTests(tier, args.filter((a) => !a.startsWith('vmm-rs')));
if (rustOnly) await rustTests(tier);

const skipped = total.skipped ? `, ${total.skipped} skipped` : '';
console.log(`\n${total.passed} passed, ${total.failed} failed${skipped}`);
process.exitCode = total.failed > 0 ? 1 : 0;
