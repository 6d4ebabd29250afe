/**
 * Crash safety of the dataset writers, at representative kill points: for append, replace, create
 * and drop, the writer is killed (SIGKILL from the kill-point shim) right after it takes the lock,
 * just before and at its commit, when its clean-up starts and after it has released the
 * lock; readers then see the old dataset or the new one, and the next writer leaves nothing else.
 * Every kill point of every writer: kill-points.slow.test.ts (the slow tier). How: helpers/kill-points.ts.
 */
import { test } from 'uvu';
import { SCENARIOS, bench, checkKillPoint, commitOf, killPoints, representative } from './helpers/kill-points.js';

for (const scenario of SCENARIOS) {
  test(`${scenario.name}: killed at its lock, before and at its commit, in its clean-up and at its end`, async () => {
    const b = await bench(scenario);
    const calls = await killPoints(scenario, b);
    const commit = commitOf(scenario, calls);
    for (const point of representative(calls, commit)) await checkKillPoint(scenario, b, point, commit);
  });
}

test.run();
