/**
 * Import/export benchmark:
 *
 *   node dist/bench/import-export/run.js [--size-mb N] [--reps N] [--kind agentb-code|agenta] [--against DIST] [--keep]
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
 * - find: the same `trajstore find` (a two-word phrase) 10 times on that dataset, the median wall time;
 * - query: `select model_name, count(*) from dataset.steps group by model_name`, its peak RSS (issue 17:
 *   under 100 MiB at any dataset size, since aggregates stream their rows).
 * With `--against DIST` (the dist/ of another build, say the previous dataset layout's), each of import,
 * find, query and export is also run with that build's trajstore right after this one's, on its own
 * dataset, and the ratios this/that are reported (issue 17: within 10%).
 * Targets (issue 3): import ratio >= 0.3, export ratio >= 0.5, peak RSS < 300 MB for a 1 GB input.
 */
import { spawn } from 'node:child_process';
import { createReadStream, createWriteStream, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
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

/** Runs a trajstore script as a child; returns its peak RSS in MB and its CPU seconds (all threads). */
function runCli(script: string, args: string[], rssFile: string): Promise<{ rssMb: number; cpuSeconds: number }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [`--import=${RUSAGE}`, script, ...args], { env: { ...process.env, BENCH_RSS_FILE: rssFile }, stdio: ['ignore', 'ignore', 'pipe'] });
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

const GROUP_BY = 'select model_name, count(*) from dataset.steps group by model_name';
const FIND_PHRASE = '"flush error"';
const FIND_RUNS = 10;

/** One build's trajstore on the corpus: times in seconds, RSS in MB, sizes in bytes. */
interface ToolRun {
  importSeconds: number;
  importRss: number;
  importCpu: number;
  datasetBytes: number;
  partsBytes: number;
  indexBytes: number;
  findSeconds: number;
  queryRss: number;
  exportSeconds: number;
  exportBytes: number;
  exportRss: number;
  exportCpu: number;
}

/** One repetition: the baselines (MB/s), this build's run and, with --against, the other build's. */
interface Rep {
  baseline: number;
  baselineCpu: number;
  exportBaseline: number;
  ours: ToolRun;
  theirs?: ToolRun;
}

/** A dataset's bytes on disk: all of it, its Parquet parts, its SQLite index. */
function datasetSize(dir: string): { total: number; parts: number; index: number } {
  const total = filesOf(dir).reduce((n, file) => n + statSync(file).size, 0);
  const parts = filesOf(join(dir, 'parts')).reduce((n, file) => n + statSync(file).size, 0);
  return { total, parts, index: statSync(join(dir, 'index.sqlite')).size };
}

/** Import (into `work/<name>`), find, the group-by query and export with the trajstore `script`. */
async function measureTool(script: string, work: string, name: string, corpusDir: string, kind: CorpusKind): Promise<ToolRun> {
  const dataset = join(work, name);
  rmSync(dataset, { recursive: true, force: true });
  const rss = join(work, 'usage.json');
  const imported = await timed(() => runCli(script, ['import', '-f', corpusDir, '-t', dataset, '-i', kind], rss));
  const size = datasetSize(dataset);
  const finds: number[] = [];
  for (let i = 0; i < FIND_RUNS; i++) finds.push((await timed(() => runCli(script, ['find', dataset, '--match', FIND_PHRASE, '--format', 'json'], rss))).seconds);
  const query = await runCli(script, ['query', dataset, '--sql', GROUP_BY, '--format', 'json'], rss);
  const exportOut = join(work, 'export.jsonl');
  rmSync(exportOut, { force: true });
  const exported = await timed(() => runCli(script, ['export', '-f', dataset, '-t', exportOut, '-o', 'atif'], rss));
  const exportBytes = statSync(exportOut).size;
  rmSync(exportOut);
  return {
    importSeconds: imported.seconds,
    importRss: imported.value.rssMb,
    importCpu: imported.value.cpuSeconds,
    datasetBytes: size.total,
    partsBytes: size.parts,
    indexBytes: size.index,
    findSeconds: percentile(finds, 50),
    queryRss: query.rssMb,
    exportSeconds: exported.seconds,
    exportBytes,
    exportRss: exported.value.rssMb,
    exportCpu: exported.value.cpuSeconds,
  };
}

function printTable(rows: string[][]): void {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  for (const row of rows) process.stdout.write(`${row.map((cell, i) => cell.padEnd(widths[i] ?? 0)).join('  ').trimEnd()}\n`);
}

async function main(): Promise<void> {
  const sizeMb = Number(option('--size-mb') ?? 200);
  if (!Number.isFinite(sizeMb) || sizeMb <= 0) throw new Error('--size-mb must be a positive number');
  const keep = process.argv.includes('--keep');
  const kind = (option('--kind') ?? 'agentb-code') as CorpusKind;
  if (kind !== 'agentb-code' && kind !== 'agenta') throw new Error('--kind must be agentb-code or agenta');
  const against = option('--against');
  const theirScript = against === undefined ? undefined : join(against, 'bin', 'trajstore.js');
  if (theirScript !== undefined && !existsSync(theirScript)) throw new Error(`--against ${against}: no bin/trajstore.js there (give a build's dist/)`);
  const reps = Number(option('--reps') ?? 3);
  if (!Number.isInteger(reps) || reps < 1) throw new Error('--reps must be a positive integer');
  const work = mkdtempSync(join(tmpdir(), 'bench-import-export-'));
  try {
    process.stdout.write(`generating ${sizeMb} MB of ${kind === 'agenta' ? 'Codex rollout' : 'Claude Code style session'} JSONL...\n`);
    const corpus = generateCorpus(join(work, 'corpus'), sizeMb * MB, kind);
    const files = filesOf(corpus.dir);
    process.stdout.write(`corpus: ${fmt(corpus.bytes / MB)} MB, ${corpus.files} files, ${corpus.lines} lines\n\n`);

    const load = loadavg()[0] ?? 0;
    const runs: Rep[] = [];
    for (let rep = 0; rep < reps; rep++) {
      const baselineCpu = process.cpuUsage();
      const baseline = await timed(() => eachLine(files, (line) => void JSON.parse(line)));
      const baselineCpuSeconds = ((u) => (u.user + u.system) / 1e6)(process.cpuUsage(baselineCpu));
      const baselineOut = join(work, 'baseline-out.jsonl');
      const exportBaseline = await timed(async () => {
        const out = createWriteStream(baselineOut);
        await eachLine(files, (line) => void out.write(`${JSON.stringify(JSON.parse(line))}\n`));
        await new Promise<void>((resolve) => out.end(resolve));
      });
      const exportBaselineRate = statSync(baselineOut).size / MB / exportBaseline.seconds;
      rmSync(baselineOut);
      const ours = await measureTool(toolScript('trajstore'), work, 'dataset', corpus.dir, kind);
      const theirs = theirScript === undefined ? undefined : await measureTool(theirScript, work, 'dataset-against', corpus.dir, kind);
      runs.push({ baseline: corpus.bytes / MB / baseline.seconds, baselineCpu: baselineCpuSeconds, exportBaseline: exportBaselineRate, ours, theirs });
      const importRatio = corpus.bytes / MB / ours.importSeconds / (corpus.bytes / MB / baseline.seconds);
      const vs = theirs ? `; import ${fmt(theirs.importSeconds / ours.importSeconds, 2)}x, export ${fmt(theirs.exportSeconds / ours.exportSeconds, 2)}x, find ${fmt(theirs.findSeconds / ours.findSeconds, 2)}x the other build's speed` : '';
      process.stdout.write(`rep ${rep + 1}/${reps}: import ratio ${fmt(importRatio, 2)}${vs}\n`);
    }
    const median = (values: number[]): number => percentile(values, 50);
    const of = (pick: (run: Rep) => ToolRun | undefined, key: keyof ToolRun): number[] => runs.map((run) => pick(run)![key]);
    const ours = (key: keyof ToolRun): number[] => of((run) => run.ours, key);
    const theirs = (key: keyof ToolRun): number[] => of((run) => run.theirs, key);
    const baselineRate = median(runs.map((run) => run.baseline));
    const exportBaselineRate = median(runs.map((run) => run.exportBaseline));
    const exportMb = median(ours('exportBytes')) / MB;
    const importRatios = runs.map((run) => corpus.bytes / MB / run.ours.importSeconds / run.baseline);
    const exportRatios = runs.map((run) => run.ours.exportBytes / MB / run.ours.exportSeconds / run.exportBaseline);

    process.stdout.write(`\nmedian of ${reps} (peak RSS: the largest)\n`);
    printTable([
      ['baseline: read + JSON.parse every line', `${fmt(baselineRate)} MB/s`, '', '', `CPU ${fmt(median(runs.map((run) => run.baselineCpu)))} s`],
      [`import -i ${kind} (${fmt(median(ours('importSeconds')))} s)`, `${fmt(corpus.bytes / MB / median(ours('importSeconds')))} MB/s`, `ratio ${fmt(median(importRatios), 2)} (target >= 0.3)`, `peak RSS ${fmt(Math.max(...ours('importRss')), 0)} MB`, `CPU ${fmt(median(ours('importCpu')))} s`],
      [
        `dataset: ${fmt(median(ours('datasetBytes')) / MB)} MB (parts ${fmt(median(ours('partsBytes')) / MB)} MB, index ${fmt(median(ours('indexBytes')) / MB)} MB)`,
        '',
        `size ${fmt(median(ours('datasetBytes')) / corpus.bytes, 2)}x the input (target <= 1.0)`,
        '',
      ],
      [`find --match '${FIND_PHRASE}' (median of ${FIND_RUNS})`, `${fmt(median(ours('findSeconds')) * 1000, 0)} ms`, '', ''],
      [`query: ${GROUP_BY}`, '', '', `peak RSS ${fmt(Math.max(...ours('queryRss')), 0)} MB (target < 100 MiB)`],
      ['baseline: read + parse + stringify + write', `${fmt(exportBaselineRate)} MB/s`, '', ''],
      [`export -o atif to JSONL (${fmt(median(ours('exportSeconds')))} s, ${fmt(exportMb)} MB)`, `${fmt(exportMb / median(ours('exportSeconds')))} MB/s`, `ratio ${fmt(median(exportRatios), 2)} (target >= 0.5)`, `peak RSS ${fmt(Math.max(...ours('exportRss')), 0)} MB`, `CPU ${fmt(median(ours('exportCpu')))} s`],
    ]);
    if (theirScript !== undefined) {
      // Each figure is this build's speed over the other's, per rep (they ran back to back), then the median.
      const speedup = (key: keyof ToolRun): string => fmt(median(runs.map((run) => run.theirs![key] / run.ours[key])), 2);
      process.stdout.write(`\nagainst ${against} (this build's speed / that build's, median of the per-rep ratios; 1.00 = the same)\n`);
      printTable([
        ['', 'this build', 'that build', 'ratio'],
        ['import (s)', fmt(median(ours('importSeconds')), 2), fmt(median(theirs('importSeconds')), 2), `${speedup('importSeconds')} (target >= 0.9)`],
        ['find (ms)', fmt(median(ours('findSeconds')) * 1000, 0), fmt(median(theirs('findSeconds')) * 1000, 0), `${speedup('findSeconds')} (target >= 0.9)`],
        ['export (s)', fmt(median(ours('exportSeconds')), 2), fmt(median(theirs('exportSeconds')), 2), `${speedup('exportSeconds')} (target >= 0.9)`],
        ['dataset (MB)', fmt(median(ours('datasetBytes')) / MB), fmt(median(theirs('datasetBytes')) / MB), ''],
        ['group-by query peak RSS (MB)', fmt(Math.max(...ours('queryRss')), 0), fmt(Math.max(...theirs('queryRss')), 0), ''],
        ['import peak RSS (MB)', fmt(Math.max(...ours('importRss')), 0), fmt(Math.max(...theirs('importRss')), 0), ''],
      ]);
    }
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
