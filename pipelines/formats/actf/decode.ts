/**
 * ACTF v1.0 (pChronicle RFC-0004) to Storyline: one Storyline per attempt, mapped as
 * reference/trajectory-formats.md §2 says. Document-level keys other than `task_id`/`k`/`attempts`
 * go to `task.extra` (shared by the attempts), the attempt's keys other than `trajectory` to
 * `task.result`, tool keys without a Storyline field to the tool call's `extra`, observation keys
 * without one to the result's `extra`; other unknown keys to `unknown_fields.sources.actf`.
 *
 * Refused (exit 2, at the JSON Pointer of the problem), as the reference's rules say: a missing
 * `task_id`; `k` that is not an integer > 0; `attempts_tried` that is not the number of attempts or
 * is more than `k`; no attempts, or an attempt with an empty key; an attempt trajectory object
 * whose `schema_version` is not `ACTF_v1.0` or that has no `steps` array; a `step_id` that is not
 * an integer > 0 greater than the step before; `assistant_content`, `tools`, `tool_calls` or
 * `observation` of the wrong shape; `tools` and `assistant_content.tool_calls` that differ when
 * both are non-empty; a tool id used twice in one step; an observation whose `tool_use_id`/`id`
 * names no tool of its own step.
 *
 * Kept leniently, as pChronicle (the upstream) does: a failed attempt's trajectory given as a raw
 * event array, `null` or `{}` (no turns; kept as given); the outcome keys (`category`, `correct`,
 * `solved_at`, an attempt's `status`, `score`...), which carry no structure and which dumps of
 * failed runs are known to bend (upstream coerces them); timestamps and metric values of an
 * unexpected type; unknown keys.
 */
import { setOwn } from '../../../lib/own-property.js';
import { isDeepStrictEqual } from 'node:util';
import type { ObservationResult, Storyline, ToolCall, Turn } from '../../storyline/schema.js';
import { STORYLINE_SCHEMA_VERSION } from '../../storyline/schema.js';
import type { DecodeContext } from '../types.js';
import { failAt, type MemberLocation } from '../common/documents.js';
import { isJsonObject, type JsonObject } from '../../../lib/json-object.js';
import { assignDefined, childPointer, defined, markSynthesized, renumberedId, shown, UnknownFields } from '../common/unknown.js';
import { decodeObjects, type Fail } from '../common/elements.js';
import {
  LenientReader,
  isArray,
  isContent,
  isCount,
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
  if (!isJsonObject(value)) fail('', 'an ACTF document must be a JSON object');
  const doc = value as JsonObject;
  if (!isNonEmptyString(doc.task_id)) fail('/task_id', 'an ACTF document needs a "task_id" string');
  if (!isJsonObject(doc.attempts) || Object.keys(doc.attempts).length === 0) fail('/attempts', 'an ACTF document needs a non-empty "attempts" object');
  const taskId = doc.task_id as string;
  const attempts = doc.attempts as JsonObject;
  const { task_id: _t, attempts: _a, k, ...documentKeys } = doc;
  const keys = Object.keys(attempts);
  if (!isCount(k) || k === 0) fail('/k', `k must be an integer > 0, not ${shown(k)}`);
  const tried = doc.attempts_tried;
  if (!isCount(tried)) fail('/attempts_tried', `attempts_tried must be an integer >= 0, not ${shown(tried)}`);
  if (tried !== keys.length) fail('/attempts_tried', `attempts_tried is ${tried as number}, but the document has ${keys.length} attempt${keys.length === 1 ? '' : 's'}`);
  if ((tried as number) > (k as number)) fail('/attempts_tried', `attempts_tried ${tried as number} is more than k ${k as number}`);
  if (Object.hasOwn(attempts, '')) fail('/attempts/', 'an attempt key must not be empty');
  return keys.map((key) => {
    const pointer = childPointer('/attempts', key);
    const attempt = attempts[key];
    if (!isJsonObject(attempt)) fail(pointer, 'an ACTF attempt must be a JSON object');
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
    if (isJsonObject(trajectory) && Object.keys(trajectory).length > 0) {
      decodeTrajectory(trajectory, trajectoryPointer, storyline, unknown, read, report, fail);
    } else if (Array.isArray(trajectory) || trajectory === null || trajectory === undefined || isJsonObject(trajectory)) {
      // Failed attempts may carry the agent's raw event array, or nothing, instead of ACTF steps: keep it as is.
      if (Object.hasOwn(attempt as JsonObject, 'trajectory')) unknown.set(trajectoryPointer, trajectory);
      report(trajectoryPointer, Array.isArray(trajectory) ? `raw event array (${trajectory.length} events) kept as given; no turns` : 'no ACTF trajectory; no turns', 'actf_raw_trajectory');
    } else {
      fail(trajectoryPointer, 'an attempt trajectory must be an ACTF trajectory object, an event array or null');
    }
    unknown.attach(storyline, FORMAT);
    return storyline;
  });
}

type Report = (pointer: string, message: string, code?: string) => void;

function decodeTrajectory(trajectory: JsonObject, pointer: string, storyline: Storyline, unknown: UnknownFields, read: LenientReader, report: Report, fail: Fail): void {
  unknown.collect(trajectory, TRAJECTORY_KEYS, pointer);
  if (trajectory.schema_version !== ACTF_VERSION) {
    const seen = trajectory.schema_version === undefined ? 'missing' : shown(trajectory.schema_version);
    fail(childPointer(pointer, 'schema_version'), `unsupported ACTF schema_version ${seen} (this build reads ${ACTF_VERSION})`);
  }
  assignDefined(storyline, {
    started_at: read.pick(trajectory, 'started_at', isTimestampOrNull, pointer),
    finished_at: read.pick(trajectory, 'finished_at', isTimestampOrNull, pointer),
  });
  const steps = trajectory.steps;
  if (!Array.isArray(steps)) return fail(childPointer(pointer, 'steps'), 'an ACTF trajectory needs a "steps" array');
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
  const previous = storyline.turns[storyline.turns.length - 1]?.id as number | undefined;
  if (!isCount(stepId) || stepId === 0 || (previous !== undefined && (stepId as number) <= previous)) {
    fail(childPointer(pointer, 'step_id'), `step_id must be an integer > 0${previous === undefined ? '' : `, greater than the previous step's ${previous}`}; not ${shown(stepId)}`);
  }
  const id = stepId as number;

  const assistantPointer = childPointer(pointer, 'assistant_content');
  const assistant = read.structure(step, 'assistant_content', isObjectValue, pointer, fail, 'an object') ?? {};
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
  if (isJsonObject(metric)) {
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
  const tools = read.structure(step, 'tools', isArray, pointer, fail, 'an array of tool calls') ?? [];
  const calls = read.structure(assistant, 'tool_calls', isArray, assistantPointer, fail, 'an array of tool calls') ?? [];
  const toolsPointer = childPointer(pointer, 'tools');
  const callsPointer = childPointer(assistantPointer, 'tool_calls');
  let primary = tools;
  let primaryPointer = toolsPointer;
  if (tools.length > 0 && calls.length > 0 && !isDeepStrictEqual(tools, calls)) {
    fail(callsPointer, 'assistant_content.tool_calls differs from tools (ACTF: they must be equal when both are non-empty)');
  } else if (tools.length === 0 && calls.length > 0) {
    primary = calls;
    primaryPointer = callsPointer;
    if (Array.isArray(step.tools)) unknown.set(toolsPointer, step.tools);
  } else if (tools.length > 0 && Array.isArray(assistant.tool_calls) && calls.length === 0) {
    unknown.set(callsPointer, assistant.tool_calls);
  }
  // This step's tool ids (given or synthesised) and the tcid each became.
  const stepTools = new Map<string, string>();
  const turnIndex = storyline.turns.length;
  if (primary.length > 0) {
    turn.tool_calls = decodeObjects(primary, primaryPointer, 'an ACTF tool call', fail, (tool, toolPointer, j) =>
      decodeTool(tool, j, id, toolPointer, turnIndex, storyline, callIds, stepTools, report, fail),
    );
  }

  const observations = read.structure(step, 'observation', isArray, pointer, fail, 'an array of observations');
  if (observations !== undefined && observations.length > 0) {
    turn.observation = {
      results: decodeObjects(observations, childPointer(pointer, 'observation'), 'an ACTF observation', fail, (observation, resultPointer) =>
        decodeObservation(observation, resultPointer, stepTools, unknown, fail),
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
  stepTools: Map<string, string>,
  report: Report,
  fail: Fail,
): ToolCall {
  const extra: JsonObject = {};
  for (const [key, value] of Object.entries(tool)) if (!TOOL_KEYS.has(key)) setOwn(extra, key, value);
  let tcid: string;
  if (isNonEmptyString(tool.id)) {
    tcid = tool.id;
  } else {
    tcid = `step-${stepId}-tool-${index}`;
    markSynthesized(storyline, `/turns/${turnIndex}/tool_calls/${index}/tcid`);
    report(pointer, `tool call without id; using ${tcid}`, 'actf_tool_id_synthesized');
    if (Object.hasOwn(tool, 'id')) extra.id = tool.id;
  }
  const original = tcid;
  if (stepTools.has(original)) fail(childPointer(pointer, 'id'), `tool id ${shown(original)} is used by an earlier tool of this step`);
  if (callIds.has(tcid)) {
    // Storyline call ids are unique per document; ACTF's only per step.
    tcid = renumberedId(original, callIds);
    report(pointer, `tool call id ${JSON.stringify(original)} was used by an earlier step; renamed ${JSON.stringify(tcid)}`, 'duplicate_tool_call_id');
    extra.id = original;
  }
  callIds.add(tcid);
  stepTools.set(original, tcid);

  const fn = isJsonObject(tool.function) ? tool.function : undefined;
  let name = isString(tool.name) ? tool.name : undefined;
  let args: unknown;
  if (fn) {
    const { name: fnName, arguments: fnArgs, ...fnRest } = fn;
    if (isString(fnName)) name = fnName;
    if (typeof fnArgs === 'string') {
      const parsed = parseArguments(fnArgs);
      if (!parsed.parsed) report(`${pointer}/function/arguments`, 'arguments are not JSON that parses exactly; kept verbatim', 'tool_arguments_malformed');
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
  if (Object.hasOwn(tool, 'aggregated_output')) {
    call.result = tool.aggregated_output;
  } else if (Object.hasOwn(tool, 'result') && kind !== 'command_execution' && kind !== 'function') {
    // The output of a tool of another kind, where the encoder writes a call's result.
    call.result = tool.result;
    delete extra.result;
  }
  const response = defined({
    status: isStringOrNull(tool.status) ? tool.status : undefined,
    exit_code: tool.exit_code === null || Number.isSafeInteger(tool.exit_code) ? (tool.exit_code as number | null) : undefined,
  });
  for (const key of ['status', 'exit_code'] as const) if (Object.hasOwn(tool, key) && !Object.hasOwn(response, key)) extra[key] = tool[key];
  if (Object.keys(response).length > 0) call.response = response;
  if (Object.keys(extra).length > 0) call.extra = extra;
  return call;
}

function decodeObservation(observation: JsonObject, pointer: string, stepTools: Map<string, string>, unknown: UnknownFields, fail: Fail): ObservationResult {
  const linkKey = Object.hasOwn(observation, 'tool_use_id') ? 'tool_use_id' : Object.hasOwn(observation, 'id') ? 'id' : undefined;
  const contentKey = Object.hasOwn(observation, 'content') ? 'content' : Object.hasOwn(observation, 'aggregated_output') ? 'aggregated_output' : undefined;
  const result: ObservationResult = {};
  const extra: JsonObject = {};
  for (const [key, value] of Object.entries(observation)) {
    if (key !== linkKey && key !== contentKey && !(key === 'is_error' && typeof value === 'boolean')) setOwn(extra, key, value);
  }
  if (linkKey !== undefined) {
    const id = observation[linkKey];
    if (typeof id === 'string') {
      // ACTF: an observation answers a tool of its own step.
      const target = stepTools.get(id);
      if (target === undefined) fail(childPointer(pointer, linkKey), `${linkKey} ${shown(id)} names no tool of this step`);
      // A tool renamed for uniqueness in the document: the link follows it; the original goes back on export.
      if (target !== id) unknown.set(childPointer(pointer, linkKey), id);
      result.source_call_id = target as string;
    } else {
      // A link that is not a string (null) links nothing; kept as given.
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
