/**
 * Start-up benchmark: how long whole commands take when their result is small, which is start-up
 * (loading the tool, opening the dataset) more than work.
 *
 *   node dist/bench/startup/run.js [--runs N] [--dataset DIR]
 *
 * Measures, in the same run and taking turns so that load from other work falls on all alike:
 * - baseline: `node -e 0`, the least any Node command costs;
 * - `trajstore query` of one row by document id (a point query), and of a 50-row list;
 * - `trajstore find` of a word with a few matches;
 * - `trajstore --version` (the tool with no work at all).
 * Reports the median wall time of each and its ratio to the baseline's median (target: query and
 * find at most 2x). The dataset is the bundled samples imported into a scratch directory, or
 * `--dataset DIR`. Prints a report (Markdown) to stdout.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { percentile } from '../lib/percentile.js';
import { homeEnv } from '../lib/home-env.js';
import { DIST, toolScript } from '../lib/tools.js';

const REPO = join(DIST, '..');

function option(name: string): string | undefined {
  const at = process.argv.indexOf(name);
  return at === -1 ? undefined : process.argv[at + 1];
}

function run(args: string[], env: NodeJS.ProcessEnv): { ms: number; stdout: string } {
  const started = process.hrtime.bigint();
  const r = spawnSync(process.execPath, args, { encoding: 'utf8', env });
  const ms = Number(process.hrtime.bigint() - started) / 1e6;
  if (r.status !== 0) throw new Error(`node ${args.join(' ')} failed (${r.status}): ${r.stderr}`);
  return { ms, stdout: r.stdout };
}

interface Case {
  name: string;
  args: string[];
}

function main(): void {
  const runs = Number(option('--runs') ?? 30);
  if (!Number.isInteger(runs) || runs < 3) throw new Error('--runs must be a whole number of at least 3');
  const scratch = mkdtempSync(join(tmpdir(), 'bench-startup-'));
  // A home of its own: no user configuration, and the compile cache starts empty (warmed below).
  const env = { ...process.env, ...homeEnv(scratch) };
  try {
    const tool = toolScript('trajstore');
    let dataset = option('--dataset');
    if (dataset === undefined) {
      dataset = join(scratch, 'samples');
      run([tool, 'import', '-f', join(REPO, 'testdata', 'samples'), '-t', dataset], env);
    }
    const pick = (sql: string): string => run([tool, 'query', dataset as string, '--format', 'jsonl', '--sql', sql], env).stdout.trim();
    const documentId = (JSON.parse(pick('SELECT document_id FROM dataset.runs ORDER BY document_id LIMIT 1')) as { document_id: string }).document_id;
    const word = (JSON.parse(pick("SELECT function_name AS w FROM dataset.tool_calls WHERE function_name GLOB '[A-Za-z]*' LIMIT 1") || '{"w":"error"}') as { w: string }).w;
    const cases: Case[] = [
      { name: 'node -e 0 (baseline)', args: ['-e', '0'] },
      { name: 'trajstore --version', args: [tool, '--version'] },
      { name: 'query: one run by document_id', args: [tool, 'query', dataset, '--sql', `SELECT document_id, session_id, step_count FROM dataset.runs WHERE document_id = '${documentId.replaceAll("'", "''")}'`] },
      { name: 'query: a 50-row list', args: [tool, 'query', dataset, '--sql', 'SELECT document_id, step_id, source, timestamp FROM dataset.steps LIMIT 50'] },
      { name: `find: --match ${word}`, args: [tool, 'find', dataset, '--match', word] },
    ];
    for (let warm = 0; warm < 3; warm++) for (const c of cases) run(c.args, env);
    const times = cases.map(() => [] as number[]);
    for (let round = 0; round < runs; round++) {
      // Taking turns, starting at a different case each round.
      for (let k = 0; k < cases.length; k++) {
        const i = (round + k) % cases.length;
        times[i]?.push(run((cases[i] as Case).args, env).ms);
      }
    }
    const median = (i: number): number => percentile(times[i] ?? [], 50);
    const baseline = median(0);
    const lines = [
      '# Start-up benchmark',
      '',
      `${runs} runs of each command, taking turns, after 3 warm-up runs; ${availableParallelism()} CPUs, load ${loadavg()[0]?.toFixed(2)}; dataset ${dataset}.`,
      '',
      '| command | median | p90 | ratio to node -e 0 |',
      '|---|---|---|---|',
      ...cases.map((c, i) => `| ${c.name} | ${median(i).toFixed(1)} ms | ${percentile(times[i] ?? [], 90).toFixed(1)} ms | ${(median(i) / baseline).toFixed(2)} |`),
      '',
      'Target: query and find at most 2.00.',
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

main();
