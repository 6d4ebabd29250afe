/**
 * The test runner (scripts/run-tests.ts), run as a user runs it, on tiny test files written here
 * (outside the suite: no `.test.js` under dist/): each file runs in a process group of its own and is
 * stopped with what it started when it runs past its time limit, when it exits leaving some of it
 * running, or when the runner itself is stopped; what the file and its children print is still read.
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool, type RunOptions } from '../../lib/testing/run-tool.js';
import { scratchDir } from '../../lib/testing/scratch.js';

const dir = scratchDir('run-tests');

// Every process a fixture started is killed at the end, whatever happened (a runner that fails this test leaves them running).
test.after(() => {
  for (const name of readdirSync(dir).filter((entry) => entry.endsWith('.pids'))) {
    for (const pid of JSON.parse(readFileSync(join(dir, name), 'utf8')) as number[]) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // Gone, as it should be.
      }
    }
  }
});

/**
 * A test file that starts a child printing a line and then sleeping for ten minutes (in the file's
 * process group, its output the file's), writes its own pid and the child's to `<file>.pids`, then
 * runs `then`.
 */
function fixture(name: string, then: string): string {
  const path = join(dir, name);
  const source = [
    "const { spawn } = require('node:child_process');",
    "const { writeFileSync } = require('node:fs');",
    "const child = spawn('sh', ['-c', 'echo the child speaks; exec sleep 600'], { stdio: ['ignore', 'inherit', 'inherit'] });",
    `writeFileSync(${JSON.stringify(`${path}.pids`)}, JSON.stringify([process.pid, child.pid]));`,
    "console.log('the file speaks');",
    then,
  ];
  writeFileSync(path, `${source.join('\n')}\n`);
  return path;
}

/** Waits for a fixture's pids (it started its child). */
async function pidsOf(file: string): Promise<number[]> {
  const path = `${file}.pids`;
  for (const since = Date.now(); !existsSync(path); await sleep(50)) assert.ok(Date.now() - since < 30_000, `${file} never started its child`);
  return JSON.parse(readFileSync(path, 'utf8')) as number[];
}

/** Whether a process runs: it exists and is not a zombie (one whose parent has not reaped it is gone all the same). */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

interface Run {
  code: number | null;
  stdout: string;
  ms: number;
}

/** Runs the runner on `args`; `stop`: a signal sent to it once `when` holds. Killed (code null) past 60 s: the old runner waited for the sleeping child. */
async function runner(args: string[], options: Pick<RunOptions, 'env' | 'stop'> = {}): Promise<Run> {
  const begun = Date.now();
  const { code, stdout } = await runTool('scripts/run-tests.js', args, { ...options, timeoutMs: 60_000, killSignal: 'SIGKILL' });
  return { code, stdout, ms: Date.now() - begun };
}

test('a file past its time limit (TEST_FILE_TIMEOUT_MS) fails, stopped with the child it started; what both printed is reported', async () => {
  const file = fixture('hangs.js', 'setInterval(() => {}, 1000);');
  const r = await runner([file], { env: { TEST_FILE_TIMEOUT_MS: '1000' } });
  assert.is(r.code, 1, r.stdout);
  assert.match(r.stdout, /FAIL\s+\S*hangs\.js/);
  assert.match(r.stdout, /stopped after 1 s, with the processes it started/);
  assert.match(r.stdout, /the file speaks/);
  assert.match(r.stdout, /the child speaks/);
  for (const pid of await pidsOf(file)) assert.not.ok(running(pid), `process ${pid} still runs`);
});

test('a file that passes and exits leaving its child running: the child is stopped and the file counted at once', async () => {
  const file = fixture('leaves.js', "console.log('  Total:     1\\n  Passed:    1\\n  Skipped:   0'); process.exit(0);");
  const r = await runner([file]);
  assert.is(r.code, 0, r.stdout);
  assert.match(r.stdout, /ok\s+\S*leaves\.js\s+\(1 passed/);
  assert.ok(r.ms < 30_000, `the runner took ${r.ms} ms`);
  for (const pid of await pidsOf(file)) assert.not.ok(running(pid), `process ${pid} still runs`);
});

test('the runner stopped (SIGINT, SIGTERM) stops the running file with its child, and exits 130 or 143', async () => {
  for (const [signal, code] of [['SIGINT', 130], ['SIGTERM', 143]] as const) {
    const file = fixture(`stopped-${signal}.js`, 'setInterval(() => {}, 1000);');
    const r = await runner([file], { stop: { signal, when: () => existsSync(`${file}.pids`) } });
    assert.is(r.code, code, r.stdout);
    assert.match(r.stdout, new RegExp(`stopped \\(${signal}\\)`));
    assert.ok(r.ms < 30_000, `the runner took ${r.ms} ms`);
    for (const pid of await pidsOf(file)) assert.not.ok(running(pid), `process ${pid} still runs`);
  }
});

test.run();
