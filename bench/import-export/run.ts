/**
 * Import/export benchmark:
 *
 *   node dist/bench/import-export/run.js [--size-mb N] [--reps N] [--kind agentb-code|agenta] [--keep]
 *
 * Generates N MB (default 200) of Claude Code style session JSONL (`--kind agenta`: Codex CLI
 * rollouts), then measures, in the same run, --reps times (default 3), each
 * command right after its baseline, and reports the median of each figure (the speed of these
 * machines drifts within a minute, so a ratio is taken from a baseline measured next to it):
 * - baseline: read the same files and JSON.parse every line (MB/s of input);
 * - import: `trajstore import` as a child process (MB/s of input, ratio to the baseline, peak RSS,
 *   CPU seconds of all its threads), and the dataset it made: its size against the input's, and
 *   how much of it is Parquet parts and how much the SQLite index (issue 17: at most 1.0x);
 * - export baseline: read the files, JSON.parse and JSON.stringify every line and write it (MB/s of output);
 * - export: `trajstore export` to a JSONL file as a child process (MB/s of output, ratio, peak RSS).
 * Targets (issue 3): import ratio >= 0.3, export ratio >= 0.5, peak RSS < 300 MB for a 1 GB input.
 */
import { spawn } from 'node:child_process';
import { createReadStream, createWriteStream, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { percentile } from '../lib/percentile.js';
import { toolScript } from '../lib/tools.js';
import { generateCorpus, type CorpusKind } from './corpus.js';

const RUSAGE = pathToFileURL(join(dirname(fileURLToPath(import.meta.url)), '..', 'lib', 'rusage.js')).href;
const MB = 1_000_000;

function option(name: string): string | undefined {
  const at = process.argv.indexOf(name);
  return at === -1 ? undefined : process.argv[at + 1];
}

function filesOf(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(d, e.name));
      else out.push(join(d, e.name));
    }
  };
  walk(dir);
  return out.sort();
}

async function eachLine(files: string[], fn: (line: string) => void): Promise<void> {
  for (const file of files) for await (const line of createInterface({ input: createReadStream(file), crlfDelay: Infinity })) if (line !== '') fn(line);
}

async function timed<T>(fn: () => Promise<T>): Promise<{ seconds: number; value: T }> {
  const started = performance.now();
  const value = await fn();
  return { seconds: (performance.now() - started) / 1000, value };
}

/** Runs the CLI as a child; returns its peak RSS in MB and its CPU seconds (all threads). */
function runCli(args: string[], rssFile: string): Promise<{ rssMb: number; cpuSeconds: number }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [`--import=${RUSAGE}`, toolScript('trajstore'), ...args], { env: { ...process.env, BENCH_RSS_FILE: rssFile }, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) reject(new Error(`trajstore ${args[0]} exited ${code}: ${stderr.trim()}`));
      else {
        const usage = JSON.parse(readFileSync(rssFile, 'utf8')) as { maxRssKb: number; cpuMicros: number };
        resolve({ rssMb: usage.maxRssKb / 1024, cpuSeconds: usage.cpuMicros / 1e6 });
      }
    });
  });
}

const fmt = (n: number, digits = 1): string => n.toFixed(digits);

/** One repetition: rates in MB/s, times and CPU in seconds, RSS in MB. */
interface Rep {
  baseline: number;
  baselineCpu: number;
  importSeconds: number;
  import: number;
  importRatio: number;
  importRss: number;
  importCpu: number;
  exportBaseline: number;
  exportSeconds: number;
  export: number;
  exportRatio: number;
  exportRss: number;
  exportCpu: number;
  datasetBytes: number;
  partsBytes: number;
  indexBytes: number;
}

/** A dataset's bytes on disk: all of it, its Parquet parts, its SQLite index. */
function datasetSize(dir: string): { total: number; parts: number; index: number } {
  const total = filesOf(dir).reduce((n, file) => n + statSync(file).size, 0);
  const parts = filesOf(join(dir, 'parts')).reduce((n, file) => n + statSync(file).size, 0);
  return { total, parts, index: statSync(join(dir, 'index.sqlite')).size };
}

async function main(): Promise<void> {
  const sizeMb = Number(option('--size-mb') ?? 200);
  if (!Number.isFinite(sizeMb) || sizeMb <= 0) throw new Error('--size-mb must be a positive number');
  const keep = process.argv.includes('--keep');
  const kind = (option('--kind') ?? 'agentb-code') as CorpusKind;
  if (kind !== 'agentb-code' && kind !== 'agenta') throw new Error('--kind must be agentb-code or agenta');
  const exportFormat = 'atif';
  const work = mkdtempSync(join(tmpdir(), 'bench-import-export-'));
  try {
    process.stdout.write(`generating ${sizeMb} MB of ${kind === 'agenta' ? 'Codex rollout' : 'Claude Code style session'} JSONL...\n`);
    const corpus = generateCorpus(join(work, 'corpus'), sizeMb * MB, kind);
    const files = filesOf(corpus.dir);
    process.stdout.write(`corpus: ${fmt(corpus.bytes / MB)} MB, ${corpus.files} files, ${corpus.lines} lines\n\n`);

    const load = loadavg()[0] ?? 0;
    const reps = Number(option('--reps') ?? 3);
    if (!Number.isInteger(reps) || reps < 1) throw new Error('--reps must be a positive integer');
    const runs: Rep[] = [];
    let exportBytes = 0;
    for (let rep = 0; rep < reps; rep++) {
      const baselineCpu = process.cpuUsage();
      const baseline = await timed(() => eachLine(files, (line) => void JSON.parse(line)));
      const baselineCpuSeconds = ((u) => (u.user + u.system) / 1e6)(process.cpuUsage(baselineCpu));
      const baselineRate = corpus.bytes / MB / baseline.seconds;

      const dataset = join(work, 'dataset');
      rmSync(dataset, { recursive: true, force: true });
      const imported = await timed(() => runCli(['import', '-f', corpus.dir, '-t', dataset, '-i', kind], join(work, 'import.rss')));
      const importRate = corpus.bytes / MB / imported.seconds;
      const size = datasetSize(dataset);

      const baselineOut = join(work, 'baseline-out.jsonl');
      const exportBaseline = await timed(async () => {
        const out = createWriteStream(baselineOut);
        await eachLine(files, (line) => void out.write(`${JSON.stringify(JSON.parse(line))}\n`));
        await new Promise<void>((resolve) => out.end(resolve));
      });
      const exportBaselineRate = statSync(baselineOut).size / MB / exportBaseline.seconds;
      rmSync(baselineOut);

      const exportOut = join(work, 'export.jsonl');
      rmSync(exportOut, { force: true });
      const exported = await timed(() => runCli(['export', '-f', dataset, '-t', exportOut, '-o', exportFormat], join(work, 'export.rss')));
      exportBytes = statSync(exportOut).size;
      const exportRate = exportBytes / MB / exported.seconds;

      runs.push({
        baseline: baselineRate,
        baselineCpu: baselineCpuSeconds,
        importSeconds: imported.seconds,
        import: importRate,
        importRatio: importRate / baselineRate,
        importRss: imported.value.rssMb,
        importCpu: imported.value.cpuSeconds,
        datasetBytes: size.total,
        partsBytes: size.parts,
        indexBytes: size.index,
        exportBaseline: exportBaselineRate,
        exportSeconds: exported.seconds,
        export: exportRate,
        exportRatio: exportRate / exportBaselineRate,
        exportRss: exported.value.rssMb,
        exportCpu: exported.value.cpuSeconds,
      });
      process.stdout.write(`rep ${rep + 1}/${reps}: import ratio ${fmt(importRate / baselineRate, 2)}, export ratio ${fmt(exportRate / exportBaselineRate, 2)}\n`);
    }
    const median = (key: keyof Rep): number => percentile(runs.map((run) => run[key]), 50);
    const peak = (key: keyof Rep): number => Math.max(...runs.map((run) => run[key]));

    process.stdout.write(`\nmedian of ${reps} (peak RSS: the largest)\n`);
    const rows = [
      ['baseline: read + JSON.parse every line', `${fmt(median('baseline'))} MB/s`, '', '', `CPU ${fmt(median('baselineCpu'))} s`],
      [`import -i ${kind} (${fmt(median('importSeconds'))} s)`, `${fmt(median('import'))} MB/s`, `ratio ${fmt(median('importRatio'), 2)} (target >= 0.3)`, `peak RSS ${fmt(peak('importRss'), 0)} MB`, `CPU ${fmt(median('importCpu'))} s`],
      [
        `dataset: ${fmt(median('datasetBytes') / MB)} MB (parts ${fmt(median('partsBytes') / MB)} MB, index ${fmt(median('indexBytes') / MB)} MB)`,
        '',
        `size ${fmt(median('datasetBytes') / corpus.bytes, 2)}x the input (target <= 1.0)`,
        '',
      ],
      ['baseline: read + parse + stringify + write', `${fmt(median('exportBaseline'))} MB/s`, '', ''],
      [`export -o ${exportFormat} to JSONL (${fmt(median('exportSeconds'))} s, ${fmt(exportBytes / MB)} MB)`, `${fmt(median('export'))} MB/s`, `ratio ${fmt(median('exportRatio'), 2)} (target >= 0.5)`, `peak RSS ${fmt(peak('exportRss'), 0)} MB`, `CPU ${fmt(median('exportCpu'))} s`],
    ];
    const widths = [0, 1, 2, 3, 4].map((i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
    for (const row of rows) process.stdout.write(`${row.map((cell, i) => cell.padEnd(widths[i] ?? 0)).join('  ').trimEnd()}\n`);
    process.stdout.write(`\npeak RSS target: < 300 MB for a 1 GB input (this corpus: ${fmt(corpus.bytes / MB)} MB)\n`);
    // The import runs on two threads (decoding; Parquet and SQLite index) and its ratio assumes two free cores;
    // CPU is user + system time of all threads, which other load on the machine changes far less.
    process.stdout.write(`load average (1 min) at start: ${fmt(load, 2)} on ${availableParallelism()} cores\n`);
  } finally {
    if (keep) process.stdout.write(`kept ${work}\n`);
    else rmSync(work, { recursive: true, force: true });
  }
}

await main();
