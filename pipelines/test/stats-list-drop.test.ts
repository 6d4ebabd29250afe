/**
 * `stats`, `stats overview|agents|models|tools`, `list|ls` and `drop` through the real CLI, with the
 * expected numbers computed here from the fixture files (and the Parquet part files on disk).
 */
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import Database from 'better-sqlite3';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool } from '../../lib/testing/run-tool.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';

const home = mkdtempSync(join(tmpdir(), 'stats-test-'));
const env = { HOME: home, XDG_CONFIG_HOME: join(home, 'config'), XDG_DATA_HOME: join(home, 'data'), XDG_CACHE_HOME: join(home, 'cache') };
const trajstore = (args: string[]) => runTool('trajstore', args, { env, cwd: home });
const json = async (args: string[]): Promise<unknown> => {
  const r = await trajstore([...args, '--format', 'json']);
  assert.is(r.code, 0, r.stderr);
  return JSON.parse(r.stdout);
};

const ATIF_DIR = join(SHARED_FIXTURES, 'persisting', 'atif');
const COMPACT_DIR = join(SHARED_FIXTURES, 'synthetic', 'compact-jsonl', 'valid');
const atif = join(home, 'atif');
const compact = join(home, 'compact');

interface Step {
  source: string;
  timestamp?: string;
  model_name?: string;
  metrics?: { prompt_tokens?: number; completion_tokens?: number; cached_tokens?: number };
  tool_calls?: Array<{ function_name: string }>;
}
interface Doc {
  agent: { name: string; model_name?: string };
  steps: Step[];
}
const files = readdirSync(ATIF_DIR).filter((f) => f.endsWith('.json')).sort();
const docs = files.map((f) => JSON.parse(readFileSync(join(ATIF_DIR, f), 'utf8')) as Doc);
const allSteps = docs.flatMap((d) => d.steps);
const sum = (values: Array<number | undefined>) => values.reduce<number>((n, v) => n + (v ?? 0), 0);
const iso = (t: string) => new Date(t).toISOString();

test.before(async () => {
  for (const [from, to, extra] of [
    [ATIF_DIR, atif, []],
    [COMPACT_DIR, compact, ['-i', 'compact-jsonl']],
  ] as const) {
    const r = await trajstore(['import', '-f', from, '-t', to, ...extra]);
    assert.is(r.code, 0, r.stderr);
  }
});

test('stats: kind, snapshot, rows, parts and bytes per relation, index and full-text state', async () => {
  const health = (await json(['stats', atif])) as Record<string, unknown> & { relations: Array<Record<string, unknown>> };
  const manifest = JSON.parse(readFileSync(join(atif, 'trajstore.json'), 'utf8')) as { snapshot_id: string };
  assert.is(health.kind, 'storyline');
  assert.is(health.snapshot_id, manifest.snapshot_id);
  assert.is(health.index_state, 'present');
  assert.is(health.index_rebuilt, false);
  assert.is(health.fts_available, true);
  assert.is(health.tokenizer, 'unicode61+cjk-chars');
  const byName = new Map(health.relations.map((r) => [r.relation, r]));
  const expectedRows = { runs: docs.length, steps: allSteps.length, tool_calls: sum(allSteps.map((s) => s.tool_calls?.length)), sources: files.length };
  for (const [relation, rows] of Object.entries(expectedRows)) {
    const r = byName.get(relation);
    assert.ok(r, relation);
    assert.is(r?.rows, rows, relation);
    assert.is(r?.index_rows, rows, relation);
    // Parts and bytes as the files on disk say.
    const dir = join(atif, 'parts', relation);
    const parts = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.parquet')) : [];
    assert.is(r?.parts, parts.length, relation);
    assert.is(r?.bytes, sum(parts.map((p) => statSync(join(dir, p)).size)), relation);
    assert.ok((r?.index_bytes as number) > 0, `${relation} has bytes in the index`);
  }
  // The bytes by component: every part on disk, the index file, and the content store and full-text index within.
  const allParts = readdirSync(join(atif, 'parts'), { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.parquet'));
  assert.is(health.parts_bytes, sum(allParts.map((p) => statSync(join(atif, 'parts', p)).size)));
  assert.is(health.index_bytes, statSync(join(atif, 'index.sqlite')).size);
  const contents = byName.get('contents');
  assert.is(health.content_store_bytes, (contents?.bytes as number) + (contents?.index_bytes as number));
  assert.ok((health.full_text_bytes as number) > 0 && (health.full_text_bytes as number) < (health.index_bytes as number));
  const table = await trajstore(['stats', atif]);
  assert.match(table.stdout, /snapshot_id\s+[0-9a-f]{20}\n/);
  assert.match(table.stdout, /RELATION\s+ROWS\s+PARTS\s+PART BYTES\s+INDEX_ROWS\s+INDEX_BYTES\n/);
});

test('stats reports a missing or stale index, and answers from a rebuilt one', async () => {
  const copy = join(home, 'atif-copy');
  cpSync(atif, copy, { recursive: true });
  rmSync(join(copy, 'index.sqlite'));
  const missing = (await json(['stats', copy])) as Record<string, unknown>;
  assert.is(missing.index_state, 'missing');
  assert.is(missing.index_rebuilt, true);
  const again = (await json(['stats', copy])) as Record<string, unknown>;
  assert.is(again.index_state, 'present');
  // Another snapshot's index in place of this one's.
  const other = join(home, 'other');
  assert.is((await trajstore(['import', '-f', join(ATIF_DIR, 'dialogue_10.json'), '-t', other])).code, 0);
  cpSync(join(other, 'index.sqlite'), join(copy, 'index.sqlite'));
  const stale = (await json(['stats', copy])) as Record<string, unknown> & { relations: Array<{ relation: string; index_rows: number }> };
  assert.is(stale.index_state, 'stale');
  assert.is(stale.index_rebuilt, true);
  assert.is(stale.relations.find((r) => r.relation === 'runs')?.index_rows, docs.length);
  // This snapshot's index, but of an older index format (1: trigram full-text): rebuilt like a stale one.
  const old = new Database(join(copy, 'index.sqlite'));
  old.prepare("UPDATE index_meta SET value = '1' WHERE key = 'index_format'").run();
  old.close();
  const older = (await json(['stats', copy])) as Record<string, unknown>;
  assert.is(older.index_state, 'stale');
  assert.is(older.index_rebuilt, true);
  assert.is(((await json(['stats', copy])) as Record<string, unknown>).index_state, 'present');
});

test('stats overview: runs, steps, tool calls, tokens, durations and steps per run', async () => {
  const [row] = (await json(['stats', 'overview', atif])) as Array<Record<string, number | string | null>>;
  assert.is(row?.runs, docs.length);
  assert.is(row?.steps, allSteps.length);
  assert.is(row?.tool_calls, sum(allSteps.map((s) => s.tool_calls?.length)));
  // The prompt is split into what was neither read from nor written to the cache, and what was.
  const prompt = (r: Record<string, unknown> | undefined) => Number(r?.input_tokens ?? 0) + Number(r?.cache_read_tokens ?? 0) + Number(r?.cache_write_tokens ?? 0);
  assert.is(prompt(row), sum(allSteps.map((s) => s.metrics?.prompt_tokens)));
  assert.is(row?.cache_read_tokens ?? 0, sum(allSteps.map((s) => s.metrics?.cached_tokens)));
  assert.is(row?.output_tokens, sum(allSteps.map((s) => s.metrics?.completion_tokens)));
  const durations = docs.map((d) => {
    const times = d.steps.map((s) => Date.parse(s.timestamp ?? '')).filter((t) => !Number.isNaN(t));
    return Math.max(...times) - Math.min(...times);
  });
  assert.is(row?.mean_duration_ms, sum(durations) / durations.length);
  const counts = docs.map((d) => d.steps.length).sort((a, b) => a - b);
  assert.is(row?.max_steps_per_run, counts[counts.length - 1]);
  assert.is(row?.median_steps_per_run, ((counts[1] ?? 0) + (counts[2] ?? 0)) / 2);
  assert.is(row?.first_started_at, iso(allSteps.map((s) => s.timestamp ?? '').sort()[0] ?? ''));
});

test('stats agents, models and tools', async () => {
  const agents = (await json(['stats', 'agents', atif])) as Array<Record<string, unknown>>;
  const agentNames = [...new Set(docs.map((d) => d.agent.name))];
  assert.equal(agents.map((a) => a.agent).sort(), agentNames.sort());
  assert.is(sum(agents.map((a) => a.steps as number)), allSteps.length);

  const models = (await json(['stats', 'models', atif])) as Array<Record<string, unknown>>;
  const expectedModels = new Map<string, number>();
  for (const d of docs) {
    for (const s of d.steps.filter((x) => x.source === 'agent')) {
      const model = s.model_name ?? d.agent.model_name ?? '(unknown)';
      expectedModels.set(model, (expectedModels.get(model) ?? 0) + 1);
    }
  }
  assert.equal(new Map(models.map((m) => [m.model as string, m.steps as number])), expectedModels);
  const agentPrompt = sum(allSteps.filter((s) => s.source === 'agent').map((s) => s.metrics?.prompt_tokens));
  assert.is(sum(models.map((m) => Number(m.input_tokens ?? 0) + Number(m.cache_read_tokens ?? 0) + Number(m.cache_write_tokens ?? 0))), agentPrompt);

  const tools = (await json(['stats', 'tools', atif])) as Array<Record<string, unknown>>;
  const expectedCalls = new Map<string, number>();
  for (const s of allSteps) for (const c of s.tool_calls ?? []) expectedCalls.set(c.function_name, (expectedCalls.get(c.function_name) ?? 0) + 1);
  assert.equal(new Map(tools.map((t) => [t.tool as string, t.calls as number])), expectedCalls);
  for (const t of tools) {
    assert.is(t.error_rate, (t.errors as number) / (t.calls as number));
    assert.type(t.median_result_bytes, 'number');
  }
  const csv = await trajstore(['stats', 'tools', atif, '--format', 'csv']);
  assert.is(csv.stdout.split('\n')[0], 'tool,calls,errors,runs,error_rate,median_result_bytes');
});

test('list|ls: one row per source with runs, steps, first and last time', async () => {
  const rows = (await json(['list', atif])) as Array<Record<string, unknown>>;
  assert.equal(
    rows,
    files.map((file, i) => {
      const times = (docs[i]?.steps ?? []).map((s) => iso(s.timestamp ?? '')).sort();
      return { source_path: file, format: 'atif', runs: 1, steps: docs[i]?.steps.length, first_timestamp: times[0], last_timestamp: times[times.length - 1] };
    }),
  );
  const ls = await trajstore(['ls', atif]);
  assert.is(ls.code, 0);
  assert.match(ls.stdout, /^SOURCE_PATH\s+FORMAT\s+RUNS\s+STEPS\s+FIRST_TIMESTAMP\s+LAST_TIMESTAMP\n/);
  assert.is(ls.stdout.trim().split('\n').length, files.length + 1);
});

test('list of a directory of source files (not a dataset) decodes and counts them without writing', async () => {
  const root = join(SHARED_FIXTURES, 'synthetic', 'claude-code');
  const rows = (await json(['ls', root])) as Array<{ source_path: string; format: string; runs: number; steps: number; first_timestamp: string }>;
  const expected: string[] = [];
  const walk = (dir: string, prefix: string): void => {
    for (const name of readdirSync(dir).sort()) {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p, `${prefix}${name}/`);
      else if (name.endsWith('.jsonl')) expected.push(`${prefix}${name}`);
    }
  };
  walk(root, '');
  assert.equal(rows.map((r) => r.source_path), expected.sort());
  assert.ok(rows.every((r) => r.format === 'agentb-code' && r.runs === 1));
  // fixtures/README.md: 1 prompt + 5 API responses, and 1 prompt + 4 API responses in the subagent.
  assert.is(rows.find((r) => r.source_path.includes('2ad842e0'))?.steps, 6);
  assert.is(rows.find((r) => r.source_path.includes('agent-a4c1e9f27b3d5e601'))?.steps, 5);
  const one = (await json(['ls', join(ATIF_DIR, 'dialogue_10.json')])) as Array<{ source_path: string; steps: number }>;
  assert.equal(one.map((r) => [r.source_path, r.steps]), [['dialogue_10.json', 10]]);
  const bad = await trajstore(['ls', join(SHARED_FIXTURES, 'synthetic', 'bad')]);
  assert.is(bad.code, 0);
  assert.match(bad.stderr, 'not listed: truncated.atif.json:');
  assert.match(bad.stderr, 'could not be read and are not listed');
});

test('list and stats of a compact record store; its reports are refused', async () => {
  const rows = (await json(['ls', compact])) as Array<{ source_path: string; records: number }>;
  const expected: Array<[string, number]> = [];
  const walk = (dir: string, prefix: string): void => {
    for (const name of readdirSync(dir).sort()) {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p, `${prefix}${name}/`);
      else expected.push([`${prefix}${name}`, readFileSync(p, 'utf8').split('\n').filter((l) => l.trim() !== '').length]);
    }
  };
  walk(COMPACT_DIR, '');
  assert.equal(rows.map((r) => [r.source_path, r.records]), expected.sort(([a], [b]) => (a < b ? -1 : 1)));
  const health = (await json(['stats', compact])) as { kind: string; fts_available: boolean; relations: Array<{ relation: string; rows: number }> };
  assert.is(health.kind, 'compact');
  assert.is(health.fts_available, false);
  assert.equal(health.relations.map((r) => [r.relation, r.rows]), [['records', sum(expected.map(([, n]) => n))]]);
  const overview = await trajstore(['stats', 'overview', compact]);
  assert.is(overview.code, 2);
  assert.match(overview.stderr, 'compact record store');
  const find = await trajstore(['find', compact, '--match', 'x']);
  assert.is(find.code, 2);
});

test('stats and list of a missing dataset exit 3; a bad --format exits 2', async () => {
  const none = join(home, 'none');
  for (const args of [['stats', none], ['stats', 'models', none]]) {
    const r = await trajstore(args);
    assert.is(r.code, 3, args.join(' '));
    assert.match(r.stderr, `${none}: no such dataset`, args.join(' '));
  }
  // list also reads directories and files of trajectories (a built-in pin such as @agenta is one).
  for (const [arg, path] of [[none, none], ['@agenta', join(home, '.codex', 'sessions')]] as const) {
    const r = await trajstore(['ls', arg]);
    assert.is(r.code, 3, arg);
    assert.match(r.stderr, `trajstore: error: ${path}: no such dataset, directory or file\n`, arg);
  }
  const bad = await trajstore(['ls', atif, '--format', 'yaml']);
  assert.is(bad.code, 2);
  assert.match(bad.stderr, 'invalid --format "yaml"');
});

test('drop refuses roots, home, files, symlinks, non-datasets and datasets with foreign files (exit 2)', async () => {
  const plain = join(home, 'plain-dir');
  mkdirSync(plain);
  writeFileSync(join(plain, 'keep.txt'), 'x');
  const file = join(home, 'a-file');
  writeFileSync(file, 'x');
  const link = join(home, 'link-to-dataset');
  symlinkSync(atif, link);
  const mixed = join(home, 'mixed');
  cpSync(atif, mixed, { recursive: true });
  writeFileSync(join(mixed, 'notes.md'), 'mine');
  const cases: Array<[string, string]> = [
    ['/', 'is a filesystem root'],
    [home, 'is the home directory'],
    [plain, 'is not a trajstore dataset (no trajstore.json)'],
    [file, 'is not a directory'],
    [link, 'is a symbolic link'],
    [mixed, 'holds files that are not part of a dataset (notes.md)'],
  ];
  for (const [target, message] of cases) {
    const r = await trajstore(['drop', target, '--yes']);
    assert.is(r.code, 2, `${target}: ${r.stderr}`);
    assert.match(r.stderr, message);
  }
  assert.ok(existsSync(join(plain, 'keep.txt')));
  assert.ok(existsSync(join(mixed, 'trajstore.json')));
  assert.ok(existsSync(join(atif, 'trajstore.json')));
  const missing = await trajstore(['drop', join(home, 'never-was'), '--yes']);
  assert.is(missing.code, 3);
  assert.match(missing.stderr, `${join(home, 'never-was')}: no such dataset`);
});

test('drop without --yes off a terminal refuses; with --yes it removes the dataset and nothing else', async () => {
  const victim = join(home, 'victim', 'ds');
  mkdirSync(dirname(victim));
  cpSync(atif, victim, { recursive: true });
  writeFileSync(join(dirname(victim), 'neighbour.txt'), 'stay');
  const asked = await trajstore(['drop', victim]);
  assert.is(asked.code, 2);
  assert.match(asked.stderr, 'pass --yes');
  assert.ok(existsSync(join(victim, 'trajstore.json')));
  const r = await trajstore(['drop', victim, '--yes']);
  assert.is(r.code, 0, r.stderr);
  assert.is(r.stdout, `dropped ${victim}\n`);
  assert.not.ok(existsSync(victim));
  assert.equal(readdirSync(dirname(victim)), ['neighbour.txt']);
});

test.after(() => {
  rmSync(home, { recursive: true, force: true });
});

test.run();
