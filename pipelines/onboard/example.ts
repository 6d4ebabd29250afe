/**
 * The example data of `onboard`: three small Storyline runs (an on-call agent with a full disk, a
 * coding agent fixing a failing test with a tool error on the way, and a support conversation in
 * Chinese), imported through the ordinary import pipeline into a temporary dataset.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ResolveContext } from '../pins/resolve.js';
import { planImport, runImportPlan } from '../import/plan.js';
import type { ImportIO } from '../import/thread/client.js';

function call(tcid: string, fn: string, args: object, result: string, options: { error?: boolean; ms: number; exit?: number }): { call: object; result: object } {
  return {
    call: { tcid, fn, args, result, duration_ms: options.ms, kind: 'function', response: { status: options.error ? 'failed' : 'completed', exit_code: options.exit ?? (options.error ? 1 : 0) } },
    result: { source_call_id: tcid, content: result, ...(options.error ? { is_error: true } : {}) },
  };
}

function agentTurn(id: number, ts: string, text: string, extra: { reason?: string; calls?: Array<ReturnType<typeof call>>; tokens: [number, number]; cost: number; latency: number; model: string }): object {
  return {
    id,
    src: 'agent',
    msg: text,
    ts,
    model: extra.model,
    ...(extra.reason ? { reason: extra.reason } : {}),
    ...(extra.calls ? { tool_calls: extra.calls.map((c) => c.call), observation: { results: extra.calls.map((c) => c.result) } } : {}),
    metrics: { prompt_tokens: extra.tokens[0], completion_tokens: extra.tokens[1], cost_usd: extra.cost },
    latency_ms: extra.latency,
  };
}

const EXAMPLE_RUNS: object[] = [
  {
    schema_version: 'storyline/v1',
    session: 'example-oncall-1',
    run: 'oncall-2026-05-01',
    trajectory: 'oncall-disk-full',
    agent: { id: 'oncall', name: 'ops-bot', model: 'example-large' },
    task: { result: { status: 'done', score: 1 } },
    extra: { status: 'done', team: 'ops' },
    turns: [
      { id: 1, src: 'system', msg: 'You are the on-call assistant. Use the shell carefully.', ts: '2026-05-01T10:00:00Z' },
      { id: 2, src: 'user', msg: 'Alert: the disk is full on host alpha. What is filling it?', ts: '2026-05-01T10:00:01Z' },
      agentTurn(3, '2026-05-01T10:00:04Z', 'Checking disk usage.', {
        reason: 'Logs usually fill disks; look at df first, then du on /var/log.',
        calls: [call('c1', 'bash', { cmd: 'df -h /' }, 'Filesystem  Size  Used Avail Use%\n/dev/sda1   50G   50G     0 100% /', { ms: 120 })],
        tokens: [820, 64],
        cost: 0.0041,
        latency: 2300,
        model: 'example-large',
      }),
      agentTurn(4, '2026-05-01T10:00:09Z', 'The disk is full because /var/log/app grew to 41G. Rotate and compress it.', {
        calls: [call('c2', 'bash', { cmd: 'du -sh /var/log/*' }, '41G /var/log/app\n1.2G /var/log/journal', { ms: 2900 })],
        tokens: [1010, 48],
        cost: 0.0049,
        latency: 1800,
        model: 'example-large',
      }),
    ],
  },
  {
    schema_version: 'storyline/v1',
    session: 'example-coding-1',
    run: 'ci-fix-42',
    trajectory: 'coding-failing-test',
    agent: { id: 'coder', name: 'code-bot', model: 'example-small' },
    task: { result: { status: 'done', score: 0.8 } },
    extra: { status: 'done', team: 'dev' },
    turns: [
      { id: 1, src: 'user', msg: 'The test test_parse_dates fails on CI. Please fix it.', ts: '2026-05-02T09:00:00Z' },
      agentTurn(2, '2026-05-02T09:00:05Z', 'Let me run the failing test.', {
        reason: 'Reproduce before changing anything.',
        calls: [call('c1', 'run_tests', { filter: 'test_parse_dates' }, 'FAILED test_parse_dates: ValueError: time zone "UTC+1" not understood', { ms: 5400, error: true })],
        tokens: [1500, 40],
        cost: 0.0009,
        latency: 1200,
        model: 'example-small',
      }),
      agentTurn(3, '2026-05-02T09:00:20Z', 'The parser did not accept offsets like UTC+1; I added them and the test passes.', {
        calls: [
          call('c2', 'edit_file', { path: 'src/dates.py', change: 'accept UTC±N offsets' }, 'edited src/dates.py', { ms: 40 }),
          call('c3', 'run_tests', { filter: 'test_parse_dates' }, '1 passed in 0.21s', { ms: 3100 }),
        ],
        tokens: [2100, 95],
        cost: 0.0013,
        latency: 2100,
        model: 'example-small',
      }),
    ],
  },
  {
    schema_version: 'storyline/v1',
    session: 'example-support-zh',
    trajectory: 'support-logs-zh',
    agent: { id: 'support', name: 'support-bot', model: 'example-small' },
    task: { result: { status: 'failed', score: 0.2 } },
    extra: { status: 'failed', team: 'support' },
    turns: [
      { id: 1, src: 'user', msg: '请帮我检查服务器日志，为什么登录失败？', ts: '2026-05-03T08:00:00Z' },
      agentTurn(2, '2026-05-03T08:00:06Z', '日志显示认证服务超时，我还不能确定原因。', {
        calls: [call('c1', 'read_logs', { service: 'auth', since: '1h' }, 'auth: upstream timeout after 30s (x17)', { ms: 800 })],
        tokens: [640, 52],
        cost: 0.0004,
        latency: 900,
        model: 'example-small',
      }),
    ],
  },
];

/** A temporary dataset of the example runs; `remove` deletes it (and its source file). */
export async function exampleDataset(rc: ResolveContext, io: ImportIO): Promise<{ path: string; remove(): void }> {
  const dir = mkdtempSync(join(tmpdir(), 'trajstore-onboard-'));
  const remove = (): void => rmSync(dir, { recursive: true, force: true });
  try {
    const source = join(dir, 'example.storyline.jsonl');
    writeFileSync(source, EXAMPLE_RUNS.map((run) => `${JSON.stringify(run)}\n`).join(''));
    const path = join(dir, 'example-dataset');
    const plan = await planImport(rc, { from: source, to: path, inputFormat: 'storyline', outputFormat: 'storyline', mode: 'create', onDuplicate: 'suffix', columns: [], lockTimeoutMs: 0, onError: 'fail' });
    await runImportPlan(plan, io);
    return { path, remove };
  } catch (error) {
    remove();
    throw error;
  }
}
