/**
 * Import to object storage against import to a local directory, same corpus, same run:
 *
 *   node dist/bench/s3-import/run.js [--size-mb N] [--reps N] [--kind agentb-code|agenta]
 *
 * Generates N MB (default 100) of Claude Code style session JSONL (bench/import-export/corpus.ts),
 * starts the S3 test server on loopback (scripts/s3-test-server.py, installed by scripts/setup.sh),
 * then --reps times (default 3) runs `trajstore import` as a child process into a new local
 * directory (the baseline) and right after into a new `s3://` prefix, and reports the median of
 * each (MB/s of input) and their ratio; then the first read of the object-store dataset with an
 * empty cache (download and index build) against a read of the local one. The server is moto's,
 * one request at a time, on the same two cores: a figure of trajstore's overhead, not of S3's speed.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { S3TestServer } from '../lib/s3-server.js';
import { generateCorpus, type CorpusKind } from '../import-export/corpus.js';
import { percentile } from '../lib/percentile.js';
import { toolScript } from '../lib/tools.js';

const MB = 1_000_000;

function option(name: string): string | undefined {
  const at = process.argv.indexOf(name);
  return at === -1 ? undefined : process.argv[at + 1];
}

function timedCli(args: string[], env: NodeJS.ProcessEnv): number {
  const started = performance.now();
  const r = spawnSync(process.execPath, [toolScript('trajstore'), ...args], { env: { ...process.env, ...env }, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`trajstore ${args.join(' ')}: exit ${r.status}: ${r.stderr}`);
  return (performance.now() - started) / 1000;
}

const sizeMb = Number(option('--size-mb') ?? 100);
const reps = Number(option('--reps') ?? 3);
const kind = (option('--kind') ?? 'agentb-code') as CorpusKind;
const work = mkdtempSync(join(tmpdir(), 'bench-s3-import-'));
const server = await S3TestServer.start();
try {
  await server.createBucket('bench');
  const corpus = generateCorpus(join(work, 'corpus'), sizeMb * MB, kind);
  const env = { ...server.env, HOME: work, XDG_CACHE_HOME: join(work, 'cache'), XDG_CONFIG_HOME: join(work, 'config') };
  const local: number[] = [];
  const remote: number[] = [];
  for (let rep = 0; rep < reps; rep++) {
    local.push(timedCli(['import', '-f', corpus.dir, '-t', join(work, `local-${rep}`)], env));
    remote.push(timedCli(['import', '-f', corpus.dir, '-t', `s3://bench/ds-${rep}`], { ...env, XDG_CACHE_HOME: join(work, `cache-${rep}`) }));
  }
  const sql = 'SELECT count(*), sum(prompt_tokens) FROM dataset.steps';
  const localRead = timedCli(['query', join(work, 'local-0'), '--sql', sql], env);
  const coldRead = timedCli(['query', 's3://bench/ds-0', '--sql', sql], { ...env, XDG_CACHE_HOME: join(work, 'cache-cold') });
  const warmRead = timedCli(['query', 's3://bench/ds-0', '--sql', sql], { ...env, XDG_CACHE_HOME: join(work, 'cache-cold') });
  const mbps = (seconds: number): string => (corpus.bytes / MB / seconds).toFixed(1);
  const l = percentile(local, 50);
  const r = percentile(remote, 50);
  console.log(`corpus: ${(corpus.bytes / MB).toFixed(0)} MB of ${kind}, ${corpus.files} files; ${reps} reps, medians`);
  console.log(`import to a local directory (baseline): ${l.toFixed(2)} s, ${mbps(l)} MB/s`);
  console.log(`import to s3:// (test server on loopback): ${r.toFixed(2)} s, ${mbps(r)} MB/s; ratio to local ${(l / r).toFixed(2)}x`);
  console.log(`query, local dataset: ${localRead.toFixed(2)} s; s3 with an empty cache (download + index build): ${coldRead.toFixed(2)} s; s3 cached: ${warmRead.toFixed(2)} s`);
} finally {
  await server.stop();
  rmSync(work, { recursive: true, force: true });
}
