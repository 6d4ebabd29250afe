/**
 * ATIF (Harbor RFC 0001, v1.0-v1.7 and bare "1.x" versions) to Storyline. The import is lenient:
 * keys Harbor does not define, agent-only fields on other steps and values of an unexpected type are
 * kept in `unknown_fields.sources.atif.fields` at their JSON Pointer (relative to the trajectory
 * object) so the encoder can put them back. Embedded `subagent_trajectories` become child Storylines.
 */
import type { ObservationResult, Storyline, Turn, ToolCall, Metrics, FinalMetrics, Agent } from '../../storyline/schema.js';
import { STORYLINE_SCHEMA_VERSION } from '../../storyline/schema.js';
import type { DecodeContext } from '../types.js';
import { failAt, type MemberLocation } from '../common/documents.js';
import { assignDefined, childPointer, defined, isObject, markSynthesized, renumberedId, UnknownFields, type JsonObject } from '../common/unknown.js';
import { decodeObjects, type Fail } from '../common/elements.js';
import {
  LenientReader,
  isArray,
  isBoolean,
  isContent,
  isCount,
  isCountOrNull,
  isDurationOrNull,
  isEffort,
  isIntArray,
  isNonEmptyString,
  isNumberOrNull,
  isObjectValue,
  isString,
  isStringOrNull,
  isTimestampOrNull,
} from '../common/values.js';

export const FORMAT = 'atif';
const VERSION = /^(?:ATIF-v)?1\.[0-7]$/;
/** Accepted `schema_version` values: `ATIF-v1.0` ... `ATIF-v1.7` and the bare `1.0` ... `1.7` some writers emit. */
export const isAtifVersion = (value: unknown): boolean => typeof value === 'string' && VERSION.test(value);

const ROOT_KEYS = new Set(['schema_version', 'session_id', 'trajectory_id', 'agent', 'steps', 'notes', 'final_metrics', 'continued_trajectory_ref', 'extra', 'subagent_trajectories']);
const AGENT_KEYS = new Set(['name', 'version', 'model_name', 'tool_definitions', 'extra']);
const STEP_KEYS = new Set(['step_id', 'timestamp', 'source', 'message', 'model_name', 'reasoning_effort', 'reasoning_content', 'tool_calls', 'observation', 'metrics', 'llm_call_count', 'is_copied_context', 'extra']);
/** Harbor rejects these on non-agent steps; we keep them there as unknown fields. */
const AGENT_ONLY = new Set(['model_name', 'reasoning_effort', 'reasoning_content', 'tool_calls', 'metrics']);
/** `result` is not Harbor's, but pChronicle's ATIF carries it (Storyline has a field for it). */
const CALL_KEYS = new Set(['tool_call_id', 'function_name', 'arguments', 'extra', 'result']);
const RESULT_KEYS = new Set(['source_call_id', 'content', 'subagent_trajectory_ref', 'extra']);
const REF_KEYS = new Set(['trajectory_id', 'trajectory_path', 'session_id', 'extra']);
/** `latency_ms`/`ttft_ms` are pChronicle's additions; they map to the Storyline turn. */
const METRIC_KEYS = new Set(['prompt_tokens', 'completion_tokens', 'cached_tokens', 'cost_usd', 'prompt_token_ids', 'completion_token_ids', 'logprobs', 'extra', 'latency_ms', 'ttft_ms']);
const FINAL_KEYS = new Set(['total_prompt_tokens', 'total_completion_tokens', 'total_cached_tokens', 'total_cost_usd', 'total_steps', 'extra']);
const SOURCES = new Set(['system', 'user', 'agent']);
type Report = (pointer: string, message: string, code?: string) => void;

export const CONTEXT_MANAGEMENT_KINDS = new Set(['compaction', 'pruning', 'injection']);

/** The Storylines of one ATIF trajectory: the trajectory first, then its embedded subagents (depth first). */
export function decodeTrajectory(value: unknown, where: MemberLocation, ctx: DecodeContext): Storyline[] {
  const out: Storyline[] = [];
  decodeInto(value, where, ctx, undefined, out);
  return out;
}

function decodeInto(value: unknown, where: MemberLocation, ctx: DecodeContext, parentSession: string | undefined, out: Storyline[]): Storyline {
  const fail: Fail = failAt(where);
  if (!isObject(value)) fail('', 'an ATIF trajectory must be a JSON object');
  const doc = value as JsonObject;
  if (!isAtifVersion(doc.schema_version)) {
    const seen = doc.schema_version === undefined ? 'missing' : JSON.stringify(doc.schema_version);
    fail('/schema_version', `unsupported ATIF schema_version ${seen} (this build reads ATIF-v1.0 to ATIF-v1.7)`);
  }
  if (!Array.isArray(doc.steps)) fail('/steps', 'an ATIF trajectory needs a "steps" array');

  const unknown = new UnknownFields();
  const report: Report = (pointer, message, code = 'atif_value_kept') => ctx.diagnostic(code, `at ${where.base}${pointer}: ${message}`, where.line);
  const read = new LenientReader(unknown, report);
  unknown.collect(doc, ROOT_KEYS, '');

  const session = read.pick(doc, 'session_id', isNonEmptyString, '');
  const trajectory = read.pick(doc, 'trajectory_id', isNonEmptyString, '');
  const agentSource = isObject(doc.agent) ? doc.agent : undefined;
  if (doc.agent !== undefined && !agentSource) unknown.set('/agent', doc.agent);
  const agent = decodeAgent(agentSource ?? {}, read, unknown);

  const storyline: Storyline = {
    schema_version: STORYLINE_SCHEMA_VERSION,
    session: session ?? trajectory ?? `${parentSession ?? where.relPath}${where.base === '' ? '' : `#${where.base.slice(1)}`}`,
    agent,
    turns: [],
    origin: defined({ format: FORMAT, schema_version: doc.schema_version as string, document_id: trajectory ?? session, source_path: where.relPath, line: where.line }),
  };
  if (session === undefined) markSynthesized(storyline, '/session');
  if (agentSource?.name === undefined || !isString(agentSource.name)) markSynthesized(storyline, '/agent/id');
  assignDefined(storyline, {
    trajectory,
    notes: read.pick(doc, 'notes', isStringOrNull, ''),
    continued_trajectory_ref: read.pick(doc, 'continued_trajectory_ref', isStringOrNull, ''),
    extra: read.pick(doc, 'extra', isObjectValue, ''),
  });
  const finalMetrics = read.pick(doc, 'final_metrics', isObjectValue, '');
  if (finalMetrics !== undefined) storyline.final_metrics = decodeFinalMetrics(finalMetrics, read, unknown);

  const callIds = new Set<string>();
  decodeObjects(
    doc.steps as unknown[],
    '/steps',
    'an ATIF step',
    fail,
    (step, pointer, index) => decodeStep(step, index, pointer, storyline.turns, callIds, read, unknown, report, fail),
    storyline.turns,
  );
  unknown.attach(storyline, FORMAT);
  out.push(storyline);

  const children = read.pick(doc, 'subagent_trajectories', isArray, '');
  if (children && children.length > 0) {
    storyline.children = [];
    children.forEach((child, index) => {
      const childWhere = { ...where, base: `${where.base}${childPointer('/subagent_trajectories', index)}` };
      const sub = decodeInto(child, childWhere, ctx, storyline.session, out);
      sub.parent = defined({ psid: storyline.session, rel: 'spawn' as const, ...spawnPoint(storyline, sub) });
      storyline.children!.push(sub.session);
    });
  }
  return storyline;
}

function decodeAgent(source: JsonObject, read: LenientReader, unknown: UnknownFields): Agent {
  unknown.collect(source, AGENT_KEYS, '/agent');
  const name = read.pick(source, 'name', isString, '/agent');
  const agent: Agent = { id: name || 'unknown' };
  assignDefined(agent, {
    name,
    ver: read.pick(source, 'version', isString, '/agent'),
    model: read.pick(source, 'model_name', isString, '/agent'),
    tools: read.pick(source, 'tool_definitions', isArray, '/agent'),
    extra: read.pick(source, 'extra', isObjectValue, '/agent'),
  });
  return agent;
}

function decodeFinalMetrics(source: JsonObject, read: LenientReader, unknown: UnknownFields): FinalMetrics {
  unknown.collect(source, FINAL_KEYS, '/final_metrics');
  const p = '/final_metrics';
  return defined({
    total_prompt_tokens: read.pick(source, 'total_prompt_tokens', isCountOrNull, p),
    total_completion_tokens: read.pick(source, 'total_completion_tokens', isCountOrNull, p),
    total_cached_tokens: read.pick(source, 'total_cached_tokens', isCountOrNull, p),
    total_cost_usd: read.pick(source, 'total_cost_usd', isNumberOrNull, p),
    total_steps: read.pick(source, 'total_steps', isCountOrNull, p),
    extra: read.pick(source, 'extra', isObjectValue, p),
  });
}

function decodeStep(
  step: JsonObject,
  index: number,
  pointer: string,
  earlier: Turn[],
  callIds: Set<string>,
  read: LenientReader,
  unknown: UnknownFields,
  report: Report,
  fail: Fail,
): Turn {
  const source = step.source;
  if (typeof source !== 'string' || !SOURCES.has(source)) fail(childPointer(pointer, 'source'), `step source must be "system", "user" or "agent", not ${JSON.stringify(source)}`);
  const src = source as Turn['src'];
  unknown.collect(step, STEP_KEYS, pointer);
  if (src !== 'agent') {
    // Harbor allows these on agent steps only; keep them where they were without giving them meaning.
    for (const key of AGENT_ONLY) if (Object.hasOwn(step, key)) unknown.set(childPointer(pointer, key), step[key]);
  }

  const stepId = step.step_id;
  let id: number = index + 1;
  if (Number.isInteger(stepId) && !earlier.some((t) => t.id === stepId)) id = stepId as number;
  if (stepId !== index + 1) report(childPointer(pointer, 'step_id'), `step_id ${JSON.stringify(stepId)} is not ${index + 1}; the turn is numbered ${id} and export renumbers 1..n`, 'step_id_renumbered');

  const msg = read.pick(step, 'message', isContent, pointer);
  if (!Object.hasOwn(step, 'message')) report(childPointer(pointer, 'message'), 'missing message; using ""', 'atif_message_missing');
  const turn: Turn = { id, src, msg: msg ?? '' };
  assignDefined(turn, {
    ts: read.pick(step, 'timestamp', isTimestampOrNull, pointer),
    nllm: read.pick(step, 'llm_call_count', isCount, pointer),
    copied: read.pick(step, 'is_copied_context', isBoolean, pointer),
  });
  const extra = read.pick(step, 'extra', isObjectValue, pointer);
  if (extra !== undefined) {
    turn.extra = extra;
    const management = extra.context_management;
    if (isObject(management) && typeof management.type === 'string' && management.type !== '') turn.kind = management.type;
  }

  // Tool calls first: the observation links to them.
  const renamed = new Map<string, string>();
  if (src === 'agent') {
    assignDefined(turn, {
      model: read.pick(step, 'model_name', isStringOrNull, pointer),
      effort: read.pick(step, 'reasoning_effort', isEffort, pointer),
      reason: read.pick(step, 'reasoning_content', isStringOrNull, pointer),
    });
    const calls = read.pick(step, 'tool_calls', isArray, pointer);
    if (calls !== undefined) {
      turn.tool_calls = decodeObjects(calls, childPointer(pointer, 'tool_calls'), 'an ATIF tool call', fail, (call, callPointer) =>
        decodeCall(call, callPointer, id, callIds, renamed, read, unknown, report),
      );
    }
    const metrics = read.pick(step, 'metrics', isObjectValue, pointer);
    if (metrics !== undefined) decodeMetrics(metrics, childPointer(pointer, 'metrics'), turn, read, unknown);
  }
  const observation = read.pick(step, 'observation', isObjectValue, pointer);
  if (observation !== undefined) {
    const obsPointer = childPointer(pointer, 'observation');
    unknown.collect(observation, new Set(['results']), obsPointer);
    const results = read.pick(observation, 'results', isArray, obsPointer) ?? [];
    turn.observation = {
      results: decodeObjects(results, childPointer(obsPointer, 'results'), 'an ATIF observation result', fail, (result, resultPointer) =>
        decodeResult(result, resultPointer, callIds, renamed, read, unknown, report),
      ),
    };
  }
  return turn;
}

function decodeCall(
  call: JsonObject,
  pointer: string,
  stepId: number,
  callIds: Set<string>,
  renamed: Map<string, string>,
  read: LenientReader,
  unknown: UnknownFields,
  report: Report,
): ToolCall {
  unknown.collect(call, CALL_KEYS, pointer);
  const original = read.pick(call, 'tool_call_id', isNonEmptyString, pointer);
  let tcid = original ?? `step-${stepId}-call-${pointer.split('/').pop()}`;
  if (original === undefined) report(childPointer(pointer, 'tool_call_id'), `missing tool_call_id; using ${tcid}`, 'tool_call_id_synthesized');
  if (callIds.has(tcid)) {
    // Storyline call ids are unique per document; ATIF only asks for uniqueness within a step.
    const fresh = renumberedId(tcid, callIds);
    report(childPointer(pointer, 'tool_call_id'), `tool_call_id ${JSON.stringify(tcid)} is used by an earlier call; renamed ${JSON.stringify(fresh)} (the original is kept)`, 'duplicate_tool_call_id');
    if (original !== undefined) {
      unknown.set(childPointer(pointer, 'tool_call_id'), original);
      renamed.set(original, fresh);
    }
    tcid = fresh;
  }
  callIds.add(tcid);
  const fn = read.pick(call, 'function_name', isString, pointer) ?? '';
  if (!Object.hasOwn(call, 'arguments')) report(childPointer(pointer, 'arguments'), 'missing arguments; using {}', 'tool_arguments_missing');
  const args = Object.hasOwn(call, 'arguments') ? call.arguments : {};
  if (Object.hasOwn(call, 'arguments') && !isObject(args)) {
    report(childPointer(pointer, 'arguments'), `arguments is ${Array.isArray(args) ? 'an array' : typeof args}, not an object; kept as given`, 'tool_arguments_not_object');
  }
  const out: ToolCall = { tcid, fn, args };
  if (Object.hasOwn(call, 'result')) out.result = call.result;
  const extra = read.pick(call, 'extra', isObjectValue, pointer);
  if (extra !== undefined) out.extra = extra;
  return out;
}

function decodeMetrics(source: JsonObject, pointer: string, turn: Turn, read: LenientReader, unknown: UnknownFields): void {
  unknown.collect(source, METRIC_KEYS, pointer);
  const metrics: Metrics = defined({
    prompt_tokens: read.pick(source, 'prompt_tokens', isCountOrNull, pointer),
    completion_tokens: read.pick(source, 'completion_tokens', isCountOrNull, pointer),
    cached_tokens: read.pick(source, 'cached_tokens', isCountOrNull, pointer),
    cost_usd: read.pick(source, 'cost_usd', isNumberOrNull, pointer),
    prompt_token_ids: read.pick(source, 'prompt_token_ids', isIntArray, pointer),
    completion_token_ids: read.pick(source, 'completion_token_ids', isIntArray, pointer),
    logprobs: read.pick(source, 'logprobs', isArray, pointer),
    extra: read.pick(source, 'extra', isObjectValue, pointer),
  });
  turn.metrics = metrics;
  assignDefined(turn, {
    latency_ms: read.pick(source, 'latency_ms', isDurationOrNull, pointer),
    ttft_ms: read.pick(source, 'ttft_ms', isDurationOrNull, pointer),
  });
}

function decodeResult(
  result: JsonObject,
  pointer: string,
  callIds: Set<string>,
  renamed: Map<string, string>,
  read: LenientReader,
  unknown: UnknownFields,
  report: Report,
): ObservationResult {
  unknown.collect(result, RESULT_KEYS, pointer);
  const out: ObservationResult = {};
  const scid = read.pick(result, 'source_call_id', isStringOrNull, pointer);
  if (scid !== undefined) {
    const target = scid === null ? null : (renamed.get(scid) ?? scid);
    if (target !== null && !callIds.has(target)) {
      report(childPointer(pointer, 'source_call_id'), `source_call_id ${JSON.stringify(scid)} matches no tool call; kept as an unknown field`, 'orphan_tool_result');
      unknown.set(childPointer(pointer, 'source_call_id'), scid);
      out.source_call_id = null;
    } else {
      if (target !== scid) unknown.set(childPointer(pointer, 'source_call_id'), scid);
      out.source_call_id = target;
    }
  }
  if (Object.hasOwn(result, 'content')) {
    const content = result.content;
    if (content === null || isContent(content)) out.content = content;
    else unknown.set(childPointer(pointer, 'content'), content);
  }
  const refs = read.pick(result, 'subagent_trajectory_ref', isArray, pointer);
  if (refs !== undefined) {
    out.subagent_trajectory_ref = refs.map((ref, i) => {
      const refPointer = childPointer(childPointer(pointer, 'subagent_trajectory_ref'), i);
      if (!isObject(ref)) {
        unknown.set(refPointer, ref);
        return {};
      }
      unknown.collect(ref, REF_KEYS, refPointer);
      return defined({
        trajectory_id: read.pick(ref, 'trajectory_id', isString, refPointer),
        trajectory_path: read.pick(ref, 'trajectory_path', isString, refPointer),
        session_id: read.pick(ref, 'session_id', isString, refPointer),
        extra: read.pick(ref, 'extra', isObjectValue, refPointer),
      });
    });
  }
  const extra = read.pick(result, 'extra', isObjectValue, pointer);
  if (extra !== undefined) {
    // ATIF has no error flag; writers put `is_error` in `extra`. Storyline has a field for it.
    if (typeof extra.is_error === 'boolean') {
      out.is_error = extra.is_error;
      const { is_error: _lifted, ...rest } = extra;
      if (Object.keys(rest).length > 0) out.extra = rest;
    } else {
      out.extra = extra;
    }
  }
  return out;
}

/** The parent turn and tool call whose observation refers to `child` (by trajectory id or session). */
function spawnPoint(parent: Storyline, child: Storyline): { ptid?: number | string; scid?: string } {
  for (const turn of parent.turns) {
    for (const result of turn.observation?.results ?? []) {
      const hit = result.subagent_trajectory_ref?.some(
        (ref) => (ref.trajectory_id !== undefined && ref.trajectory_id === child.trajectory) || (ref.trajectory_id === undefined && ref.session_id !== undefined && ref.session_id === child.session),
      );
      if (hit) return defined({ ptid: turn.id, scid: result.source_call_id ?? undefined });
    }
  }
  return {};
}
