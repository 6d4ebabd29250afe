/**
 * ATIF (Harbor RFC 0001, v1.0-v1.7 and bare "1.x" versions) to Storyline. A later v1 minor version
 * (v1.8, ...) is read as v1.7 with a diagnostic: minor versions add optional keys, which are kept.
 *
 * Refused (exit 2, at the JSON Pointer of the problem), as they make the document something other
 * than an ATIF trajectory: a missing or unknown `schema_version`; a missing `agent`, `agent.name` or
 * `agent.version`; a missing `session_id` up to v1.6; an embedded subagent without a `trajectory_id`,
 * or with one used twice in the document; `steps` that are not an array of step objects numbered
 * 1, 2, 3... in order; a step whose `source` is not system/user/agent or whose `message` is missing
 * or not a string or array of content parts; `tool_calls`, `observation`, `observation.results` or
 * `subagent_trajectory_ref` of the wrong shape; a tool call without a `tool_call_id` string, a
 * `function_name` string or `arguments`; a `tool_call_id` used twice in one step; a `source_call_id`
 * that names no tool call of its own step; a subagent ref without `trajectory_id`/`trajectory_path`
 * (v1.7) or `session_id` (up to v1.6).
 *
 * Kept leniently (the reference: "importers lenient, writers strict"), as the document still says
 * what ATIF means and nothing is lost: keys Harbor does not define; agent-only fields on other steps
 * (Harbor rejects them; they carry no structure and go back where they were); `arguments` that are
 * not an object (writers emit arrays; letta-ai/trajectory reshapes them with a diagnostic); content
 * parts of other shapes (OpenAI `image_url` parts, in pChronicle's fixtures); values of an
 * unexpected type in fields that hold a value rather than structure (timestamps, models, metrics,
 * counts, `extra`). Each is kept in `unknown_fields.sources.atif.fields` at its JSON Pointer (relative
 * to the trajectory object), so the encoder puts it back, and reported as a diagnostic. Embedded
 * `subagent_trajectories` become child Storylines.
 */
import type { ObservationResult, Storyline, Turn, ToolCall, Metrics, FinalMetrics, Agent } from '../../storyline/schema.js';
import { STORYLINE_SCHEMA_VERSION } from '../../storyline/schema.js';
import type { DecodeContext } from '../types.js';
import { failAt, type MemberLocation } from '../common/documents.js';
import { isJsonObject, type JsonObject } from '../../../lib/json-object.js';
import { assignDefined, childPointer, defined, markSynthesized, renumberedId, shown, UnknownFields } from '../common/unknown.js';
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
const VERSION = /^(?:ATIF-v)?1\.(0|[1-9]\d{0,3})$/;
/** The latest minor version this build knows; a later v1 minor only adds optional keys, which are kept as unknown fields. */
const LATEST_MINOR = 7;
/** Accepted `schema_version` values: `ATIF-v1.N` and the bare `1.N` some writers emit (N above 7 is read as 1.7). */
export const isAtifVersion = (value: unknown): boolean => typeof value === 'string' && VERSION.test(value);

const ROOT_KEYS = new Set(['schema_version', 'session_id', 'trajectory_id', 'agent', 'steps', 'notes', 'final_metrics', 'continued_trajectory_ref', 'extra', 'subagent_trajectories']);
const AGENT_KEYS = new Set(['name', 'version', 'model_name', 'tool_definitions', 'extra']);
const STEP_KEYS = new Set(['step_id', 'timestamp', 'source', 'message', 'model_name', 'reasoning_effort', 'reasoning_content', 'tool_calls', 'observation', 'metrics', 'llm_call_count', 'is_copied_context', 'extra']);
/** Harbor rejects these on non-agent steps; we keep them there as unknown fields (see above). */
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

/** What decoding one trajectory shares with its parts. */
interface Reading {
  read: LenientReader;
  unknown: UnknownFields;
  report: Report;
  fail: Fail;
  /** The minor version: 7 for `ATIF-v1.7` and `1.7`. */
  minor: number;
}

/** The Storylines of one ATIF trajectory: the trajectory first, then its embedded subagents (depth first). */
export function decodeTrajectory(value: unknown, where: MemberLocation, ctx: DecodeContext): Storyline[] {
  const out: Storyline[] = [];
  decodeInto(value, where, ctx, undefined, out, new Set());
  return out;
}

function decodeInto(value: unknown, where: MemberLocation, ctx: DecodeContext, parentSession: string | undefined, out: Storyline[], trajectoryIds: Set<string>): Storyline {
  const fail: Fail = failAt(where);
  if (!isJsonObject(value)) fail('', 'an ATIF trajectory must be a JSON object');
  const doc = value as JsonObject;
  const minor = VERSION.exec(typeof doc.schema_version === 'string' ? doc.schema_version : '')?.[1];
  if (minor === undefined) {
    const seen = doc.schema_version === undefined ? 'missing' : shown(doc.schema_version);
    fail('/schema_version', `unsupported ATIF schema_version ${seen} (this build reads ATIF-v1.x)`);
  }
  if (!isJsonObject(doc.agent)) fail('/agent', 'an ATIF trajectory needs an "agent" object');
  if (!Array.isArray(doc.steps)) fail('/steps', 'an ATIF trajectory needs a "steps" array');

  const unknown = new UnknownFields();
  const report: Report = (pointer, message, code = 'atif_value_kept') => ctx.diagnostic(code, `at ${where.base}${pointer}: ${message}`, where.line);
  const read = new LenientReader(unknown, report);
  const r: Reading = { read, unknown, report, fail, minor: Number(minor) };
  if (r.minor > LATEST_MINOR) {
    const version = doc.schema_version as string;
    report('/schema_version', `${version} is newer than ATIF-v1.${LATEST_MINOR}, the latest this build knows; read as ATIF-v1.${LATEST_MINOR}, and keys it adds are kept as they are`, 'atif_newer_version');
  }
  unknown.collect(doc, ROOT_KEYS, '');

  const session = read.pick(doc, 'session_id', isNonEmptyString, '');
  if (session === undefined && r.minor < 7) fail('/session_id', `${doc.schema_version as string} needs a "session_id" string (it is optional from ATIF-v1.7 on)`);
  const trajectory = read.pick(doc, 'trajectory_id', isNonEmptyString, '');
  if (trajectory === undefined && parentSession !== undefined) fail('/trajectory_id', 'an embedded subagent trajectory needs a "trajectory_id" string');
  if (trajectory !== undefined) {
    if (trajectoryIds.has(trajectory)) fail('/trajectory_id', `trajectory_id ${shown(trajectory)} is used by another trajectory of this document`);
    trajectoryIds.add(trajectory);
  }
  const agent = decodeAgent(doc.agent as JsonObject, r);

  const storyline: Storyline = {
    schema_version: STORYLINE_SCHEMA_VERSION,
    session: session ?? trajectory ?? `${parentSession ?? where.relPath}${where.base === '' ? '' : `#${where.base.slice(1)}`}`,
    agent,
    turns: [],
    origin: defined({ format: FORMAT, schema_version: doc.schema_version as string, document_id: trajectory ?? session, source_path: where.relPath, line: where.line }),
  };
  if (session === undefined) markSynthesized(storyline, '/session');
  assignDefined(storyline, {
    trajectory,
    notes: read.pick(doc, 'notes', isStringOrNull, ''),
    continued_trajectory_ref: read.pick(doc, 'continued_trajectory_ref', isStringOrNull, ''),
    extra: read.pick(doc, 'extra', isObjectValue, ''),
  });
  const finalMetrics = read.pick(doc, 'final_metrics', isObjectValue, '');
  if (finalMetrics !== undefined) storyline.final_metrics = decodeFinalMetrics(finalMetrics, read, unknown);

  const callIds = new Set<string>();
  decodeObjects(doc.steps as unknown[], '/steps', 'an ATIF step', fail, (step, pointer, index) => decodeStep(step, index, pointer, callIds, r), storyline.turns);
  unknown.attach(storyline, FORMAT);
  out.push(storyline);

  const children = read.structure(doc, 'subagent_trajectories', isArray, '', fail, 'an array of trajectories');
  if (children && children.length > 0) {
    storyline.children = [];
    children.forEach((child, index) => {
      const childWhere = { ...where, base: `${where.base}${childPointer('/subagent_trajectories', index)}` };
      const sub = decodeInto(child, childWhere, ctx, storyline.session, out, trajectoryIds);
      sub.parent = defined({ psid: storyline.session, rel: 'spawn' as const, ...spawnPoint(storyline, sub) });
      storyline.children!.push(sub.session);
    });
  }
  return storyline;
}

function decodeAgent(source: JsonObject, { read, unknown, fail }: Reading): Agent {
  unknown.collect(source, AGENT_KEYS, '/agent');
  if (!isString(source.name)) return fail('/agent/name', 'an ATIF agent needs a "name" string');
  if (!isString(source.version)) return fail('/agent/version', 'an ATIF agent needs a "version" string');
  const agent: Agent = { id: source.name || 'unknown', name: source.name, ver: source.version };
  assignDefined(agent, {
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

function decodeStep(step: JsonObject, index: number, pointer: string, callIds: Set<string>, r: Reading): Turn {
  const { read, unknown, report, fail } = r;
  const source = step.source;
  if (typeof source !== 'string' || !SOURCES.has(source)) fail(childPointer(pointer, 'source'), `step source must be "system", "user" or "agent", not ${shown(source)}`);
  const src = source as Turn['src'];
  if (step.step_id !== index + 1) fail(childPointer(pointer, 'step_id'), `step_id must be ${index + 1} (steps are numbered 1, 2, 3... in order), not ${shown(step.step_id)}`);
  const id = index + 1;
  if (!isContent(step.message)) {
    fail(childPointer(pointer, 'message'), Object.hasOwn(step, 'message') ? 'message must be a string or an array of content parts' : 'a step needs a "message": a string (may be "") or an array of content parts');
  }
  unknown.collect(step, STEP_KEYS, pointer);
  if (src !== 'agent') {
    // Harbor allows these on agent steps only; keep them where they were without giving them meaning.
    for (const key of AGENT_ONLY) {
      if (!Object.hasOwn(step, key)) continue;
      unknown.set(childPointer(pointer, key), step[key]);
      report(childPointer(pointer, key), `${key} on a ${src} step (ATIF allows it on agent steps only); kept as an unknown field`, 'atif_agent_only_field');
    }
  }

  const turn: Turn = { id, src, msg: step.message as Turn['msg'] };
  assignDefined(turn, {
    ts: read.pick(step, 'timestamp', isTimestampOrNull, pointer),
    nllm: read.pick(step, 'llm_call_count', isCount, pointer),
    copied: read.pick(step, 'is_copied_context', isBoolean, pointer),
  });
  const extra = read.pick(step, 'extra', isObjectValue, pointer);
  if (extra !== undefined) {
    turn.extra = extra;
    const management = extra.context_management;
    if (isJsonObject(management) && typeof management.type === 'string' && management.type !== '') turn.kind = management.type;
  }

  // Tool calls first: the observation links to them. `stepCalls` maps this step's ids to their tcids.
  const stepCalls = new Map<string, string>();
  if (src === 'agent') {
    assignDefined(turn, {
      model: read.pick(step, 'model_name', isStringOrNull, pointer),
      effort: read.pick(step, 'reasoning_effort', isEffort, pointer),
      reason: read.pick(step, 'reasoning_content', isStringOrNull, pointer),
    });
    const calls = read.structure(step, 'tool_calls', isArray, pointer, fail, 'an array of tool calls');
    if (calls !== undefined) {
      turn.tool_calls = decodeObjects(calls, childPointer(pointer, 'tool_calls'), 'an ATIF tool call', fail, (call, callPointer) => decodeCall(call, callPointer, callIds, stepCalls, r));
    }
    const metrics = read.pick(step, 'metrics', isObjectValue, pointer);
    if (metrics !== undefined) decodeMetrics(metrics, childPointer(pointer, 'metrics'), turn, read, unknown);
  }
  const observation = read.structure(step, 'observation', isObjectValue, pointer, fail, 'an object with a "results" array');
  if (observation !== undefined) {
    const obsPointer = childPointer(pointer, 'observation');
    unknown.collect(observation, new Set(['results']), obsPointer);
    if (!Array.isArray(observation.results)) fail(childPointer(obsPointer, 'results'), 'an observation needs a "results" array');
    turn.observation = {
      results: decodeObjects(observation.results as unknown[], childPointer(obsPointer, 'results'), 'an ATIF observation result', fail, (result, resultPointer) =>
        decodeResult(result, resultPointer, stepCalls, r),
      ),
    };
  }
  return turn;
}

function decodeCall(call: JsonObject, pointer: string, callIds: Set<string>, stepCalls: Map<string, string>, { read, unknown, report, fail }: Reading): ToolCall {
  unknown.collect(call, CALL_KEYS, pointer);
  const idPointer = childPointer(pointer, 'tool_call_id');
  const original = call.tool_call_id;
  if (!isNonEmptyString(original)) return fail(idPointer, 'a tool call needs a "tool_call_id" string');
  if (stepCalls.has(original)) fail(idPointer, `tool_call_id ${shown(original)} is used by an earlier call of this step`);
  if (!isString(call.function_name)) return fail(childPointer(pointer, 'function_name'), 'a tool call needs a "function_name" string');
  if (!Object.hasOwn(call, 'arguments')) fail(childPointer(pointer, 'arguments'), 'a tool call needs "arguments" (an object, {} when there are none)');
  let tcid = original;
  if (callIds.has(tcid)) {
    // Storyline call ids are unique per document; ATIF only asks for uniqueness within a step.
    tcid = renumberedId(original, callIds);
    report(idPointer, `tool_call_id ${JSON.stringify(original)} is used by an earlier step; renamed ${JSON.stringify(tcid)} (the original is kept)`, 'duplicate_tool_call_id');
    unknown.set(idPointer, original);
  }
  callIds.add(tcid);
  stepCalls.set(original, tcid);
  const args = call.arguments;
  if (!isJsonObject(args)) report(childPointer(pointer, 'arguments'), `arguments is ${Array.isArray(args) ? 'an array' : typeof args}, not an object; kept as given`, 'tool_arguments_not_object');
  const out: ToolCall = { tcid, fn: call.function_name as string, args };
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

function decodeResult(result: JsonObject, pointer: string, stepCalls: Map<string, string>, { read, unknown, fail, minor }: Reading): ObservationResult {
  unknown.collect(result, RESULT_KEYS, pointer);
  const out: ObservationResult = {};
  if (Object.hasOwn(result, 'source_call_id')) {
    const scid = result.source_call_id;
    const at = childPointer(pointer, 'source_call_id');
    if (scid !== null && typeof scid !== 'string') fail(at, 'source_call_id must be a string or null');
    const target = scid === null ? null : stepCalls.get(scid as string);
    if (target === undefined) fail(at, `source_call_id ${shown(scid)} names no tool call of this step`);
    // A call renamed for uniqueness in the document: the result links to the new id; the original goes back on export.
    if (target !== scid) unknown.set(at, scid);
    out.source_call_id = target as string | null;
  }
  if (Object.hasOwn(result, 'content')) {
    const content = result.content;
    if (content === null || isContent(content)) out.content = content;
    else unknown.set(childPointer(pointer, 'content'), content);
  }
  const refs = read.structure(result, 'subagent_trajectory_ref', isArray, pointer, fail, 'an array of subagent refs');
  if (refs !== undefined) {
    out.subagent_trajectory_ref = decodeObjects(refs, childPointer(pointer, 'subagent_trajectory_ref'), 'a subagent ref', fail, (ref, refPointer) => {
      unknown.collect(ref, REF_KEYS, refPointer);
      if (minor >= 7 && !isString(ref.trajectory_id) && !isString(ref.trajectory_path)) fail(refPointer, 'a subagent ref needs a "trajectory_id" or a "trajectory_path" string');
      if (minor < 7 && !isString(ref.session_id)) fail(childPointer(refPointer, 'session_id'), 'a subagent ref needs a "session_id" string (up to ATIF-v1.6)');
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
