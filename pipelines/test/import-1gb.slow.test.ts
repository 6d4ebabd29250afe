/**
 * Slow tier: a 1 GB input imported in bounded memory. The corpus (Storyline JSONL, generated on the
 * fly into a temporary directory and deleted after) is imported by the real CLI in a child process
 * whose peak RSS is read back; then a sample of the dataset is checked through the index.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { DIST_ROOT } from '../../lib/testing/run-tool.js';
import { generateCorpus } from '../../bench/import-export/corpus.js';
import { toolScript } from '../../bench/lib/tools.js';
import { openDataset } from '../dataset/open.js';

const GB = 1_000_000_000;
/** Issue 3: peak RSS under 300 MB for a 1 GB input. */
const RSS_LIMIT_MB = 300;

test('a 1 GB input imports with peak RSS under 300 MB', async () => {
  const work = mkdtempSync(join(tmpdir(), 'import-1gb-'));
  try {
    const corpus = generateCorpus(join(work, 'corpus'), GB, 'storyline');
    const rssFile = join(work, 'rss');
    const code = await new Promise<number | null>((resolve, reject) => {
      // The real command, its peak memory recorded at exit by the benchmarks' preload (bench/lib/rusage.ts).
      const preload = pathToFileURL(join(DIST_ROOT, 'bench', 'lib', 'rusage.js')).href;
      const child = spawn(process.execPath, [`--import=${preload}`, toolScript('trajstore'), 'import', '-f', corpus.dir, '-t', join(work, 'ds'), '-i', 'storyline'], {
        env: { ...process.env, BENCH_RSS_FILE: rssFile },
        stdio: ['ignore', 'ignore', 'inherit'],
      });
      child.on('error', reject);
      child.on('close', resolve);
    });
    assert.is(code, 0);
    const peakMb = (JSON.parse(readFileSync(rssFile, 'utf8')) as { maxRssKb: number }).maxRssKb / 1024;
    console.log(`1 GB import: peak RSS ${peakMb.toFixed(0)} MB`);
    assert.ok(peakMb < RSS_LIMIT_MB, `peak RSS ${peakMb.toFixed(0)} MB`);
    const ds = await openDataset(join(work, 'ds'));
    try {
      assert.is(ds.indexState, 'present');
      assert.is((ds.db.prepare('SELECT count(*) AS n FROM runs').get() as { n: number }).n, corpus.lines);
    } finally {
      ds.close();
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

test.run();
