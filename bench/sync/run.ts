/**
 * sync benchmark:
 *
 *   node dist/bench/sync/run.js [--files N] [--batches N] [--samples N] [--interval DURATION_MS] [--keep]
 *
 * Measures, in one run (Claude Code style session logs, bench/sync/run.ts writes them):
 * - latency: a resident `trajstore sync --interval 1000ms` (a process, as a user runs it) while
 *   lines are appended to live sessions at random moments; the time from a line's append to its
 *   marker being findable (the engine's `find`, polled every 20 ms), --samples times (default 8).
 *   Target: at most the interval plus one second;
 * - no-change rescan: the worker's tick over N files (default 10,000) that did not change (walk,
 *   stamps, comparison with the last scan: scan.ts), against the baseline of a bare recursive
 *   readdir + lstat of the same tree. Target: under one second;
 * - query after syncing: the same `find` on a dataset made by one import of the final logs, and on
 *   one made by --batches (default 1,000) sync batches, each bringing one more line (the engine's
 *   batches, in-process, with compaction as sync runs it). Target: within 1.5x.
 * Prints a report (Markdown) to stdout; --keep leaves the scratch directory.
 */
import { spawn } from 'node:child_process';
import { appendFileSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Logger } from '../../lib/log.js';
import { parseColumnFlags } from '../../pipelines/dataset/compact/paths.js';
import { FIND_DEFAULTS, find } from '../../pipelines/index.js';
import { runBatch, type SyncTarget } from '../../pipelines/sync/batch.js';
import { changesBetween, scanTree } from '../../pipelines/sync/scan.js';
import { claudeLine, sessionFile } from '../../pipelines/test/helpers/claude-log-writer.js';
import { percentile } from '../lib/percentile.js';
import { toolScript } from '../lib/tools.js';

function option(name: string, fallback: number): number {
  const at = process.argv.indexOf(name);
  return at === -1 ? fallback : Number(process.argv[at + 1]);
}

const files = option('--files', 10_000);
const batches = option('--batches', 1_000);
const samples = option('--samples', 8);
const intervalMs = option('--interval', 1_000);
const root = mkdtempSync(join(tmpdir(), 'bench-sync-'));
const rc = { config: { path: join(root, 'config.toml'), source: 'default' as const }, env: { ...process.env, HOME: root, XDG_CONFIG_HOME: join(root, 'cfg') } };
const quiet = new Logger('error');

async function findable(dataset: string, marker: string): Promise<number> {
  const started = performance.now();
  const result = await find(rc, { dataset, matches: [marker], ...FIND_DEFAULTS });
  if (result.matches.length === 0) return -1;
  return performance.now() - started;
}

/** The time from appending a line to finding it, through a resident sync process. */
async function latency(): Promise<number[]> {
  const src = join(root, 'live');
  const [to, convert] = [join(root, 'live-mirror'), join(root, 'live-ds')];
  for (let s = 0; s < 4; s++) {
    mkdirSync(join(src, 'project'), { recursive: true });
    writeFileSync(sessionFile(src, s), claudeLine(s, 0));
  }
  const child = spawn(process.execPath, [toolScript('trajstore'), 'sync', '--from', src, '--to', to, '--convert', convert, '--interval', `${intervalMs}ms`], { stdio: ['ignore', 'ignore', 'pipe'], env: rc.env });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const out: number[] = [];
  try {
    while (!/batch 1: .* ok/.test(stderr)) await sleep(20);
    for (let n = 1; n <= samples; n++) {
      await sleep(Math.random() * intervalMs);
      const s = n % 4;
      const appended = performance.now();
      appendFileSync(sessionFile(src, s), claudeLine(s, n));
      while ((await findable(convert, `marker-${s}-${n}`)) < 0) {
        if (performance.now() - appended > 30_000) throw new Error(`line ${n} not findable after 30 s:\n${stderr}`);
        await sleep(20);
      }
      out.push(performance.now() - appended);
    }
  } finally {
    child.kill('SIGTERM');
  }
  return out;
}

/** A bare recursive readdir + lstat: what any change detection must at least do. */
function bareWalk(dir: string): number {
  let n = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) n += bareWalk(path);
    else {
      lstatSync(path);
      n += 1;
    }
  }
  return n;
}

function rescan(): { tick: number; bare: number } {
  const tree = join(root, 'many');
  for (let i = 0; i < files; i++) {
    const dir = join(tree, `project-${Math.floor(i / 100)}`);
    if (i % 100 === 0) mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, `session-${i}.jsonl`), claudeLine(i, 0));
  }
  const ticks: number[] = [];
  const bare: number[] = [];
  let last = scanTree(tree);
  for (let rep = 0; rep < 5; rep++) {
    let started = performance.now();
    bareWalk(tree);
    bare.push(performance.now() - started);
    started = performance.now();
    const now = scanTree(tree);
    const { changed, removed } = changesBetween(last, now);
    if (changed.length + removed.length > 0) throw new Error('the tree changed');
    last = now;
    ticks.push(performance.now() - started);
  }
  return { tick: percentile(ticks, 50), bare: percentile(bare, 50) };
}

async function findTimes(dataset: string, marker: string): Promise<number> {
  const times: number[] = [];
  for (let rep = 0; rep < 15; rep++) times.push(await findable(dataset, marker));
  return percentile(times, 50);
}

/** The same logs as one import and as `batches` sync batches; the find time on each, and the second's parts. */
async function queryAfterSync(): Promise<{ imported: number; synced: number; parts: number; partsImported: number }> {
  const src = join(root, 'grow');
  const sessions = 8;
  const target: SyncTarget = { from: src, to: join(root, 'grow-mirror'), convert: join(root, 'grow-ds'), inputFormat: 'auto', columns: parseColumnFlags([]), prices: {}, graceMs: 0, lockTimeoutMs: 0, log: quiet };
  mkdirSync(join(src, 'project'), { recursive: true });
  const signal = new AbortController().signal;
  for (let b = 0; b < batches; b++) {
    const s = b % sessions;
    const n = Math.floor(b / sessions);
    appendFileSync(sessionFile(src, s), claudeLine(s, n));
    await runBatch(target, [`project/${sessionFile(src, s).split('/').pop()}`], signal);
    if ((b + 1) % 100 === 0) process.stderr.write(`sync batches: ${b + 1}/${batches}\n`);
  }
  const once = { ...target, convert: join(root, 'grow-once'), to: join(root, 'grow-once-mirror') };
  await runBatch(once, readdirSync(join(src, 'project')).map((name) => `project/${name}`), signal);
  const partsOf = (dataset: string): number => readdirSync(join(dataset, 'parts'), { recursive: true }).filter((name) => String(name).endsWith('.parquet')).length;
  const marker = `marker-3-${Math.floor(batches / sessions / 2)}`;
  // Taking turns, so that load from other work falls on both alike.
  const imported: number[] = [];
  const synced: number[] = [];
  for (let round = 0; round < 3; round++) {
    imported.push(await findTimes(once.convert, marker));
    synced.push(await findTimes(target.convert, marker));
  }
  return { imported: percentile(imported, 50), synced: percentile(synced, 50), parts: partsOf(target.convert), partsImported: partsOf(once.convert) };
}

try {
  const waits = await latency();
  const scan = rescan();
  const query = await queryAfterSync();
  const ms = (n: number): string => `${n.toFixed(1)} ms`;
  const lines = [
    '# sync benchmark',
    '',
    `machine: ${availableParallelism()} cores, load ${loadavg().map((n) => n.toFixed(2)).join(' ')}`,
    '',
    '| figure | measured | baseline | ratio | target |',
    '|---|---|---|---|---|',
    `| append -> findable (p50 / max of ${waits.length}) | ${ms(percentile(waits, 50))} / ${ms(Math.max(...waits))} | interval ${intervalMs} ms | ${(Math.max(...waits) / intervalMs).toFixed(2)}x interval (max) | <= interval + 1000 ms: ${Math.max(...waits) <= intervalMs + 1000 ? 'met' : 'MISSED'} |`,
    `| no-change rescan of ${files} files | ${ms(scan.tick)} | bare readdir+lstat ${ms(scan.bare)} | ${(scan.tick / scan.bare).toFixed(2)}x | < 1000 ms: ${scan.tick < 1000 ? 'met' : 'MISSED'} |`,
    `| find after ${batches} sync batches (${query.parts} parts) | ${ms(query.synced)} | after one import (${query.partsImported} parts) ${ms(query.imported)} | ${(query.synced / query.imported).toFixed(2)}x | <= 1.5x: ${query.synced / query.imported <= 1.5 ? 'met' : 'MISSED'} |`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
} finally {
  if (!process.argv.includes('--keep')) rmSync(root, { recursive: true, force: true });
  else process.stderr.write(`kept ${root}\n`);
}
