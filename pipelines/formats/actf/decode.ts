/**
 * ACTF v1.0 (pChronicle RFC-0004) to Storyline: one Storyline per attempt, mapped as
 * reference/trajectory-formats.md §2 says. Document-level keys other than `task_id`/`k`/`attempts`
 * go to `task.extra` (shared by the attempts), the attempt's keys other than `trajectory` to
 * `task.result`, tool keys without a Storyline field to the tool call's `extra`, observation keys
 * without one to the result's `extra`; other unknown keys to `unknown_fields.sources.actf`.
 */
import { isDeepStrictEqual } from 'node:util';
import type { ObservationResult, Storyline, ToolCall, Turn } from '../../storyline/schema.js';
import { STORYLINE_SCHEMA_VERSION } from '../../storyline/schema.js';
import type { DecodeContext } from '../types.js';
import { failAt, type MemberLocation } from '../common/documents.js';
import { assignDefined, childPointer, defined, isObject, markSynthesized, renumberedId, UnknownFields, type JsonObject } from '../common/unknown.js';
import { decodeObjects, type Fail } from '../common/elements.js';
import {
  LenientReader,
  isArray,
  isContent,
  isCountOrNull,
  isDurationOrNull,
  isNonEmptyString,
  isObjectValue,
  isString,
  isStringOrNull,
  isTimestampOrNull,
  parseArguments,
} from '../common/values.js';

export const FORMAT = 'actf';
export const ACTF_VERSION = 'ACTF_v1.0';
export const ACTF_AGENT = { id: 'actf-agent', name: 'ACTF Agent' } as const;

const TRAJECTORY_KEYS = new Set(['schema_version', 'started_at', 'finished_at', 'steps']);
const STEP_KEYS = new Set(['step_id', 'started_at', 'finished_at', 'system_prompt', 'user_content', 'assistant_content', 'metric', 'tools', 'observation']);
const ASSISTANT_KEYS = new Set(['content', 'reasoning_content', 'tool_calls']);
/** `cached_tokens_len` is ours: ACTF has no cached count, and exports from sources that have one keep it there. */
const METRIC_KEYS = new Set(['prompt_tokens_len', 'completion_tokens_len', 'cached_tokens_len', 'llm_infer_ms', 'env_action_ms', 'stop_reason']);
const TOOL_KEYS = new Set(['id', 'type', 'name', 'input', 'arguments', 'command', 'function', 'aggregated_output', 'exit_code', 'status']);

/** The Storylines of one ACTF document, one per attempt in key order. */
export function decodeActfDocument(value: unknown, where: MemberLocation, ctx: DecodeContext): Storyline[] {
  const fail: Fail = failAt(where);
  if (!isObject(value)) fail('', 'an ACTF document must be a JSON object');
  const doc = value as JsonObject;
  if (!isNonEmptyString(doc.task_id)) fail('/task_id', 'an ACTF document needs a "task_id" string');
  if (!isObject(doc.attempts) || Object.keys(doc.attempts).length === 0) fail('/attempts', 'an ACTF document needs a non-empty "attempts" object');
  const taskId = doc.task_id as string;
  const attempts = doc.attempts as JsonObject;
  const { task_id: _t, attempts: _a, k, ...documentKeys } = doc;
  const keys = Object.keys(attempts);
  return keys.map((key) => {
    const pointer = childPointer('/attempts', key);
    const attempt = attempts[key];
    if (!isObject(attempt)) fail(pointer, 'an ACTF attempt must be a JSON object');
    const { trajectory, ...outcome } = attempt as JsonObject;
    const storyline: Storyline = {
      schema_version: STORYLINE_SCHEMA_VERSION,
      session: keys.length === 1 ? taskId : `${taskId}#attempt-${key}`,
      agent: { ...ACTF_AGENT },
      turns: [],
      origin: defined({ format: FORMAT, schema_version: ACTF_VERSION, document_id: taskId, source_path: where.relPath, line: where.line }),
      run: taskId,
      attempt_id: key,
      task: defined({
        llm: k === undefined ? undefined : { k },
        result: outcome,
        extra: Object.keys(documentKeys).length > 0 ? documentKeys : undefined,
      }),
    };
    const unknown = new UnknownFields();
    const report = (at: string, message: string, code = 'actf_value_kept') => ctx.diagnostic(code, `at ${where.base}${at}: ${message}`, where.line);
    const read = new LenientReader(unknown, report);
    const trajectoryPointer = childPointer(pointer, 'trajectory');
    if (Array.isArray(trajectory) || !isObject(trajectory)) {
      // Failed attempts may carry the agent's raw event array instead of ACTF steps: keep it as is.
      if (Object.hasOwn(attempt as JsonObject, 'trajectory')) unknown.set(trajectoryPointer, trajectory);
      report(trajectoryPointer, Array.isArray(trajectory) ? `raw event array (${trajectory.length} events) kept as given; no turns` : 'no ACTF trajectory; no turns', 'actf_raw_trajectory');
      markSynthesized(storyline, '/origin/schema_version');
    } else {
      decodeTrajectory(trajectory, trajectoryPointer, storyline, unknown, read, report, fail);
    }
    unknown.attach(storyline, FORMAT);
    return storyline;
  });
}

type Report = (pointer: string, message: string, code?: string) => void;

function decodeTrajectory(trajectory: JsonObject, pointer: string, storyline: Storyline, unknown: UnknownFields, read: LenientReader, report: Report, fail: Fail): void {
  unknown.collect(trajectory, TRAJECTORY_KEYS, pointer);
  const version = read.pick(trajectory, 'schema_version', isString, pointer);
  if (version !== undefined) storyline.origin!.schema_version = version;
  else markSynthesized(storyline, '/origin/schema_version');
  assignDefined(storyline, {
    started_at: read.pick(trajectory, 'started_at', isTimestampOrNull, pointer),
    finished_at: read.pick(trajectory, 'finished_at', isTimestampOrNull, pointer),
  });
  const steps = read.pick(trajectory, 'steps', isArray, pointer) ?? [];
  const callIds = new Set<string>();
  decodeObjects(
    steps,
    childPointer(pointer, 'steps'),
    'an ACTF step',
    fail,
    (step, stepPointer, index) => decodeStep(step, index, stepPointer, storyline, callIds, unknown, read, report, fail),
    storyline.turns,
  );
}

function decodeStep(
  step: JsonObject,
  index: number,
  pointer: string,
  storyline: Storyline,
  callIds: Set<string>,
  unknown: UnknownFields,
  read: LenientReader,
  report: Report,
  fail: Fail,
): Turn {
  unknown.collect(step, STEP_KEYS, pointer);
  const stepId = step.step_id;
  const id = Number.isInteger(stepId) && !storyline.turns.some((t) => t.id === stepId) ? (stepId as number) : index + 1;
  if (id !== stepId) {
    unknown.set(childPointer(pointer, 'step_id'), stepId);
    report(childPointer(pointer, 'step_id'), `step_id ${JSON.stringify(stepId)} is not a new integer; turn numbered ${id}`);
  }

  const assistantPointer = childPointer(pointer, 'assistant_content');
  const assistant = read.pick(step, 'assistant_content', isObjectValue, pointer) ?? {};
  unknown.collect(assistant, ASSISTANT_KEYS, assistantPointer);
  const content = assistant.content;
  let msg: Turn['msg'] = '';
  if (isContent(content)) msg = content;
  else if (Object.hasOwn(assistant, 'content')) unknown.set(childPointer(assistantPointer, 'content'), content);
  const turn: Turn = { id, src: 'agent', msg, nllm: 1 };
  assignDefined(turn, {
    reason: read.pick(assistant, 'reasoning_content', isStringOrNull, assistantPointer),
    ts: read.pick(step, 'started_at', isTimestampOrNull, pointer),
    finished_at: read.pick(step, 'finished_at', isTimestampOrNull, pointer),
  });

  // Prompts: the first step's go to the document; a later step's only where they differ.
  const system = read.pick(step, 'system_prompt', isStringOrNull, pointer);
  const user = read.pick(step, 'user_content', isStringOrNull, pointer);
  if (index === 0) {
    const prompt = defined({ system, user });
    if (Object.keys(prompt).length > 0) storyline.prompt = prompt;
  } else {
    const override = defined({
      system: system !== undefined && system !== storyline.prompt?.system ? system : undefined,
      user: user !== undefined && user !== storyline.prompt?.user ? user : undefined,
    });
    if (Object.keys(override).length > 0) turn.prompt = override;
  }

  const metric = step.metric;
  if (isObject(metric)) {
    const metricPointer = childPointer(pointer, 'metric');
    unknown.collect(metric, METRIC_KEYS, metricPointer);
    turn.metrics = defined({
      prompt_tokens: read.pick(metric, 'prompt_tokens_len', isCountOrNull, metricPointer),
      completion_tokens: read.pick(metric, 'completion_tokens_len', isCountOrNull, metricPointer),
      cached_tokens: read.pick(metric, 'cached_tokens_len', isCountOrNull, metricPointer),
    });
    const latency = read.pick(metric, 'llm_infer_ms', isDurationOrNull, metricPointer);
    if (latency !== undefined) turn.latency_ms = latency;
    const extra = defined({ env_action_ms: metric.env_action_ms, stop_reason: metric.stop_reason });
    if (Object.keys(extra).length > 0) turn.metrics.extra = extra;
  } else if (Object.hasOwn(step, 'metric')) {
    unknown.set(childPointer(pointer, 'metric'), metric);
  }

  // Tools: `tools` and `assistant_content.tool_calls` must be equal when both are non-empty.
  const tools = Array.isArray(step.tools) ? step.tools : [];
  const calls = Array.isArray(assistant.tool_calls) ? assistant.tool_calls : [];
  const toolsPointer = childPointer(pointer, 'tools');
  const callsPointer = childPointer(assistantPointer, 'tool_calls');
  if (Object.hasOwn(step, 'tools') && !Array.isArray(step.tools)) unknown.set(toolsPointer, step.tools);
  if (Object.hasOwn(assistant, 'tool_calls') && !Array.isArray(assistant.tool_calls)) unknown.set(callsPointer, assistant.tool_calls);
  let primary = tools;
  let primaryPointer = toolsPointer;
  if (tools.length > 0 && calls.length > 0 && !isDeepStrictEqual(tools, calls)) {
    report(callsPointer, 'assistant_content.tool_calls differs from tools; tools used, tool_calls kept as given', 'actf_tool_lists_differ');
    unknown.set(callsPointer, calls);
  } else if (tools.length === 0 && calls.length > 0) {
    primary = calls;
    primaryPointer = callsPointer;
    if (Array.isArray(step.tools)) unknown.set(toolsPointer, step.tools);
  } else if (tools.length > 0 && Array.isArray(assistant.tool_calls) && calls.length === 0) {
    unknown.set(callsPointer, assistant.tool_calls);
  }
  const renamed = new Map<string, string>();
  const turnIndex = storyline.turns.length;
  if (primary.length > 0) {
    turn.tool_calls = decodeObjects(primary, primaryPointer, 'an ACTF tool call', fail, (tool, toolPointer, j) =>
      decodeTool(tool, j, id, toolPointer, turnIndex, storyline, callIds, renamed, report),
    );
  }

  const observations = read.pick(step, 'observation', isArray, pointer);
  if (observations !== undefined && observations.length > 0) {
    turn.observation = {
      results: decodeObjects(observations, childPointer(pointer, 'observation'), 'an ACTF observation', fail, (observation, resultPointer) =>
        decodeObservation(observation, resultPointer, turn, callIds, renamed, unknown, report),
      ),
    };
  }
  return turn;
}

function decodeTool(
  tool: JsonObject,
  index: number,
  stepId: number,
  pointer: string,
  turnIndex: number,
  storyline: Storyline,
  callIds: Set<string>,
  renamed: Map<string, string>,
  report: Report,
): ToolCall {
  const extra: JsonObject = {};
  for (const [key, value] of Object.entries(tool)) if (!TOOL_KEYS.has(key)) extra[key] = value;
  let tcid: string;
  if (isNonEmptyString(tool.id)) {
    tcid = tool.id;
  } else {
    tcid = `step-${stepId}-tool-${index}`;
    markSynthesized(storyline, `/turns/${turnIndex}/tool_calls/${index}/tcid`);
    report(pointer, `tool call without id; using ${tcid}`, 'actf_tool_id_synthesized');
    if (Object.hasOwn(tool, 'id')) extra.id = tool.id;
  }
  if (callIds.has(tcid)) {
    const fresh = renumberedId(tcid, callIds);
    report(pointer, `tool call id ${JSON.stringify(tcid)} was used by an earlier step; renamed ${JSON.stringify(fresh)}`, 'duplicate_tool_call_id');
    renamed.set(tcid, fresh);
    extra.id = tcid;
    tcid = fresh;
  }
  callIds.add(tcid);

  const fn = isObject(tool.function) ? tool.function : undefined;
  let name = isString(tool.name) ? tool.name : undefined;
  let args: unknown;
  if (fn) {
    const { name: fnName, arguments: fnArgs, ...fnRest } = fn;
    if (isString(fnName)) name = fnName;
    if (typeof fnArgs === 'string') {
      const parsed = parseArguments(fnArgs);
      if (!parsed.parsed) report(`${pointer}/function/arguments`, 'arguments are not valid JSON; kept verbatim', 'tool_arguments_malformed');
      args = parsed.value;
    } else {
      args = fnArgs ?? {};
    }
    if (Object.keys(fnRest).length > 0) extra.function = fnRest;
  } else if (Object.hasOwn(tool, 'input')) {
    args = tool.input;
  } else if (Object.hasOwn(tool, 'arguments')) {
    args = tool.arguments;
  } else if (Object.hasOwn(tool, 'command')) {
    args = { command: tool.command };
  } else {
    args = {};
  }
  if (tool.function !== undefined && !fn) extra.function = tool.function;
  const kind = isString(tool.type) ? tool.type : undefined;
  const call: ToolCall = { tcid, fn: name ?? kind ?? '', args };
  if (kind !== undefined) call.kind = kind;
  else if (Object.hasOwn(tool, 'type')) extra.type = tool.type;
  if (!isString(tool.name) && Object.hasOwn(tool, 'name')) extra.name = tool.name;
  if (Object.hasOwn(tool, 'aggregated_output')) call.result = tool.aggregated_output;
  const response = defined({
    status: isStringOrNull(tool.status) ? tool.status : undefined,
    exit_code: tool.exit_code === null || Number.isInteger(tool.exit_code) ? (tool.exit_code as number | null) : undefined,
  });
  for (const key of ['status', 'exit_code'] as const) if (Object.hasOwn(tool, key) && !Object.hasOwn(response, key)) extra[key] = tool[key];
  if (Object.keys(response).length > 0) call.response = response;
  if (Object.keys(extra).length > 0) call.extra = extra;
  return call;
}

function decodeObservation(
  observation: JsonObject,
  pointer: string,
  turn: Turn,
  callIds: Set<string>,
  renamed: Map<string, string>,
  unknown: UnknownFields,
  report: Report,
): ObservationResult {
  const linkKey = Object.hasOwn(observation, 'tool_use_id') ? 'tool_use_id' : Object.hasOwn(observation, 'id') ? 'id' : undefined;
  const contentKey = Object.hasOwn(observation, 'content') ? 'content' : Object.hasOwn(observation, 'aggregated_output') ? 'aggregated_output' : undefined;
  const result: ObservationResult = {};
  const extra: JsonObject = {};
  for (const [key, value] of Object.entries(observation)) {
    if (key !== linkKey && key !== contentKey && !(key === 'is_error' && typeof value === 'boolean')) extra[key] = value;
  }
  if (linkKey !== undefined) {
    const id = observation[linkKey];
    const target = typeof id === 'string' ? (renamed.get(id) ?? id) : undefined;
    const ownCall = target !== undefined && (turn.tool_calls ?? []).some((c) => c.tcid === target);
    if (ownCall) {
      result.source_call_id = target as string;
    } else {
      // ACTF: an observation must answer a call of the same step. Keep the link as given.
      report(childPointer(pointer, linkKey), `${linkKey} ${JSON.stringify(id)} matches no tool call of this step; kept as given`, 'orphan_tool_result');
      result.source_call_id = target !== undefined && callIds.has(target) ? target : null;
      unknown.set(childPointer(pointer, linkKey), id);
    }
  }
  if (contentKey !== undefined) {
    const content = observation[contentKey];
    if (content === null || isContent(content)) result.content = content;
    else unknown.set(childPointer(pointer, contentKey), content);
  }
  if (typeof observation.is_error === 'boolean') result.is_error = observation.is_error;
  if (Object.keys(extra).length > 0) result.extra = extra;
  return result;
}
