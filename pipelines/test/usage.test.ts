/**
 * Usage and cost through the real CLI on Claude Code and Codex log trees in which resumed sessions,
 * forks and subagent files repeat earlier API responses. The expected figures are counted here,
 * straight from the log lines: each distinct response once, priced at the providers' list prices.
 */
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool } from '../../lib/testing/run-tool.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';

const home = mkdtempSync(join(tmpdir(), 'usage-test-'));
const env = { HOME: home, XDG_CONFIG_HOME: join(home, 'config'), XDG_DATA_HOME: join(home, 'data'), XDG_CACHE_HOME: join(home, 'cache') };
const trajstore = (args: string[]) => runTool('trajstore', args, { env, cwd: home });
const rowsOf = async (args: string[]): Promise<Array<Record<string, unknown>>> => {
  const r = await trajstore([...args, '--format', 'json']);
  assert.is(r.code, 0, r.stderr);
  return JSON.parse(r.stdout) as Array<Record<string, unknown>>;
};

interface Line {
  [field: string]: unknown;
  type?: string;
  sessionId?: string;
  requestId?: string;
  message?: { [field: string]: unknown; id?: string; model?: string; usage?: Record<string, number> };
}
const readLines = (file: string): Line[] =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Line);
const writeLines = (file: string, lines: Line[]): void => writeFileSync(file, lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
const filesUnder = (dir: string): string[] =>
  readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .map((f) => join(dir, f))
    .filter((f) => statSync(f).isFile() && f.endsWith('.jsonl'));

// List prices in dollars per million tokens (input, output, cache write, cache read), from the providers' price pages.
const LIST_PRICES: Record<string, [number, number, number, number]> = {
  'claude-sonnet-4-6': [3, 15, 3.75, 0.3],
  'claude-opus-4-6': [5, 25, 6.25, 0.5],
  'claude-haiku-4-5-20251001': [1, 5, 1.25, 0.1],
};

interface Usage {
  input: number;
  output: number;
  cacheWrite: number;
  cacheRead: number;
  responses: number;
}

/** Per model: the usage of each distinct (message.id, requestId) once, across the files. */
function distinctClaudeUsage(files: string[]): Map<string, Usage> {
  const seen = new Set<string>();
  const byModel = new Map<string, Usage>();
  for (const file of files) {
    for (const line of readLines(file)) {
      const usage = line.message?.usage;
      if (line.type !== 'assistant' || !usage || !line.message?.model) continue;
      const key = `${line.message.id}:${line.requestId}`;
      if (seen.has(key)) continue;
      seen.add(key);
      const u = byModel.get(line.message.model) ?? { input: 0, output: 0, cacheWrite: 0, cacheRead: 0, responses: 0 };
      u.input += usage.input_tokens ?? 0;
      u.output += usage.output_tokens ?? 0;
      u.cacheWrite += usage.cache_creation_input_tokens ?? 0;
      u.cacheRead += usage.cache_read_input_tokens ?? 0;
      u.responses += 1;
      byModel.set(line.message.model, u);
    }
  }
  return byModel;
}

const costOf = (u: Usage, [input, output, cacheWrite, cacheRead]: [number, number, number, number]): number =>
  (u.input * input + u.output * output + u.cacheWrite * cacheWrite + u.cacheRead * cacheRead) / 1e6;

/**
 * The synthetic Claude Code tree plus what makes totals double-count: a session resumed from the
 * ledger session (its file repeats every earlier line under a new session id, then goes on), and
 * a second subagent whose file opens with a response the first subagent already made.
 */
function claudeTreeWithRepeats(): string {
  const tree = join(home, 'claude');
  cpSync(join(SHARED_FIXTURES, 'synthetic', 'claude-code'), tree, { recursive: true });
  const ledger = join(tree, 'projects', '-home-dev-ledger-svc');
  const original = readLines(join(ledger, '2ad842e0-db61-4fd6-8a57-f55969d81e22.jsonl'));
  const resumedId = '7d0f3c1a-5b2e-4c8d-9a61-3e4f5a6b7c8d';
  const last = original.filter((l) => l.uuid !== undefined).at(-1) as Line;
  const resumed: Line[] = [
    ...original.map((l) => (l.sessionId === undefined ? l : { ...l, sessionId: resumedId })),
    { ...template(last, 'user'), sessionId: resumedId, parentUuid: last.uuid, uuid: 'a1000000-0000-4000-8000-000000000001', timestamp: '2026-05-12T10:02:00.000Z', message: { role: 'user', content: 'Also add a test for JPY, which has no minor unit.' } },
    {
      ...assistantReply(last, 'a1000000-0000-4000-8000-000000000001', 'RESUMED', 'claude-sonnet-4-6', 'Added test_rounding_jpy; it passes.', { input_tokens: 2, cache_creation_input_tokens: 530, cache_read_input_tokens: 19120, output_tokens: 44 }),
      sessionId: resumedId,
      uuid: 'a1000000-0000-4000-8000-000000000002',
      timestamp: '2026-05-12T10:02:09.000Z',
    },
  ];
  writeLines(join(ledger, `${resumedId}.jsonl`), resumed);

  const subagents = join(tree, 'projects', '-home-dev-www-atlas-docs', 'a9a20bd4-fdf9-4885-8fa1-01d41970c171', 'subagents');
  const first = readLines(join(subagents, 'agent-a4c1e9f27b3d5e601.jsonl'));
  const agentId = 'b7e2d4f6a8c0e1357';
  const copied: Line[] = first.slice(0, first.findIndex((l) => l.type === 'assistant') + 1).map((l) => ({ ...l, agentId }));
  const prompt = copied[copied.length - 1] as Line;
  copied.push({
    ...assistantReply(prompt, prompt.uuid as string, 'SUBAGENT', 'claude-haiku-4-5-20251001', 'No broken anchors under docs/guides.', { input_tokens: 4, cache_creation_input_tokens: 880, cache_read_input_tokens: 2212, output_tokens: 27 }),
    agentId,
    uuid: 'b2000000-0000-4000-8000-000000000001',
    timestamp: '2026-05-13T15:05:00.000Z',
  });
  writeLines(join(subagents, `agent-${agentId}.jsonl`), copied);
  return tree;
}

/** A new API response of the session of `like`, answering `parentUuid`; `tag` makes its message and request ids. */
function assistantReply(like: Line, parentUuid: string, tag: string, model: string, text: string, usage: Record<string, number>): Line {
  return {
    ...template(like, 'assistant'),
    parentUuid,
    requestId: `req_011${tag}`.padEnd(31, 'x'),
    message: { model, id: `msg_01${tag}`.padEnd(29, 'x'), type: 'message', role: 'assistant', content: [{ type: 'text', text }], stop_reason: 'end_turn', usage },
  };
}

/** The envelope fields of a log line (cwd, version, branch...), for writing a new line of the same session. */
function template(line: Line, type: 'user' | 'assistant'): Line {
  const { message: _m, requestId: _r, uuid: _u, parentUuid: _p, timestamp: _t, ...rest } = line;
  return { ...rest, type };
}

test('stats models on a Claude Code tree with a resumed session and a repeating subagent: each API response counted once, priced', async () => {
  const tree = claudeTreeWithRepeats();
  const expected = distinctClaudeUsage(filesUnder(tree));
  // The repeats are real: summing every file's responses gives more than the distinct count.
  const dataset = join(home, 'claude-ds');
  const r = await trajstore(['import', '-f', tree, '-t', dataset]);
  assert.is(r.code, 0, r.stderr);

  const models = await rowsOf(['stats', 'models', dataset]);
  assert.equal(models.map((m) => m.model).sort(), [...expected.keys()].sort());
  for (const row of models) {
    const model = row.model as string;
    const want = expected.get(model) as Usage;
    assert.is(row.responses, want.responses, `${model} responses`);
    assert.is(row.input_tokens, want.input, `${model} input_tokens`);
    assert.is(row.output_tokens, want.output, `${model} output_tokens`);
    assert.is(row.cache_write_tokens, want.cacheWrite, `${model} cache_write_tokens`);
    assert.is(row.cache_read_tokens, want.cacheRead, `${model} cache_read_tokens`);
    const cost = costOf(want, LIST_PRICES[model] as [number, number, number, number]);
    assert.ok(Math.abs((row.cost_usd as number) - cost) < 1e-9, `${model} cost_usd ${row.cost_usd} != ${cost}`);
  }

  // Dataset-wide totals agree with the per-model ones; each run keeps its own sums, repeats included.
  const [overview] = await rowsOf(['stats', 'overview', dataset]);
  const all = [...expected.values()];
  assert.is(overview?.output_tokens, all.reduce((n, u) => n + u.output, 0));
  assert.is(overview?.responses, all.reduce((n, u) => n + u.responses, 0));
  const [runs] = await rowsOf(['query', dataset, '--sql', 'SELECT sum(completion_tokens) AS output, count(*) AS runs FROM runs']);
  const everyCopy = filesUnder(tree)
    .map((f) => [...distinctClaudeUsage([f]).values()].reduce((n, u) => n + u.output, 0))
    .reduce((a, b) => a + b, 0);
  assert.is(runs?.output, everyCopy, 'runs keep the responses their files repeat');
  assert.ok(everyCopy > (overview?.output_tokens as number), 'the tree repeats responses');
});

test('a model without a price: no cost, a warning naming it; a [prices."<model>"] entry prices it on the next import', async () => {
  const tree = join(home, 'unpriced');
  cpSync(join(SHARED_FIXTURES, 'synthetic', 'claude-code', 'projects', '-home-dev-ledger-svc'), tree, { recursive: true });
  for (const file of filesUnder(tree)) {
    writeLines(file, readLines(file).map((l) => (l.message?.model ? { ...l, message: { ...l.message, model: 'claude-nimbus-9' } } : l)));
  }
  const want = distinctClaudeUsage(filesUnder(tree)).get('claude-nimbus-9') as Usage;
  const dataset = join(home, 'unpriced-ds');
  assert.is((await trajstore(['import', '-f', tree, '-t', dataset])).code, 0);
  const r = await trajstore(['stats', 'models', dataset, '--format', 'json']);
  assert.is(r.code, 0, r.stderr);
  const [row] = JSON.parse(r.stdout) as Array<Record<string, unknown>>;
  assert.is(row?.model, 'claude-nimbus-9');
  assert.is(row?.cost_usd, null);
  assert.match(r.stderr, /no price for claude-nimbus-9/);

  mkdirSync(join(home, 'config', 'trajstore'), { recursive: true });
  writeFileSync(join(home, 'config', 'trajstore', 'config.toml'), '[prices."claude-nimbus-9"]\ninput = 2\noutput = 8\ncache_write = 2.5\ncache_read = 0.2\n');
  assert.is((await trajstore(['import', '-f', tree, '-t', dataset, '--mode', 'replace', '--yes'])).code, 0);
  const r2 = await trajstore(['stats', 'models', dataset, '--format', 'json']);
  assert.is(r2.code, 0, r2.stderr);
  const [priced] = JSON.parse(r2.stdout) as Array<Record<string, unknown>>;
  assert.ok(Math.abs((priced?.cost_usd as number) - costOf(want, [2, 8, 2.5, 0.2])) < 1e-9, String(priced?.cost_usd));
  assert.not.match(r2.stderr, /no price/);
});

test('Codex: a forked session repeating its parent token_count events counts each model call once', async () => {
  const tree = join(home, 'codex');
  const day = join(tree, 'sessions', '2026', '05', '14');
  cpSync(join(SHARED_FIXTURES, 'synthetic', 'codex', 'sessions', '2026', '05', '14'), day, { recursive: true });
  const [parentFile] = readdirSync(day);
  const parent = readLines(join(day, parentFile as string));
  const forkId = '0196d2a4-0000-7000-8000-00000000f0a1';
  // A fork copies the parent's history as it was, under its own session meta.
  const fork = parent.map((l) => (l.type === 'session_meta' ? { ...l, payload: { ...(l.payload as object), id: forkId } } : l));
  writeLines(join(day, `rollout-2026-05-14T11-00-00-${forkId}.jsonl`), fork);

  const calls = (lines: Line[]) => lines.filter((l) => l.type === 'event_msg' && (l.payload as { type?: string; info?: unknown }).type === 'token_count' && (l.payload as { info?: unknown }).info);
  const lastUsage = (lines: Line[]) => {
    const info = (calls(lines).at(-1)?.payload as { info: { total_token_usage: Record<string, number> } }).info;
    return info.total_token_usage;
  };
  const total = lastUsage(parent);
  const dataset = join(home, 'codex-ds');
  const r = await trajstore(['import', '-f', tree, '-t', dataset]);
  assert.is(r.code, 0, r.stderr);
  const [overview] = await rowsOf(['stats', 'overview', dataset]);
  assert.is(overview?.runs, 2);
  assert.is(overview?.responses, calls(parent).length);
  assert.is(overview?.output_tokens, total.output_tokens);
  assert.is(overview?.cache_read_tokens, total.cached_input_tokens);
  assert.is(overview?.input_tokens, (total.input_tokens as number) - (total.cached_input_tokens as number));
});

test.run();
