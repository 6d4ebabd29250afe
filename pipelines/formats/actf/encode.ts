/**
 * Storyline to ACTF v1.0: adjacent Storylines of the same `run` become the attempts of one ACTF
 * document (keyed by `attempt_id`, else 1, 2, ...). Storylines decoded from ACTF get back what the
 * decoder moved aside (`task.extra`, `task.result`, tool and observation `extra`, unknown fields).
 * Others are folded into ACTF's shape: every agent turn is a step, and the user and system turns
 * before it become that step's `user_content` and `system_prompt`.
 */
import { assignOwn } from '../../../lib/own-property.js';
import type { ObservationResult, Storyline, ToolCall, Turn } from '../../storyline/schema.js';
import type { EncodedDocument } from '../types.js';
import { resultsByCallingTurn } from '../common/observations.js';
import { isJsonObject, type JsonObject } from '../../../lib/json-object.js';
import { reimportableJson } from '../../../lib/json-text.js';
import { defined, restoreUnknown, synthesizedSet, unknownFieldsOf } from '../common/unknown.js';
import { contentText, safeFileName } from '../common/values.js';
import { ACTF_VERSION, FORMAT } from './decode.js';

export async function* encodeActf(docs: AsyncIterable<Storyline>): AsyncGenerator<EncodedDocument> {
  let group: Storyline[] = [];
  const runOf = (doc: Storyline) => doc.run ?? doc.session;
  for await (const doc of docs) {
    if (group.length > 0 && runOf(group[0] as Storyline) !== runOf(doc)) {
      yield encodeDocument(group);
      group = [];
    }
    group.push(doc);
  }
  if (group.length > 0) yield encodeDocument(group);
}

function encodeDocument(group: Storyline[]): EncodedDocument {
  const first = group[0] as Storyline;
  const fromActf = first.origin?.format === FORMAT;
  const taskId = first.run ?? first.session;
  const task = first.task ?? {};
  const attempts: JsonObject = {};
  group.forEach((doc, i) => {
    let key = doc.attempt_id ?? String(i + 1);
    while (Object.hasOwn(attempts, key)) key = `${key}#${i + 1}`;
    attempts[key] = encodeAttempt(doc);
  });
  const root: JsonObject = { task_id: taskId };
  if (fromActf) {
    // k back where ACTF documents have it, after the category: the decoder keeps it apart from the
    // other document keys, and written after them a re-import would export other bytes.
    const extra = task.extra ?? {};
    if (Object.hasOwn(extra, 'category')) root.category = extra.category;
    if (task.llm?.k !== undefined) root.k = task.llm.k;
    assignOwn(root, extra);
  } else {
    // ACTF's required document keys, from what the Storylines say.
    const correct = group.some((doc) => doc.task?.result?.correct === true);
    assignOwn(Object.assign(root, { category: 'uncategorized', k: group.length, correct, attempts_tried: group.length, solved_at: null }), task.extra ?? {});
    if (task.llm?.k !== undefined) root.k = task.llm.k;
  }
  root.attempts = attempts;
  for (const doc of group) if (doc.origin?.format === FORMAT) restoreUnknown(root, unknownFieldsOf(doc, FORMAT));
  return { name: safeFileName(taskId, '.actf.json'), value: root };
}

function encodeAttempt(doc: Storyline): JsonObject {
  const fromActf = doc.origin?.format === FORMAT;
  const synthesized = synthesizedSet(doc);
  const outcome = doc.task?.result ?? {};
  const attempt: JsonObject = fromActf ? { ...outcome } : { correct: outcome.correct === true, ...outcome };
  const trajectory: JsonObject = { schema_version: ACTF_VERSION };
  Object.assign(trajectory, defined({ started_at: doc.started_at, finished_at: doc.finished_at }));
  trajectory.steps = fromActf ? actfSteps(doc, synthesized) : foldedSteps(doc);
  attempt.trajectory = trajectory;
  return attempt;
}

/** Steps of a Storyline decoded from ACTF: one per turn. */
function actfSteps(doc: Storyline, synthesized: Set<string>): JsonObject[] {
  const results = resultsByCallingTurn(doc.turns);
  return doc.turns.map((turn, t) => {
    const prompt = { ...(doc.prompt ?? {}), ...(turn.prompt ?? {}) } as JsonObject;
    return encodeStep(turn, t, results[t] as ObservationResult[], { system: prompt.system, user: prompt.user }, true, synthesized);
  });
}

/** Steps of any other Storyline: each agent turn is a step; user and system turns feed its prompts. */
function foldedSteps(doc: Storyline): JsonObject[] {
  const results = resultsByCallingTurn(doc.turns);
  const steps: JsonObject[] = [];
  let system: string | null = doc.prompt?.system ?? null;
  let user: string[] = doc.prompt?.user ? [doc.prompt.user] : [];
  const orphanResults: ObservationResult[] = [];
  doc.turns.forEach((turn, t) => {
    if (turn.src === 'agent') {
      const own = [...orphanResults.splice(0), ...(results[t] as ObservationResult[])];
      steps.push(encodeStep(turn, steps.length, own, { system, user: user.length > 0 ? user.join('\n\n') : null }, false, new Set()));
      user = [];
    } else {
      if (turn.src === 'system') system = contentText(turn.msg);
      else user.push(contentText(turn.msg));
      orphanResults.push(...(results[t] as ObservationResult[]));
    }
  });
  if (user.length > 0 || orphanResults.length > 0) {
    // Trailing user input with no agent reply: a step with empty assistant content keeps it.
    const turn: Turn = { id: steps.length + 1, src: 'agent', msg: '' };
    steps.push(encodeStep(turn, steps.length, orphanResults, { system, user: user.length > 0 ? user.join('\n\n') : null }, false, new Set()));
  }
  return steps;
}

function encodeStep(
  turn: Turn,
  index: number,
  results: ObservationResult[],
  prompt: { system: unknown; user: unknown },
  fromActf: boolean,
  synthesized: Set<string>,
): JsonObject {
  const calls = (turn.tool_calls ?? []).map((call, c) => encodeTool(call, fromActf && synthesized.has(`/turns/${index}/tool_calls/${c}/tcid`)));
  const kinds = new Map((turn.tool_calls ?? []).map((call) => [call.tcid, call.kind]));
  const step: JsonObject = { step_id: fromActf && typeof turn.id === 'number' ? turn.id : index + 1 };
  Object.assign(step, defined({ started_at: turn.ts, finished_at: turn.finished_at }));
  Object.assign(step, fromActf ? defined({ system_prompt: prompt.system, user_content: prompt.user }) : { system_prompt: prompt.system ?? null, user_content: prompt.user ?? null });
  const content = fromActf || typeof turn.msg === 'string' ? turn.msg : contentText(turn.msg);
  const assistant: JsonObject = { content };
  if (turn.reason !== undefined || !fromActf) assistant.reasoning_content = turn.reason ?? null;
  assistant.tool_calls = calls.map((call) => structuredClone(call));
  step.assistant_content = assistant;
  const metricExtra = turn.metrics?.extra ?? {};
  const metric = {
    prompt_tokens_len: turn.metrics?.prompt_tokens,
    completion_tokens_len: turn.metrics?.completion_tokens,
    llm_infer_ms: turn.latency_ms,
    env_action_ms: metricExtra.env_action_ms,
    stop_reason: metricExtra.stop_reason,
  };
  if (fromActf) {
    if (turn.metrics !== undefined || turn.latency_ms !== undefined) step.metric = defined(metric);
  } else {
    step.metric = Object.fromEntries(Object.entries(metric).map(([k, v]) => [k, v ?? null]));
  }
  if (turn.metrics?.cached_tokens != null) (step.metric as JsonObject).cached_tokens_len = turn.metrics.cached_tokens;
  step.tools = calls;
  step.observation = results.map((result) => encodeObservation(result, kinds));
  return step;
}

function encodeTool(call: ToolCall, idSynthesized: boolean): JsonObject {
  const { function: fnExtra, ...extra } = call.extra ?? {};
  const out: JsonObject = {};
  if (call.kind !== undefined) out.type = call.kind;
  if (!idSynthesized) out.id = call.tcid;
  if (call.kind === 'command_execution') {
    out.command = isJsonObject(call.args) && Object.hasOwn(call.args, 'command') ? call.args.command : call.args;
    if (call.result !== undefined) out.aggregated_output = call.result;
    Object.assign(out, defined({ exit_code: call.response?.exit_code, status: call.response?.status }));
  } else if (call.kind === 'function') {
    out.function = { ...(isJsonObject(fnExtra) ? fnExtra : {}), name: call.fn, arguments: typeof call.args === 'string' ? call.args : reimportableJson(call.args) };
  } else {
    out.name = call.fn;
    out.input = call.args;
    if (call.result !== undefined) out.result = call.result;
    Object.assign(out, defined({ exit_code: call.response?.exit_code, status: call.response?.status }));
  }
  // Keys kept from the source (or a renamed id's original) come last so they win.
  return { ...out, ...extra };
}

function encodeObservation(result: ObservationResult, kinds: Map<string, string | undefined>): JsonObject {
  const scid = result.source_call_id ?? undefined;
  const command = scid !== undefined && kinds.get(scid) === 'command_execution';
  const out: JsonObject = { ...(result.extra ?? {}) };
  if (scid !== undefined) out[command ? 'id' : 'tool_use_id'] = scid;
  if (result.content !== undefined) out[command ? 'aggregated_output' : 'content'] = result.content;
  if (result.is_error !== undefined) out.is_error = result.is_error;
  return out;
}
