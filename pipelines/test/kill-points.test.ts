/**
 * Crash safety of the dataset writers at every kill point: append, replace, create and drop are
 * each killed (SIGKILL from the kill-point shim) right after each of their calls to rename, fsync,
 * fdatasync, unlink, rmdir and remove in turn; readers then see the old dataset or the new one, and
 * the next writer leaves nothing else (about two minutes in all). How: helpers/kill-points.ts.
 */
import { test } from 'uvu';
import { SCENARIOS, bench, checkKillPoint, commitOf, killPoints } from './helpers/kill-points.js';

for (const scenario of SCENARIOS) {
  test(`${scenario.name}: killed after each of its calls`, async () => {
    const b = await bench(scenario);
    const calls = await killPoints(scenario, b);
    const commit = commitOf(scenario, calls);
    process.stdout.write(`${scenario.name}: ${calls.length} kill points, commit at call ${commit}\n`);
    for (const point of calls) await checkKillPoint(scenario, b, point, commit);
  });
}

test.run();
