/**
 * A small Storyline dataset written row by row through the dataset writer (pipelines/dataset/writer.ts),
 * for tests of find/query/stats that need exact, hand-chosen content (edge cases no fixture has:
 * NULL columns, typed JSON values, short, accented and CJK terms, LIKE wildcards in text).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatasetWriter } from '../../dataset/writer.js';
import { RUNS, STEPS, TOOL_CALLS, type ColumnDef } from '../../dataset/relations.js';

type Row = Record<string, unknown>;

/** A row with every column of the relation: the given values, NULL (or 0 for counts) elsewhere. */
function full(columns: readonly ColumnDef[], values: Row): Row {
  const row: Row = {};
  for (const c of columns) row[c.name] = values[c.name] ?? (c.nullable ? null : c.type === 'int64' ? 0 : c.type === 'json' ? 'null' : '');
  for (const key of Object.keys(values)) if (!columns.some((c) => c.name === key)) throw new Error(`no column ${key}`);
  return row;
}

export interface StepSpec {
  source: 'system' | 'user' | 'agent';
  message: string;
  reasoning?: string;
  observation?: string;
  metrics?: object;
  extra?: object;
  model?: string;
  timestamp?: string;
  tokens?: { prompt: number; completion: number; cached: number };
  tools?: Array<{ name: string; result: string; error?: boolean }>;
}

export interface RunSpec {
  document_id: string;
  run_id?: string;
  session_id: string;
  source_path: string;
  agent_name?: string;
  agent_model_name?: string;
  extra?: object;
  final_metrics?: object;
  meta?: object;
  notes?: string;
  steps: StepSpec[];
}

export const SAMPLE_RUNS: RunSpec[] = [
  {
    document_id: 'doc-a',
    run_id: 'run-1',
    session_id: 's-a',
    source_path: 'a/alpha.json',
    agent_name: 'ops-bot',
    agent_model_name: 'gpt-x',
    extra: { status: 'done', score: 0.9, count: 5, flag: true, nothing: null, label: '5' },
    final_metrics: { total_steps: 3 },
    steps: [
      { source: 'system', message: 'You are a careful assistant at the Café Noël (喫茶店コーヒー).', timestamp: '2026-05-01T10:00:00.000Z' },
      { source: 'user', message: 'The disk is full on host alpha (서버가 가득 찼습니다)', timestamp: '2026-05-01T10:00:01.000Z' },
      {
        source: 'agent',
        message: 'Let me check the df output (100%_used)',
        reasoning: 'maybe logs fill the disk',
        observation: 'Filesystem 100% used',
        metrics: { prompt_tokens: 120, latency: 2.5 },
        model: 'gpt-x-mini',
        timestamp: '2026-05-01T10:00:02.000Z',
        tokens: { prompt: 120, completion: 30, cached: 100 },
        tools: [{ name: 'bash', result: 'Filesystem 100% used' }],
      },
    ],
  },
  {
    document_id: 'doc-b',
    run_id: 'run-2',
    session_id: 's-b',
    source_path: 'b/beta.json',
    agent_name: 'helper',
    agent_model_name: 'claude-y',
    extra: { status: 'failed', score: 0.2, count: 50 },
    meta: { team: 'blue' },
    steps: [
      { source: 'user', message: '请帮我检查服务器日志', timestamp: '2026-05-02T09:00:00.000Z' },
      {
        source: 'agent',
        message: '好的，我来看看日志文件',
        reasoning: '检查日志',
        metrics: { prompt_tokens: 50 },
        timestamp: '2026-05-02T09:00:05.000Z',
        tokens: { prompt: 50, completion: 10, cached: 0 },
        tools: [
          { name: 'read_file', result: 'x'.repeat(10), error: true },
          { name: 'bash', result: 'y'.repeat(30) },
        ],
      },
      { source: 'user', message: 'ok', timestamp: '2026-05-02T09:00:09.000Z' },
    ],
  },
];

/** Writes `runs` as a Storyline dataset at a new temporary path and returns that path. */
export async function writeSampleDataset(runs: RunSpec[] = SAMPLE_RUNS): Promise<string> {
  const path = join(mkdtempSync(join(tmpdir(), 'trajstore-search-')), 'ds');
  const writer = await DatasetWriter.begin({ path, mode: 'create', kind: 'storyline' });
  for (const run of runs) {
    const steps = run.steps.map((s, i) =>
      full(STEPS, {
        document_id: run.document_id,
        session_id: run.session_id,
        step_id: String(i + 1),
        turn_ordinal: i,
        source: s.source,
        effective_kind: s.source,
        timestamp: s.timestamp ?? null,
        model_name: s.model ?? null,
        message_text: s.message,
        message_json: JSON.stringify(s.message),
        reasoning_content: s.reasoning ?? null,
        observation_text: s.observation ?? null,
        prompt_tokens: s.tokens?.prompt ?? null,
        completion_tokens: s.tokens?.completion ?? null,
        cached_tokens: s.tokens?.cached ?? null,
        tool_call_count: s.tools?.length ?? 0,
        metrics_json: s.metrics ? JSON.stringify(s.metrics) : null,
        extra_json: s.extra ? JSON.stringify(s.extra) : null,
        turn_json: JSON.stringify({ id: i + 1, src: s.source }),
      }),
    );
    const calls = run.steps.flatMap((s, i) =>
      (s.tools ?? []).map((t, k) =>
        full(TOOL_CALLS, {
          document_id: run.document_id,
          session_id: run.session_id,
          step_id: String(i + 1),
          turn_ordinal: i,
          call_index: k,
          tool_call_id: `${run.document_id}-${i}-${k}`,
          function_name: t.name,
          arguments_json: '{}',
          result_json: JSON.stringify(t.result),
          result_bytes: Buffer.byteLength(t.result),
          is_error: t.error ?? false,
        }),
      ),
    );
    const sum = (pick: (s: StepSpec) => number | undefined): number | null => {
      const values = run.steps.map(pick).filter((v): v is number => v !== undefined);
      return values.length ? values.reduce((a, b) => a + b, 0) : null;
    };
    const times = run.steps.map((s) => s.timestamp).filter((t): t is string => t !== undefined);
    await writer.add('runs', [
      full(RUNS, {
        document_id: run.document_id,
        run_id: run.run_id ?? null,
        session_id: run.session_id,
        source_path: run.source_path,
        source_format: 'storyline',
        source_document: 0,
        agent_id: run.agent_name ?? 'agent',
        agent_name: run.agent_name ?? null,
        agent_model_name: run.agent_model_name ?? null,
        started_at: times[0] ?? null,
        finished_at: times[times.length - 1] ?? null,
        step_count: run.steps.length,
        tool_call_count: calls.length,
        prompt_tokens: sum((s) => s.tokens?.prompt),
        completion_tokens: sum((s) => s.tokens?.completion),
        cached_tokens: sum((s) => s.tokens?.cached),
        notes: run.notes ?? null,
        extra_json: run.extra ? JSON.stringify(run.extra) : null,
        final_metrics_json: run.final_metrics ? JSON.stringify(run.final_metrics) : null,
        meta_json: run.meta ? JSON.stringify(run.meta) : null,
        document_json: '{}',
      }),
    ]);
    await writer.add('steps', steps);
    if (calls.length) await writer.add('tool_calls', calls);
    await writer.add('sources', [
      { source_path: run.source_path, source_document: 0, format: 'storyline', run_count: 1, byte_size: 100, sha256: null, raw: null, imported_at: '2026-05-03T00:00:00.000Z' },
    ]);
  }
  await writer.commit();
  return path;
}

/** A dataset of `runs` runs of `steps` agent steps of about 500 bytes each: big enough that reading it all takes a while. */
export function writeLargeDataset(runs: number, steps: number): Promise<string> {
  const turns = Array.from({ length: steps }, (_, i) => ({ source: 'agent' as const, message: `step ${i} `.repeat(60) }));
  return writeSampleDataset(Array.from({ length: runs }, (_, r) => ({ document_id: `big-${r}`, session_id: `s-${r}`, source_path: `big/${r}.json`, steps: turns })));
}
