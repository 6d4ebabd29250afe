/**
 * The eviction the local caches share (pipelines/dataset/cache-bound.ts), on real files: least
 * recently used first, never the entry being opened nor one used in the last minute, stale scratch
 * swept, and the window between an eviction's reading of the entries' times and its removal.
 */
import { existsSync, mkdirSync, readdirSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { scratchDir } from '../../lib/testing/scratch.js';
import { cacheEntries, evictLeastRecentlyUsed, markUsed } from '../dataset/cache-bound.js';

/** A cache directory holding `names`, each of 100 bytes, last used `agoMs` before now. */
function cacheOf(names: string[], agoMs: number): string {
  const dir = join(scratchDir('cache-bound'), 'cache');
  mkdirSync(dir, { recursive: true });
  const past = new Date(Date.now() - agoMs);
  for (const name of names) {
    writeFileSync(join(dir, name), Buffer.alloc(100));
    utimesSync(join(dir, name), past, past);
  }
  return dir;
}

const sizeOf = (_path: string, stat: { size: number }): number => stat.size;

test('least recently used first, down to the bound; the entry being opened and those used in the last minute stay', () => {
  const dir = cacheOf(['a', 'b', 'c', 'd'], 10 * 60_000);
  markUsed(join(dir, 'c'));
  const old = new Date(Date.now() - 20 * 60_000);
  utimesSync(join(dir, 'b'), old, old);
  const entries = cacheEntries(dir, sizeOf);
  evictLeastRecentlyUsed(dir, entries, 400, 200, join(dir, 'd'));
  // b (oldest) then a go; c was used now, d is being opened.
  assert.equal(readdirSync(dir).sort(), ['c', 'd']);
});

test('scratch of a killed command (a temporary name) goes once stale, not before, and is never an entry', () => {
  const dir = cacheOf(['x.sqlite.tmp-0123456789ab', '.evicted.tmp-ba9876543210'], 2 * 60 * 60_000);
  writeFileSync(join(dir, 'y.sqlite.tmp-00112233aabb'), 'a rebuild at work');
  writeFileSync(join(dir, 'z.sqlite'), 'an index');
  const entries = cacheEntries(dir, sizeOf);
  assert.equal(entries.map((e) => e.path), [join(dir, 'z.sqlite')]);
  assert.equal(readdirSync(dir).sort(), ['y.sqlite.tmp-00112233aabb', 'z.sqlite']);
});

test('an entry marked used after the eviction read its time (a reader about to open it) is not removed', () => {
  const dir = cacheOf(['old', 'opening'], 10 * 60_000);
  const entries = cacheEntries(dir, sizeOf);
  // Another command marks it used, as it does right before it opens it, after the eviction read the times.
  markUsed(join(dir, 'opening'));
  evictLeastRecentlyUsed(dir, entries, 200, 0, join(dir, 'new'));
  assert.ok(existsSync(join(dir, 'opening')), 'the entry a reader is opening is there under its name');
  assert.not.ok(existsSync(join(dir, 'old')));
  assert.equal(readdirSync(dir), ['opening'], 'nothing else is left behind');
});

test.run();
