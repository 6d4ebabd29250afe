/**
 * Storyline to ATIF-v1.7 (a trajectory read from an older ATIF whose subagent refs v1.7 would refuse
 * keeps its version), written by Harbor's rules: step ids 1..n, agent-only fields on agent steps
 * only (elsewhere they go to the step's `extra.storyline`), every `source_call_id` answering a call
 * of the same step (results are moved to the step that made the call). Storyline fields ATIF has no
 * place for go to the nearest `extra.storyline`. Documents decoded from ATIF get their unknown
 * fields back at their pointers. A child Storyline that directly follows its parent (or another
 * member of the parent's tree) is embedded in `subagent_trajectories`. A v1.7 subagent ref that
 * names only a session (as Claude Code's and ATIF v1.6's do) is written with that session as its
 * `trajectory_id`, which a child written on its own also takes, so the ref resolves either way.
 */
import { FinalMetrics, type ObservationResult, type Storyline, type ToolCall, type Turn } from '../../storyline/schema.js';
import type { EncodedDocument } from '../types.js';
import { isJsonObject, type JsonObject } from '../../../lib/json-object.js';
import { defined, restoreUnknown, synthesizedSet, unknownFieldsOf } from '../common/unknown.js';
import { resultsByCallingTurn } from '../common/observations.js';
import { parseArguments, safeFileName } from '../common/values.js';
import { CONTEXT_MANAGEMENT_KINDS, FORMAT } from './decode.js';

export const WRITTEN_VERSION = 'ATIF-v1.7';

export async function* encodeAtif(docs: AsyncIterable<Storyline>): AsyncGenerator<EncodedDocument> {
  let tree: Tree | undefined;
  for await (const doc of docs) {
    const host = tree && hostOf(tree.nodes, doc);
    if (host) {
      const value = encodeTrajectory(doc, true);
      // Harbor: the spawning call's result refers to an embedded subagent by its trajectory_id.
      if (doc.origin?.format !== FORMAT && doc.parent?.scid !== undefined) linkSpawn(host.value, doc.parent.scid, value.trajectory_id as string, doc.session);
      ((host.value.subagent_trajectories ??= []) as unknown[]).push(value);
      host.embedded.push(doc.session);
      tree!.nodes.push({ doc, value, embedded: [] });
      continue;
    }
    if (tree) yield finished(tree);
    const value = encodeTrajectory(doc, false);
    tree = { root: doc, value, nodes: [{ doc, value, embedded: [] }] };
  }
  if (tree) yield finished(tree);
}

/**
 * The document of a tree, its refs by session only completed for v1.7 (which wants a trajectory_id
 * or trajectory_path on each) once every child is embedded, so an embedded child's own id wins.
 */
function finished(tree: Tree): EncodedDocument {
  for (const { value } of tree.nodes) {
    if (value.schema_version !== WRITTEN_VERSION) continue; // a v1.6 trajectory kept as read (refersBySessionOnly)
    for (const result of resultsOf(value)) {
      if (!Array.isArray(result.subagent_trajectory_ref)) continue;
      result.subagent_trajectory_ref = (result.subagent_trajectory_ref as JsonObject[]).map((ref) =>
        ref.trajectory_id === undefined && ref.trajectory_path === undefined && typeof ref.session_id === 'string' ? { trajectory_id: ref.session_id, ...ref } : ref,
      );
    }
  }
  return { name: safeFileName(tree.root.trajectory ?? tree.root.session, '.json'), value: tree.value };
}

/** The document being written: its root and every trajectory in it, depth first. */
interface Tree {
  root: Storyline;
  value: JsonObject;
  nodes: TreeNode[];
}

/** A trajectory of the document being written, and the sessions of the children embedded in it so far. */
interface TreeNode {
  doc: Storyline;
  value: JsonObject;
  embedded: string[];
}

/**
 * The trajectory `doc` is embedded in: the latest one of the tree with the parent's session that
 * still lists `doc`'s session among its children. Sessions are run-scoped in ATIF v1.7, so a
 * subagent may share its parent's or a sibling's; counting the listed and embedded children (not
 * looking sessions up) tells them apart, and the latest node is the nearest in depth-first order.
 */
function hostOf(nodes: TreeNode[], doc: Storyline): TreeNode | undefined {
  if (!doc.parent) return undefined;
  const count = (list: string[]) => list.filter((s) => s === doc.session).length;
  for (let i = nodes.length - 1; i >= 0; i--) {
    const node = nodes[i] as TreeNode;
    if (node.doc.session === doc.parent.psid && count(node.doc.children ?? []) > count(node.embedded)) return node;
  }
  return undefined;
}

/** Adds a `subagent_trajectory_ref` to the observation result of call `scid` (when there is one). */
function linkSpawn(parent: JsonObject, scid: string, trajectoryId: string, session: string): void {
  for (const result of resultsOf(parent)) {
    if (result.source_call_id !== scid) continue;
    const refs = Array.isArray(result.subagent_trajectory_ref) ? (result.subagent_trajectory_ref as JsonObject[]) : [];
    if (refs.some((ref) => ref.trajectory_id === trajectoryId)) return;
    // A ref by session only (what ≤ v1.6 wrote) gets the id; otherwise a new ref is added.
    const bySession = refs.find((ref) => ref.trajectory_id === undefined && ref.session_id === session);
    result.subagent_trajectory_ref = bySession
      ? refs.map((ref) => (ref === bySession ? { trajectory_id: trajectoryId, ...ref } : ref))
      : [...refs, { trajectory_id: trajectoryId, session_id: session }];
    return;
  }
}

/** The observation results of every step of an encoded trajectory. */
function* resultsOf(trajectory: JsonObject): Generator<JsonObject> {
  for (const step of trajectory.steps as JsonObject[]) {
    if (isJsonObject(step.observation) && Array.isArray(step.observation.results)) yield* step.observation.results as JsonObject[];
  }
}

/**
 * final_metrics with its keys in ATIF's order, the one the decoder builds them in: session logs
 * count total_steps first, and written as they hold it a re-import would export other bytes.
 */
function inAtifOrder(metrics: FinalMetrics | undefined): JsonObject | undefined {
  return metrics && defined(Object.fromEntries(Object.keys(FinalMetrics.properties).map((key) => [key, metrics[key as keyof FinalMetrics]])));
}

/** One trajectory object (without embedded children). `embedded` drops the parent link, which the embedding says. */
export function encodeTrajectory(doc: Storyline, embedded: boolean): JsonObject {
  const fromAtif = doc.origin?.format === FORMAT;
  const synthesized = synthesizedSet(doc);
  const out: JsonObject = { schema_version: fromAtif && refersBySessionOnly(doc) ? (doc.origin?.schema_version ?? WRITTEN_VERSION) : WRITTEN_VERSION };
  if (!(fromAtif && synthesized.has('/session'))) out.session_id = doc.session;
  // A subagent is referred to by trajectory_id: Harbor requires one on an embedded subagent, and a
  // ref by session only is written with the session as the id (finished), so one on its own takes it too.
  const trajectoryId = doc.trajectory ?? (doc.parent ? doc.session : undefined);
  if (trajectoryId !== undefined) out.trajectory_id = trajectoryId;
  // Harbor requires both; a Storyline from another format may have neither a name nor a version.
  const agent: JsonObject = { name: doc.agent.name ?? doc.agent.id, version: doc.agent.ver ?? 'unknown' };
  Object.assign(agent, defined({ model_name: doc.agent.model, tool_definitions: doc.agent.tools, extra: doc.agent.extra }));
  out.agent = agent;
  out.steps = encodeSteps(doc.turns, fromAtif);
  Object.assign(out, defined({ notes: doc.notes, final_metrics: inAtifOrder(doc.final_metrics), continued_trajectory_ref: doc.continued_trajectory_ref }));
  const only = defined({
    run: doc.run,
    attempt_id: doc.attempt_id,
    task: doc.task,
    prompt: doc.prompt,
    started_at: doc.started_at,
    finished_at: doc.finished_at,
    parent: embedded ? undefined : doc.parent,
  });
  const extra = withStorylineOnly(doc.extra, only);
  if (extra !== undefined) out.extra = extra;
  if (fromAtif) restoreUnknown(out, unknownFieldsOf(doc, FORMAT));
  return out;
}

/**
 * True when a subagent ref names only a session: valid up to v1.6, refused by v1.7 (which wants a
 * trajectory_id or trajectory_path). A trajectory read from ATIF with one keeps its own version.
 */
function refersBySessionOnly(doc: Storyline): boolean {
  return doc.turns.some((turn) => turn.observation?.results.some((r) => r.subagent_trajectory_ref?.some((ref) => ref.trajectory_id === undefined && ref.trajectory_path === undefined)));
}

/** `extra` plus the Storyline-only fields under `extra.storyline` (unchanged when there are none). */
function withStorylineOnly(extra: JsonObject | undefined, only: JsonObject): JsonObject | undefined {
  if (Object.keys(only).length === 0) return extra;
  return { ...(extra ?? {}), storyline: only };
}

function encodeSteps(turns: Turn[], fromAtif: boolean): JsonObject[] {
  // Harbor: a result's source_call_id must name a call of the same step. Move results to the step
  // that made the call (sources such as chat logs attach results to the following turn).
  const results = resultsByCallingTurn(turns);
  return turns.map((turn, t) => encodeStep(turn, t, results[t] as ObservationResult[], fromAtif));
}

function encodeStep(turn: Turn, index: number, results: ObservationResult[], fromAtif: boolean): JsonObject {
  const step: JsonObject = { step_id: index + 1 };
  if (turn.ts !== undefined) step.timestamp = turn.ts;
  step.source = turn.src;
  step.message = turn.msg;
  const metrics = turn.metrics || turn.latency_ms !== undefined || turn.ttft_ms !== undefined ? defined({ ...(turn.metrics ?? {}), latency_ms: turn.latency_ms, ttft_ms: turn.ttft_ms }) : undefined;
  const agentOnly = defined({
    model_name: turn.model,
    reasoning_effort: turn.effort,
    reasoning_content: turn.reason,
    tool_calls: turn.tool_calls?.map((call) => encodeCall(call, fromAtif)),
    metrics,
  });
  if (turn.src === 'agent') Object.assign(step, agentOnly);
  if (turn.observation !== undefined || results.length > 0) step.observation = { results: results.map(encodeResult) };
  Object.assign(step, defined({ llm_call_count: turn.nllm, is_copied_context: turn.copied }));

  let extra = turn.extra;
  const managed = isJsonObject(extra?.context_management) && extra.context_management.type === turn.kind;
  if (turn.kind !== undefined && !managed && CONTEXT_MANAGEMENT_KINDS.has(turn.kind) && turn.src === 'system') {
    extra = { ...(extra ?? {}), context_management: { type: turn.kind } };
  }
  const kindWritten = managed || (turn.kind !== undefined && CONTEXT_MANAGEMENT_KINDS.has(turn.kind) && turn.src === 'system');
  const only = defined({
    kind: kindWritten ? undefined : turn.kind,
    env: turn.env,
    prompt: turn.prompt,
    finished_at: turn.finished_at,
    ...(turn.src === 'agent' ? {} : agentOnly),
  });
  extra = withStorylineOnly(extra, only);
  if (extra !== undefined) step.extra = extra;
  return step;
}

function encodeCall(call: ToolCall, fromAtif: boolean): JsonObject {
  let args = call.args;
  if (!isJsonObject(args) && !fromAtif) {
    // ATIF arguments are an object; keep anything else under a key rather than lose it.
    const parsed = typeof args === 'string' ? parseArguments(args) : undefined;
    args = parsed?.parsed && isJsonObject(parsed.value) ? parsed.value : { raw_arguments: args };
  }
  const out: JsonObject = { tool_call_id: call.tcid, function_name: call.fn, arguments: args };
  // ATIF's decoder sets none of these: a document that has them got them elsewhere, whatever its origin says.
  const only = defined({ kind: call.kind, duration_ms: call.duration_ms, response: call.response });
  const extra = withStorylineOnly(call.extra, only);
  if (extra !== undefined) out.extra = extra;
  if (call.result !== undefined) out.result = call.result;
  return out;
}

function encodeResult(result: ObservationResult): JsonObject {
  const out: JsonObject = defined({ source_call_id: result.source_call_id, content: result.content, subagent_trajectory_ref: result.subagent_trajectory_ref });
  const extra = result.is_error === undefined ? result.extra : { ...(result.extra ?? {}), is_error: result.is_error };
  if (extra !== undefined) out.extra = extra;
  return out;
}
