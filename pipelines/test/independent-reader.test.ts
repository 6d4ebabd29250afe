/**
 * The dataset's Parquet parts are its interface to engines that scale out (README, "Reading a
 * dataset with other engines"): an independent reader, pyarrow (installed by scripts/setup.sh into
 * .tools/test-python), opens the parts the current snapshot lists, as the README tells DuckDB, Spark
 * or Trino to, and gets the row counts and token sums `trajstore query` gets.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool } from '../../lib/testing/run-tool.js';
import { TEST_PYTHON } from '../../bench/lib/s3-server.js';
import { scratchDir } from '../../lib/testing/scratch.js';
import { PROJECT_TESTDATA } from './helpers/fixtures.js';

const home = scratchDir('independent-reader');
const env = { HOME: home, XDG_CACHE_HOME: join(home, 'cache'), XDG_CONFIG_HOME: join(home, 'config') };
const dataset = join(home, 'ds');

/** The README's recipe, in pyarrow: the manifest names the snapshot, the snapshot lists each relation's parts. */
const READER = `
import json, sys, os
import pyarrow.parquet as pq, pyarrow.compute as pc
root = sys.argv[1]
manifest = json.load(open(os.path.join(root, 'trajstore.json')))
snapshot = json.load(open(os.path.join(root, 'snapshots', manifest['snapshot_id'] + '.json')))
out = {}
for relation in ['runs', 'steps', 'tool_calls']:
    parts = [os.path.join(root, p['key']) for p in snapshot['relations'][relation]]
    table = pq.ParquetDataset(parts).read()
    out[relation] = {'rows': table.num_rows}
    for column in ['prompt_tokens', 'completion_tokens', 'cached_tokens']:
        if column in table.column_names:
            out[relation][column] = pc.sum(table[column]).as_py() or 0
print(json.dumps(out))
`;

test('pyarrow reading the current snapshot\'s parts gets the row counts and token sums of trajstore query', async () => {
  const samples = join(PROJECT_TESTDATA, 'samples');
  for (const [mode, from] of [['create', 'agentb-code'], ['append', 'atif'], ['append', 'agenta']] as const) {
    const r = await runTool('trajstore', ['import', '-f', join(samples, from), '-t', dataset, '--mode', mode], { env, cwd: home });
    assert.is(r.code, 0, r.stderr);
  }
  const read = spawnSync(TEST_PYTHON, ['-c', READER, dataset], { encoding: 'utf8' });
  assert.is(read.status, 0, read.stderr);
  const independent = JSON.parse(read.stdout) as Record<string, Record<string, number>>;
  for (const relation of ['runs', 'steps', 'tool_calls']) {
    const sums = relation === 'tool_calls' ? '' : ', sum(prompt_tokens) AS prompt_tokens, sum(completion_tokens) AS completion_tokens, sum(cached_tokens) AS cached_tokens';
    const q = await runTool('trajstore', ['query', dataset, '--sql', `SELECT count(*) AS rows${sums} FROM dataset.${relation}`, '--format', 'json'], { env, cwd: home });
    assert.is(q.code, 0, q.stderr);
    const [row] = JSON.parse(q.stdout) as Array<Record<string, number | null>>;
    for (const [key, value] of Object.entries(row!)) assert.is(independent[relation]![key], value ?? 0, `${relation}.${key}`);
    assert.ok(independent[relation]!.rows! > 0, relation);
  }
  // Three imports: the parts of all three, and more than one part per relation.
  const manifest = JSON.parse(readFileSync(join(dataset, 'trajstore.json'), 'utf8')) as { snapshot_id: string };
  const snapshot = JSON.parse(readFileSync(join(dataset, 'snapshots', `${manifest.snapshot_id}.json`), 'utf8')) as { relations: Record<string, unknown[]> };
  assert.ok(snapshot.relations.steps!.length >= 3);
});

test.run();
