/**
 * find/query benchmark:
 *
 *   node dist/bench/find-query/run.js [--steps N] [--reps N] [--keep DIR]
 *
 * Generates an ATIF corpus of N steps (default 1,000,000; corpus.ts), imports it with
 * `trajstore import`, then measures in the same run:
 * - index build: rebuilding the SQLite index (tables + FTS5 full-text) from the Parquet parts, and the
 *   index size relative to the raw JSONL;
 * - find, phrase queries: the engine (planner + SQL on the index, in-process) and the real command
 *   (`trajstore find --format json`, a process), p50/p99, against the baseline `rg -i -F -c PHRASE`
 *   over the raw JSONL of the same corpus (target: find >= 20x faster than rg at p50), taking turns
 *   so that load from other work falls on all alike; `node -e 0` is timed too, since Node's own start
 *   bounds what any Node command can reach against rg;
 * - query: tokens by model over all steps (group by) and a join of runs and steps, through the real
 *   command, against the baseline of a Node scan that JSON.parses the raw JSONL and aggregates.
 * `--keep DIR` keeps the corpus and dataset in DIR, and a later run with the same DIR reuses them.
 * Prints a report (Markdown) to stdout.
 */
import { spawnSync } from 'node:child_process';
import { createReadStream, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { openDataset } from '../../pipelines/dataset/open.js';
import { rebuildIndex } from '../../pipelines/dataset/sqlite-index.js';
import { parseExpression } from '../../pipelines/search/grammar/parser.js';
import { planFind } from '../../pipelines/search/planner.js';
import { toolScript } from '../lib/tools.js';
import { openReadOnly } from '../../pipelines/search/sql/connection.js';
import { percentile } from '../lib/percentile.js';
import { generateCorpus, type Corpus } from './corpus.js';

const CLI = toolScript('trajstore');

function option(name: string, fallback: number): number {
  const at = process.argv.indexOf(name);
  return at === -1 ? fallback : Number(process.argv[at + 1]);
}
function optionText(name: string): string | undefined {
  const at = process.argv.indexOf(name);
  return at === -1 ? undefined : process.argv[at + 1];
}

/** Wall time of a process, in ms; fails loudly when it fails. */
function timeProcess(command: string, args: string[]): { ms: number; stdout: string } {
  const started = performance.now();
  const r = spawnSync(command, args, { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 });
  const ms = performance.now() - started;
  if (r.error) {
    const missing = (r.error as NodeJS.ErrnoException).code === 'ENOENT';
    throw new Error(missing ? `${command} is not installed${command === 'rg' ? ' (the baseline needs ripgrep: apt-get install ripgrep)' : ''}` : `${command}: ${r.error.message}`);
  }
  // rg exits 1 when nothing matched, which is an answer, not a failure.
  if (r.status !== 0 && !(command === 'rg' && r.status === 1)) throw new Error(`${command} ${args.join(' ')} failed (${r.status}): ${r.stderr}`);
  return { ms, stdout: r.stdout };
}

const ms = (v: number) => `${v.toFixed(1)} ms`;
const mb = (v: number) => `${(v / 1e6).toFixed(1)} MB`;

/** Size and counts of a corpus written by an earlier run. */
function describeCorpus(dir: string): Corpus {
  const files = readdirSync(dir).filter((f) => f.endsWith('.jsonl'));
  const bytes = files.reduce((n, f) => n + statSync(join(dir, f)).size, 0);
  let documents = 0;
  let steps = 0;
  for (const f of files) {
    for (const line of readFileSync(join(dir, f), 'utf8').split('\n')) {
      if (!line) continue;
      documents += 1;
      steps += (JSON.parse(line) as { steps: unknown[] }).steps.length;
    }
  }
  return { dir, files: files.length, documents, steps, bytes };
}

async function scanJsonl(dir: string, visit: (doc: Record<string, unknown>) => void): Promise<void> {
  for (const file of readdirSync(dir).sort()) {
    for await (const line of createInterface({ input: createReadStream(join(dir, file)), crlfDelay: Infinity })) if (line) visit(JSON.parse(line) as Record<string, unknown>);
  }
}

async function main(): Promise<void> {
  const steps = option('--steps', 1_000_000);
  const reps = option('--reps', 30);
  const keep = optionText('--keep');
  const work = keep ?? mkdtempSync(join(tmpdir(), 'bench-find-query-'));
  const corpusDir = join(work, 'corpus');
  const dataset = join(work, 'dataset');
  const out: string[] = [];
  const say = (line: string) => {
    out.push(line);
    process.stderr.write(`${line}\n`);
  };

  let t = performance.now();
  // With --keep DIR of an earlier run, its corpus and dataset are used again (no generation, no import).
  const reuse = keep !== undefined && existsSync(join(dataset, 'trajstore.json'));
  const corpus = reuse ? describeCorpus(corpusDir) : await generateCorpus(corpusDir, steps);
  say(`corpus: ${corpus.steps} steps in ${corpus.documents} documents, ${corpus.files} files, ${mb(corpus.bytes)}${reuse ? ' (from an earlier run)' : ` (generated in ${((performance.now() - t) / 1000).toFixed(1)} s)`}`);
  if (!reuse) {
    const imported = timeProcess(process.execPath, [CLI, 'import', '-f', corpusDir, '-t', dataset, '-i', 'atif']);
    say(`import (parse + Parquet + index): ${(imported.ms / 1000).toFixed(1)} s`);
  }

  // Index build alone: from the Parquet parts, as `open` does for a missing or stale index.
  const opened = await openDataset(dataset);
  const indexPath = opened.db.name;
  opened.close();
  const rebuiltPath = join(work, 'rebuilt.sqlite');
  const reopened = await openDataset(dataset);
  t = performance.now();
  await rebuildIndex(reopened.store, reopened.snapshot, rebuiltPath);
  const buildSeconds = (performance.now() - t) / 1000;
  reopened.close();
  rmSync(rebuiltPath, { force: true });
  const indexBytes = statSync(indexPath).size;
  say(`index build from parts: ${buildSeconds.toFixed(1)} s; index ${mb(indexBytes)} = ${(indexBytes / corpus.bytes).toFixed(2)}x the raw JSONL`);

  // The connection the find and query workers use (read-only, mmap, query_only).
  const db = openReadOnly([{ name: 'dataset', path: indexPath }]);
  // Two-word phrases from agent messages spread evenly over the corpus, searched in rotation.
  const phrases: string[] = [];
  const message = db.prepare("SELECT message_text FROM steps WHERE rowid >= ? AND source = 'agent' LIMIT 1").pluck();
  for (let i = 0; i < 20; i++) {
    const text = message.get(1 + Math.floor(((i + 0.5) * corpus.steps) / 20)) as string | undefined;
    if (text) phrases.push(text.split(' ').slice(2, 4).join(' '));
  }
  // Engine, command and rg take turns on each phrase, so a burst of other work on this shared machine
  // falls on all three alike.
  const engine: number[] = [];
  const engineHits: number[] = [];
  const cli: number[] = [];
  const rg: number[] = [];
  const nodeStart: number[] = [];
  for (let i = 0; i < reps; i++) {
    const phrase = phrases[i % phrases.length] as string;
    for (let j = 0; j < 3; j++) {
      const started = performance.now();
      const plan = planFind({ expressions: [parseExpression(`"${phrase}"`)], limit: 101, ftsAvailable: true });
      const rows = db.prepare(plan.sql).raw(true).all(...plan.params);
      engine.push(performance.now() - started);
      engineHits.push(rows.length);
    }
    cli.push(timeProcess(process.execPath, [CLI, 'find', dataset, '--match', `"${phrase}"`, '--format', 'json']).ms);
    rg.push(timeProcess('rg', ['-i', '-F', '-c', phrase, corpusDir]).ms);
    nodeStart.push(timeProcess(process.execPath, ['-e', '0']).ms);
  }
  db.close();
  const rg50 = percentile(rg, 50);
  say(`machine: ${availableParallelism()} CPUs, load average ${loadavg().map((l) => l.toFixed(1)).join(' ')} (other work shares them; timings are wall clock)`);
  say('');
  say(`find, phrase queries (${phrases.length} phrases; engine ${engine.length} runs, command and rg ${reps} runs each; mean hits ${(engineHits.reduce((a, b) => a + b, 0) / engineHits.length).toFixed(1)}):`);
  say('| | p50 | p99 | rg p50 / this p50 |');
  say('|---|---|---|---|');
  say(`| find engine (in-process SQL) | ${ms(percentile(engine, 50))} | ${ms(percentile(engine, 99))} | ${(rg50 / percentile(engine, 50)).toFixed(1)}x |`);
  say(`| trajstore find (whole command) | ${ms(percentile(cli, 50))} | ${ms(percentile(cli, 99))} | ${(rg50 / percentile(cli, 50)).toFixed(1)}x |`);
  say(`| baseline: rg -i -F -c over raw JSONL | ${ms(rg50)} | ${ms(percentile(rg, 99))} | 1.0x |`);
  say(`| for scale: \`node -e 0\` (a Node process doing nothing) | ${ms(percentile(nodeStart, 50))} | ${ms(percentile(nodeStart, 99))} | ${(rg50 / percentile(nodeStart, 50)).toFixed(1)}x |`);

  // query: group-by and join through the command, against a JSON scan of the raw files.
  const groupSql = 'SELECT model_name, sum(prompt_tokens) AS prompt, sum(completion_tokens) AS completion, count(*) AS steps FROM dataset.steps GROUP BY model_name';
  const joinSql = 'SELECT r.agent_name, count(*) AS steps, avg(s.completion_tokens) AS mean_completion FROM dataset.runs r JOIN dataset.steps s ON s.document_id = r.document_id GROUP BY r.agent_name';
  const queryRuns = Math.max(3, Math.floor(reps / 6));
  const group: number[] = [];
  const joined: number[] = [];
  const groupEngine: number[] = [];
  const joinedEngine: number[] = [];
  const engineDb = openReadOnly([{ name: 'dataset', path: indexPath }]);
  for (let i = 0; i < queryRuns; i++) {
    for (const [sql, into] of [
      [groupSql, groupEngine],
      [joinSql, joinedEngine],
    ] as const) {
      const started = performance.now();
      engineDb.prepare(sql).all();
      into.push(performance.now() - started);
    }
  }
  engineDb.close();
  for (let i = 0; i < queryRuns; i++) {
    group.push(timeProcess(process.execPath, [CLI, 'query', dataset, '--sql', groupSql, '--format', 'json']).ms);
    joined.push(timeProcess(process.execPath, [CLI, 'query', dataset, '--sql', joinSql, '--format', 'json']).ms);
  }
  t = performance.now();
  const byModel = new Map<string, number>();
  const byAgent = new Map<string, number>();
  await scanJsonl(corpusDir, (doc) => {
    const agent = (doc.agent as { name: string }).name;
    for (const s of doc.steps as Array<{ model_name?: string; metrics?: { prompt_tokens: number } }>) {
      const model = s.model_name ?? '';
      byModel.set(model, (byModel.get(model) ?? 0) + (s.metrics?.prompt_tokens ?? 0));
      byAgent.set(agent, (byAgent.get(agent) ?? 0) + 1);
    }
  });
  const scan = performance.now() - t;
  say('');
  say(`query over ${corpus.steps} steps (${queryRuns} runs each):`);
  say('| | p50 | baseline / this |');
  say('|---|---|---|');
  say(`| tokens by model (GROUP BY over steps), SQL in-process | ${ms(percentile(groupEngine, 50))} | ${(scan / percentile(groupEngine, 50)).toFixed(1)}x |`);
  say(`| tokens by model, trajstore query (whole command) | ${ms(percentile(group, 50))} | ${(scan / percentile(group, 50)).toFixed(1)}x |`);
  say(`| runs JOIN steps by agent, SQL in-process | ${ms(percentile(joinedEngine, 50))} | ${(scan / percentile(joinedEngine, 50)).toFixed(1)}x |`);
  say(`| runs JOIN steps by agent, trajstore query (whole command) | ${ms(percentile(joined, 50))} | ${(scan / percentile(joined, 50)).toFixed(1)}x |`);
  say(`| baseline: Node JSON.parse scan of the raw JSONL, both aggregates | ${ms(scan)} | 1.0x |`);

  process.stdout.write(`${out.join('\n')}\n`);
  if (!keep) rmSync(work, { recursive: true, force: true });
}

await main();
