/**
 * Crash safety of a sync batch at every kill point (slow tier: a few minutes): `sync --once` over a
 * dataset of small parts whose sources it converts again, so that one batch mirrors files, retires
 * and re-adds runs (the commit), writes its state, compacts the small parts and, with no grace
 * period, reclaims every superseded snapshot and part; killed right after each of its calls to
 * rename, fsync, fdatasync, unlink, rmdir and remove in turn. Readers then see the old documents or
 * the new ones, never a run twice, and the next writer leaves nothing else (helpers/kill-points.ts).
 */
import { test } from 'uvu';
import { SYNC_SCENARIO, bench, checkKillPoint, commitOf, killPoints } from './helpers/kill-points.js';

test('sync: killed after each of its calls', async () => {
  const b = await bench(SYNC_SCENARIO);
  const calls = await killPoints(SYNC_SCENARIO, b);
  const commit = commitOf(SYNC_SCENARIO, calls);
  process.stdout.write(`sync: ${calls.length} kill points, commit at call ${commit}\n`);
  for (const point of calls) await checkKillPoint(SYNC_SCENARIO, b, point, commit);
});

test.run();
