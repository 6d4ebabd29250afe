/**
 * Crash tests at every step of a writer: each writer command (append, replace, create, drop) is run
 * once under the kill-point shim (lib/testing/killpoint.c) to list the calls it makes to rename,
 * fsync, fdatasync, unlink, rmdir and remove; then, for a chosen call N, it is run again from the same
 * start and killed with SIGKILL right after its Nth call, and what it left is checked:
 *
 * - readers (`stats`, `export`, on a copy of what was left) see the old dataset when the writer was
 *   killed before its commit call, the new one from that call on (for create "old" is no dataset,
 *   for drop "new" is none);
 * - the next writer (an append, or a create where there is no dataset) succeeds and leaves the
 *   dataset holding that state plus its own documents, and nothing else on disk: no hidden sibling,
 *   lock, temporary, snapshot off the manifest's chain, unlisted part or stale index.
 */
import { cpSync, mkdirSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import * as assert from 'uvu/assert';
import { runTool, type ToolResult } from '../../../lib/testing/run-tool.js';
import { scratchDir } from '../../../lib/testing/scratch.js';
import { homeEnv } from '../../../bench/lib/home-env.js';
import { openDataset } from '../../dataset/open.js';
import { STORYLINES, leftovers, writeStorylines } from './dataset-state.js';
import { SHIM } from './stop-points.js';


/** One counted call of a clean run: its number, the function, and the paths it named. */
export interface Call {
  n: number;
  fn: string;
  paths: string[];
}

export interface Scenario {
  name: string;
  /** Whether the writer starts from a dataset (the two fixture Storylines) at `ds`. */
  fromDataset: boolean;
  /** The writer's arguments, with the dataset at `ds` and its sources in `sources`. */
  args(ds: string, sources: string): string[];
  /** Whether the writer leaves a dataset when it completes. */
  leavesDataset: boolean;
  /** The call that commits: killed from it on, the writer has done its work. */
  commits(call: Call, ds: string): boolean;
  /** Writes the scenario needs beyond the fixture dataset (run once, on the template). */
  prepare?(b: Bench): Promise<void>;
  /** The documents before and after the writer, when not those of the fixture and of b (below). */
  documents?: { old: string[]; done: string[] };
  /** The writer's environment beyond the bench's. */
  env?: NodeJS.ProcessEnv;
}

const BUILD = /\/\.ds\.tmp-[0-9a-f]{12}$/;

export const SCENARIOS: Scenario[] = [
  {
    name: 'append',
    fromDataset: true,
    args: (ds, sources) => ['import', '-f', join(sources, 'b.jsonl'), '-t', ds, '--mode', 'append'],
    leavesDataset: true,
    commits: (call, ds) => call.fn === 'rename' && call.paths[1] === join(ds, 'trajstore.json'),
  },
  {
    name: 'replace',
    fromDataset: true,
    args: (ds, sources) => ['import', '-f', join(sources, 'b.jsonl'), '-t', ds, '--mode', 'replace', '--yes'],
    leavesDataset: true,
    commits: (call, ds) => call.fn === 'rename' && BUILD.test(call.paths[0] ?? '') && call.paths[1] === ds,
  },
  {
    name: 'create',
    fromDataset: false,
    args: (ds, sources) => ['import', '-f', join(sources, 'b.jsonl'), '-t', ds],
    leavesDataset: true,
    commits: (call, ds) => call.fn === 'rename' && BUILD.test(call.paths[0] ?? '') && call.paths[1] === ds,
  },
  {
    name: 'drop',
    fromDataset: true,
    args: (ds) => ['drop', ds, '--yes'],
    leavesDataset: false,
    commits: (call, ds) => call.fn === 'rename' && call.paths[0] === ds,
  },
];

/** The documents of the fixture dataset, of the writer's source (b) and of the next writer's (c). */
const OLD = ['incident-triage-0007/sub-1', 'traj-incident-0007'];
const B = ['b-0', 'b-1', 'b-2'];
const C = ['c-0'];

/** Ids of the single-document sources that the sync scenario's template appends one at a time (one small part each). */
const SMALL = Array.from({ length: 8 }, (_, i) => `s-${i}`);

/**
 * sync over a dataset of many small parts whose sources it converts again: the retiring append,
 * then compaction and, with no grace period, reclamation of every superseded snapshot and part.
 */
export const SYNC_SCENARIO: Scenario = {
  name: 'sync',
  fromDataset: true,
  // A mirror of each run's own, beside its directory: a killed run leaves the mirror's lock, which the next run on it
  // would take over with a call more, and each run must make the calls of the clean run that numbered them.
  args: (ds, sources) => ['sync', '--from', join(sources, '..', 'sync-src'), '--to', `${dirname(ds)}-mirror`, '--convert', ds, '--once'],
  leavesDataset: true,
  commits: (call, ds) => call.fn === 'rename' && call.paths[1] === join(ds, 'trajstore.json'),
  async prepare(b) {
    const src = join(b.sources, '..', 'sync-src');
    mkdirSync(src);
    for (const id of SMALL) {
      writeStorylines(join(src, `${id}.jsonl`), [id]);
      const r = await runTool('trajstore', ['import', '-f', join(src, `${id}.jsonl`), '-t', join(b.template, 'ds'), '--mode', 'append'], { env: b.env });
      assert.is(r.code, 0, r.stderr);
    }
    writeStorylines(join(src, 'b.jsonl'), B);
  },
  documents: { old: [...OLD, ...SMALL].sort(), done: [...OLD, ...SMALL, ...B].sort() },
  env: { TRAJSTORE_RECLAIM_GRACE: '0' },
};

/** Where a scenario starts: a directory with the dataset (or nothing) and, apart from it, the sources. */
export interface Bench {
  sources: string;
  template: string;
  env: NodeJS.ProcessEnv;
}

export async function bench(scenario: Scenario): Promise<Bench> {
  const root = scratchDir(`kill-${scenario.name}`);
  const sources = join(root, 'sources');
  mkdirSync(sources);
  writeStorylines(join(sources, 'b.jsonl'), B);
  writeStorylines(join(sources, 'c.jsonl'), C);
  const template = join(root, 'template');
  mkdirSync(template);
  const env = homeEnv(root);
  if (scenario.fromDataset) {
    const r = await runTool('trajstore', ['import', '-f', STORYLINES, '-t', join(template, 'ds')], { env });
    assert.is(r.code, 0, r.stderr);
  }
  const b = { sources, template, env };
  await scenario.prepare?.(b);
  return b;
}

let copies = 0;
/** A fresh copy of the template (or of any state), to run one writer on. */
function copyOf(from: string, root: string): string {
  const to = join(root, `run-${++copies}`);
  cpSync(from, to, { recursive: true });
  return to;
}

/** Runs the scenario's writer under the shim, from a fresh copy of the template; `killAt` 0 runs it whole. */
async function runWriter(scenario: Scenario, b: Bench, killAt: number, log?: string): Promise<{ dir: string; result: ToolResult }> {
  const dir = copyOf(b.template, join(b.template, '..'));
  // The compile cache would add Node's own renames and fsyncs of its cache files to the count.
  const shim = { LD_PRELOAD: SHIM, NODE_DISABLE_COMPILE_CACHE: '1', KILLPOINT_AT: String(killAt), ...(log ? { KILLPOINT_LOG: log } : {}) };
  const result = await runTool('trajstore', scenario.args(join(dir, 'ds'), b.sources), { env: { ...b.env, ...scenario.env, ...shim } });
  return { dir, result };
}

/** The calls of a clean run of the scenario's writer, each a kill point. */
export async function killPoints(scenario: Scenario, b: Bench): Promise<Call[]> {
  const log = join(b.sources, '..', `${scenario.name}.calls`);
  const { dir, result } = await runWriter(scenario, b, 0, log);
  assert.is(result.code, 0, result.stderr);
  const calls = readFileSync(log, 'utf8')
    .trim()
    .split('\n')
    .map((line): Call => {
      const [n = '', fn = '', ...paths] = line.split(' ');
      return { n: Number(n), fn, paths: paths.map((p) => p.replace(dir, '<dir>')) };
    });
  rmSync(dir, { recursive: true, force: true });
  return calls;
}

/** The documents a reader gets from the dataset at `ds` (null: none there), checked by `stats` and `export` alike. */
async function readerView(ds: string, env: NodeJS.ProcessEnv): Promise<string[] | null> {
  const stats = await runTool('trajstore', ['stats', ds, '--format', 'json'], { env });
  const exported = await runTool('trajstore', ['export', '-f', ds, '-t', '-', '-o', 'storyline'], { env });
  if (stats.code === 3 && exported.code === 3) return null;
  assert.is(stats.code, 0, stats.stderr);
  assert.is(exported.code, 0, exported.stderr);
  // A document's id is its trajectory, else its session (import.ts).
  const ids = exported.stdout
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as { trajectory?: string; session: string })
    .map((doc) => doc.trajectory ?? doc.session);
  const runs = (JSON.parse(stats.stdout) as { relations: Array<{ relation: string; rows: number; index_rows: number }> }).relations.find((r) => r.relation === 'runs');
  assert.is(runs?.rows, ids.length);
  assert.is(runs?.index_rows, ids.length);
  return ids.sort();
}

/** The document ids of the dataset at `ds`, from its index (opened here: the readers' side is checked above). */
async function documentIds(ds: string): Promise<string[]> {
  const dataset = await openDataset(ds);
  try {
    return (dataset.db.prepare('SELECT document_id FROM runs ORDER BY document_id').all() as Array<{ document_id: string }>).map((row) => row.document_id);
  } finally {
    dataset.close();
  }
}

/**
 * Kills the writer right after call `point`, then checks what readers see and what the next
 * writer leaves (see the top of this file). `commit` is the number of the scenario's commit call.
 */
export async function checkKillPoint(scenario: Scenario, b: Bench, point: Call, commit: number): Promise<void> {
  const at = `${scenario.name}, killed after call ${point.n} (${point.fn} ${point.paths.join(' ')})`;
  const { dir, result } = await runWriter(scenario, b, point.n);
  assert.is(result.signal, 'SIGKILL', `${at}: the writer was not killed (${result.code}): ${result.stderr}`);
  const committed = point.n >= commit;
  const old = scenario.documents?.old ?? (scenario.fromDataset ? OLD : null);
  const done = scenario.documents?.done ?? (scenario.leavesDataset ? (scenario.name === 'append' ? [...OLD, ...B].sort() : B) : null);
  const expected = committed ? done : old;
  // Readers look at a copy, so that the next writer finds exactly what the killed one left.
  const copy = copyOf(dir, join(dir, '..'));
  assert.equal(await readerView(join(copy, 'ds'), b.env), expected, `${at}: readers`);
  rmSync(copy, { recursive: true, force: true });
  const ds = join(dir, 'ds');
  const next = await runTool('trajstore', ['import', '-f', join(b.sources, 'c.jsonl'), '-t', ds, '--mode', expected ? 'append' : 'create', '--lock-timeout', '0'], { env: b.env });
  assert.is(next.code, 0, `${at}: the next writer: ${next.stderr}`);
  assert.equal(await documentIds(ds), [...(expected ?? []), ...C].sort(), `${at}: after the next writer`);
  assert.equal(leftovers(ds), [], `${at}: left on disk`);
  assert.equal(readdirSync(dir), ['ds'], `${at}: beside the dataset`);
  rmSync(dir, { recursive: true, force: true });
}

/** The number of the scenario's commit call in a clean run. */
export function commitOf(scenario: Scenario, calls: readonly Call[]): number {
  const commit = calls.find((call) => scenario.commits(call, '<dir>/ds'));
  assert.ok(commit, `${scenario.name}: no commit call among ${calls.length}`);
  return commit.n;
}

