/**
 * `trajstore serve` benchmark:
 *
 *   node dist/bench/serve/run.js [--steps N] [--connections N] [--seconds N] [--keep DIR]
 *
 * Generates an ATIF corpus of N steps (default 1,000,000; bench/find-query/corpus.ts: runs of 20
 * steps) plus one run of 2,000 steps, imports both with `trajstore import`, starts `trajstore serve`
 * on it, and measures in the same run:
 * - under concurrent load (autocannon, --connections, default 10, for --seconds, default 10, each):
 *   p50/p99 latency and requests/s of the run list (first page; and a model filter sorted by
 *   cost), one run (its facts and first page of steps, over 200 different runs), and `find`
 *   (phrases taken from the corpus, in rotation); against the baseline of `GET /api/mounts` (the
 *   server's floor: routing, reading the manifest, JSON) measured the same way;
 * - the web interface in headless Chromium: time from navigation to the first step of the
 *   2,000-step run painted (median of 10 loads), against the baseline of the mounts page painted.
 * `--keep DIR` keeps the corpus and dataset in DIR, and a later run with the same DIR reuses them.
 * Prints a report (Markdown) to stdout.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { launchChromium } from '../lib/chromium.js';
import { startServeProcess } from '../lib/serve-process.js';
import { generateCorpus } from '../find-query/corpus.js';
import { positiveIntFlag } from '../lib/int-flag.js';
import { percentile } from '../lib/percentile.js';
import { toolScript } from '../lib/tools.js';

interface CannonResult {
  latency: { p50: number; p99: number };
  requests: { average: number; total: number };
  non2xx: number;
  errors: number;
}
type Cannon = (options: Record<string, unknown>) => Promise<CannonResult>;
const autocannon = createRequire(import.meta.url)('autocannon') as Cannon;

const CLI = toolScript('trajstore');
const optionText = (name: string): string | undefined => {
  const at = process.argv.indexOf(name);
  return at === -1 ? undefined : process.argv[at + 1];
};

function trajstore(args: string[]): string {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 });
  if (r.status !== 0) throw new Error(`trajstore ${args.join(' ')} failed (${r.status}): ${r.stderr}`);
  return r.stdout;
}

interface Load {
  name: string;
  p50: number;
  p99: number;
  rps: number;
}

async function load(name: string, base: string, paths: string[], connections: number, seconds: number): Promise<Load> {
  let next = 0;
  const result = await autocannon({
    url: base,
    connections,
    duration: seconds,
    requests: [{ setupRequest: (request: Record<string, unknown>) => ({ ...request, path: paths[next++ % paths.length] }) }],
  });
  if (paths.length === 0) throw new Error(`${name}: no paths`);
  if (result.non2xx || result.errors) throw new Error(`${name}: ${result.non2xx} non-2xx responses and ${result.errors} errors`);
  return { name, p50: result.latency.p50, p99: result.latency.p99, rps: result.requests.average };
}

async function main(): Promise<void> {
  const steps = positiveIntFlag('steps', 1_000_000);
  const connections = positiveIntFlag('connections', 10);
  const seconds = positiveIntFlag('seconds', 10);
  const keep = optionText('--keep');
  const work = keep ?? mkdtempSync(join(tmpdir(), 'bench-serve-'));
  // Without --keep the corpus and dataset (gigabytes at the default size) are this run's only: removed however it ends.
  if (keep === undefined) process.once('exit', () => rmSync(work, { recursive: true, force: true }));
  const dataset = join(work, 'dataset');
  const out: string[] = [];
  const say = (line: string): void => {
    out.push(line);
    process.stderr.write(`${line}\n`);
  };

  if (!(keep !== undefined && existsSync(join(dataset, 'trajstore.json')))) {
    let t = performance.now();
    const corpus = await generateCorpus(join(work, 'corpus'), steps);
    const long = await generateCorpus(join(work, 'long'), 2000, { seed: 11, stepsPerDocument: 2000, idPrefix: 'long' });
    say(`corpus: ${corpus.steps} steps in ${corpus.documents} runs, and one run of ${long.steps} steps (generated in ${((performance.now() - t) / 1000).toFixed(1)} s)`);
    t = performance.now();
    trajstore(['import', '-f', join(work, 'corpus'), '-t', dataset, '-i', 'atif']);
    trajstore(['import', '-f', join(work, 'long'), '-t', dataset, '-i', 'atif', '--mode', 'append']);
    say(`import: ${((performance.now() - t) / 1000).toFixed(1)} s`);
  } else {
    say(`dataset from an earlier run: ${dataset}`);
  }
  const counts = JSON.parse(trajstore(['query', dataset, '--sql', 'SELECT (SELECT count(*) FROM dataset.runs) AS runs, (SELECT count(*) FROM dataset.steps) AS steps', '--format', 'json']))[0] as { runs: number; steps: number };
  const documents = (JSON.parse(trajstore(['query', dataset, '--sql', 'SELECT document_id FROM dataset.runs WHERE step_count = 20 AND rowid % 5 = 0 ORDER BY rowid LIMIT 200', '--format', 'json'])) as Array<{ document_id: string }>).map((r) => r.document_id);
  const phrases = (JSON.parse(trajstore(['query', dataset, '--sql', `SELECT message_text FROM dataset.steps WHERE source = 'agent' AND rowid % ${Math.max(1, Math.floor(counts.steps / 25))} < 2 LIMIT 20`, '--format', 'json'])) as Array<{ message_text: string }>).map((r) => `"${r.message_text.split(' ').slice(2, 4).join(' ')}"`);

  const server = await startServeProcess(['serve', dataset, '--listen', '127.0.0.1:0']);
  try {
    const runsOf = (id: string): string[] => [`/api/mounts/default/runs/${encodeURIComponent(id)}`, `/api/mounts/default/runs/${encodeURIComponent(id)}/steps?limit=100`];
    // Warm: open the snapshot, and let SQLite's page cache hold what every scenario reads first.
    await load('warm-up', server.url, ['/api/mounts', '/api/mounts/default/runs', ...documents.slice(0, 20).flatMap(runsOf)], 2, 2);
    const scenarios: Array<[string, string[]]> = [
      ['baseline: GET /api/mounts', ['/api/mounts']],
      ['run list: first page of 100', ['/api/mounts/default/runs?limit=100']],
      ['run list: model filter, sorted by cost', ['/api/mounts/default/runs?limit=100&model=model-beta&sort=cost_usd']],
      ['one run: facts, then 100 steps (200 runs)', documents.flatMap(runsOf)],
      ['find: two-word phrase (20 phrases)', phrases.map((p) => `/api/mounts/default/find?match=${encodeURIComponent(p)}`)],
    ];
    const results: Load[] = [];
    for (const [name, paths] of scenarios) results.push(await load(name, server.url, paths, connections, seconds));
    const base = results[0] as Load;

    // Time to first paint of a 2,000-step run, in Chromium.
    const browser = await launchChromium();
    const page = await browser.context.newPage();
    const paintTime = async (hash: string, selector: string): Promise<number> => {
      await page.goto('about:blank');
      await page.goto(new URL(`/#${hash}`, server.url).href);
      await page.waitForSelector(selector);
      // performance.now() counts from this navigation's start; the next frame is the one that paints it.
      return page.evaluate(() => new Promise<number>((resolve) => requestAnimationFrame(() => setTimeout(() => resolve(performance.now()), 0))));
    };
    const longRun = 'long-0';
    const runPaint: number[] = [];
    const mountsPaint: number[] = [];
    for (let i = 0; i < 10; i++) {
      mountsPaint.push(await paintTime('/', '#mounts table'));
      runPaint.push(await paintTime(`/m/default/run/${longRun}`, 'article.step'));
    }
    const steps2000 = await page.locator('article.step').count();
    await browser.close();

    say('');
    say(`# trajstore serve benchmark`);
    say('');
    say(`${counts.runs.toLocaleString('en-US')} runs, ${counts.steps.toLocaleString('en-US')} steps; ${connections} connections for ${seconds} s per scenario; ${availableParallelism()} cores, load average ${loadavg()[0]?.toFixed(2)} at the end.`);
    say('');
    say('| scenario | p50 ms | p99 ms | requests/s | p50 / baseline | requests/s / baseline |');
    say('|---|---|---|---|---|---|');
    for (const r of results) say(`| ${r.name} | ${r.p50} | ${r.p99} | ${r.rps.toFixed(0)} | ${(r.p50 / Math.max(base.p50, 1)).toFixed(1)}x | ${(r.rps / base.rps).toFixed(2)}x |`);
    say('');
    const median = (v: number[]): number => percentile(v, 50);
    say(`Web interface (headless Chromium, median of 10 loads): first step of the 2,000-step run painted ${median(runPaint).toFixed(0)} ms after navigation (p90 ${percentile(runPaint, 90).toFixed(0)} ms; ${steps2000} steps in the document once painted, of 2,000); baseline, the mounts page painted: ${median(mountsPaint).toFixed(0)} ms; ratio ${(median(runPaint) / median(mountsPaint)).toFixed(2)}x.`);
  } finally {
    await server.stop();
  }
  process.stdout.write(`${out.join('\n')}\n`);
}

await main();
