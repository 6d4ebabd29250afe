/**
 * Every valid fixture tree under ../shared/fixtures imported through `-i auto` in one run: each file
 * detected as its format, with the counts the fixtures README states where it states them.
 */
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool } from '../../lib/testing/run-tool.js';
import { scratchDir } from '../../lib/testing/scratch.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';

const home = scratchDir('import-fixtures');
const env = { HOME: home, XDG_CONFIG_HOME: join(home, 'cfg'), XDG_DATA_HOME: join(home, 'data') };

async function importTree(path: string, ...extra: string[]) {
  const target = join(home, `ds-${Math.random().toString(36).slice(2)}`);
  const r = await runTool('trajstore', ['--log-level', 'info', 'import', '-f', path, '-t', target, '--format', 'json', ...extra], { env, timeoutMs: 120_000 });
  assert.is(r.code, 0, `${path}: ${r.stderr}`);
  return { summary: JSON.parse(r.stdout), stderr: r.stderr };
}

test('the synthetic Claude Code projects: usage counted once per API response (fixtures README)', async () => {
  const { summary, stderr } = await importTree(join(SHARED_FIXTURES, 'synthetic', 'claude-code', 'projects', '-home-dev-ledger-svc'));
  assert.match(stderr, /detected agentb-code/);
  const totals = summary.by_format.find((f: { format: string }) => f.format === 'agentb-code');
  assert.is(totals.tool_calls, 4);
  assert.is(totals.prompt_tokens, 88788);
  assert.is(totals.completion_tokens, 1129);
  assert.is(totals.cached_tokens, 81944);
});

test('each fixture tree imports with its format detected per file', async () => {
  const trees: Array<[string, string]> = [
    ['synthetic/claude-code', 'agentb-code'],
    ['synthetic/codex', 'agenta'],
    ['synthetic/actf', 'actf'],
    ['synthetic/chat-messages', 'chat-messages'],
    ['synthetic/storyline', 'storyline'],
    ['synthetic/edge', 'agentb-code'],
    ['persisting/atif', 'atif'],
    ['persisting/import_roundtrip', 'actf'],
  ];
  for (const [tree, format] of trees) {
    const { summary } = await importTree(join(SHARED_FIXTURES, ...tree.split('/')));
    assert.equal(summary.by_format.map((f: { format: string }) => f.format), [format], tree);
    assert.ok(summary.total.runs > 0 && summary.total.steps > 0, tree);
  }
});

test.run();
