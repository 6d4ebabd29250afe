/**
 * The daemon tests' scratch cgroups: a run killed before its cleanup leaves its cgroup behind; the
 * next fixture removes such leftovers (empty, an hour old), never a run's that is still going.
 */
import { mkdirSync, rmdirSync, utimesSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { cgroup2Mount, makeFixture } from './supervisor/fixture.js';

const mount = cgroup2Mount();

if ('skip' in mount) {
  test('SKIP: scratch cgroups', () => console.log(`SKIP: scratch-cgroups: ${mount.skip}`));
} else {
  test('a fixture removes the empty scratch cgroups killed runs left, and keeps young ones', async () => {
    const stale = join(mount.path, 'sandboxd-test-stale0000001');
    const young = join(mount.path, 'sandboxd-test-young0000001');
    const staleWithChild = join(mount.path, 'sandboxd-test-stale0000002');
    for (const dir of [stale, young, staleWithChild]) mkdirSync(dir);
    mkdirSync(join(staleWithChild, 'sandbox'));
    const twoHoursAgo = new Date(Date.now() - 2 * 60 * 60 * 1000);
    utimesSync(stale, twoHoursAgo, twoHoursAgo);
    utimesSync(staleWithChild, twoHoursAgo, twoHoursAgo);
    const fixture = makeFixture(mount.path);
    try {
      assert.not.ok(existsSync(stale), 'an empty hour-old leftover is removed');
      assert.not.ok(existsSync(staleWithChild), 'with its empty children');
      assert.ok(existsSync(young), 'a young one may be a run going on beside this one');
      assert.ok(existsSync(fixture.cgroupRoot));
    } finally {
      await fixture.cleanup();
      for (const dir of [join(staleWithChild, 'sandbox'), staleWithChild, stale, young]) if (existsSync(dir)) rmdirSync(dir);
    }
  });
}

test.run();
