/**
 * chat-messages rows to Storyline. The shapes, told apart by their keys and recorded in
 * `origin.schema_version` so that export writes the same shape back:
 * - `messages`: one conversation per row (`messages` array, or the array as a JSON string);
 * - `conversations`: the same, in a `conversations` list of `{role, content}` messages (as
 *   evaluation frameworks export traces for training);
 * - `sharegpt`: one conversation per row in `conversations` (`from`/`value`);
 * - `session_steps` (`{"session_steps": [rows], ...}`), `session_steps_array` (a JSON array of rows) and
 *   `session_steps_lines` (one row per JSONL line): one row per LLM call, grouped by `session_id`
 *   and ordered by `step_id` (reference/trajectory-formats.md §3).
 *
 * The keys of a conversation row besides its messages are its metadata: kept as given in the
 * Storyline's `meta.row` (runs.meta_json, for `query`; export writes them back from there), and
 * mapped to the Storyline field that means the same where there is one (ROW_FIELDS). Row keys of a
 * per-call row that the Storyline does not model go to its agent turn's `extra.row`.
 *
 * Refused (exit 2, at the pointer): a row that is none of these; messages that are not an array of
 * objects with a `role` string; per-call rows without a `session_id` string or a `step_id` > 0 (a
 * number, or a string of decimal digits as some exporters write numbers; so are token counts and
 * epoch `created_at`, read as the numbers they spell and written back as they were), a
 * `step_id` repeated within a session, or two `run_id`s in one session. Unknown roles and message
 * keys are kept.
 */
import { setOwn } from '../../../lib/own-property.js';
import { isDeepStrictEqual } from 'node:util';
import type { Storyline, Turn } from '../../storyline/schema.js';
import { STORYLINE_SCHEMA_VERSION } from '../../storyline/schema.js';
import { SourceError } from '../errors.js';
import { isJsonObject, type JsonObject } from '../../../lib/json-object.js';
import { assignDefined, childPointer, defined, markSynthesized, shown, UnknownFields } from '../common/unknown.js';
import { countOf, numberInString, parseArguments } from '../common/values.js';
import { appendMessage, appendMessages, FORMAT, newMessageContext, type MessageContext } from './messages.js';
import { appendConversation } from './sharegpt.js';

export type ChatShape = 'messages' | 'conversations' | 'sharegpt' | 'session_steps' | 'session_steps_array' | 'session_steps_lines';

export interface RowLocation {
  relPath: string;
  line: number | undefined;
  pointer: string;
}

type Report = (code: string, message: string, line?: number) => void;

export const isSessionRow = (value: unknown): value is JsonObject =>
  isJsonObject(value) && typeof value.session_id === 'string' && Object.hasOwn(value, 'step_id') && (Object.hasOwn(value, 'messages') || Object.hasOwn(value, 'response'));
export const isConversationRow = (value: unknown): value is JsonObject =>
  isJsonObject(value) && (Array.isArray(value.conversations) || Array.isArray(value.messages) || (typeof value.messages === 'string' && value.messages.trimStart().startsWith('[')));
/** ShareGPT (`from`/`value`) rather than `{role, content}` messages under `conversations`. */
export const isShareGpt = (conversations: unknown[]): boolean => conversations.some((m) => isJsonObject(m) && Object.hasOwn(m, 'from'));

/** Row metadata keys that a Storyline field means (the first present of each list wins). */
const ROW_FIELDS = {
  session: ['traj_id', 'id', 'session_id', 'conversation_id', 'instance_id'],
  agentId: ['agent_id', 'agent', 'agent_name', 'model', 'model_name'],
  agentName: ['agent_name', 'agent'],
  agentVersion: ['agent_version'],
  model: ['model', 'model_name'],
  run: ['run_id', 'run id', 'run'],
} as const;
/** Row metadata keys that are the outcome of the conversation: `task.result`. */
const RESULT_KEYS = ['result', 'score', 'resolved', 'reward', 'correct', 'success', 'passed', 'exit_status'];
const firstString = (row: JsonObject, keys: readonly string[]): string | undefined =>
  keys.map((k) => row[k]).find((v): v is string => typeof v === 'string' && v !== '');

function newStoryline(session: string, shape: ChatShape, where: RowLocation): Storyline {
  return {
    schema_version: STORYLINE_SCHEMA_VERSION,
    session,
    agent: { id: 'unknown' },
    turns: [],
    origin: defined({ format: FORMAT, schema_version: shape, source_path: where.relPath, line: where.line }),
  };
}

/** One conversation row (`messages` or `conversations`). */
export function decodeConversationRow(row: JsonObject, where: RowLocation, ordinal: number, report: Report): Storyline {
  const conversations = Array.isArray(row.conversations) ? row.conversations : undefined;
  const shape: ChatShape = conversations === undefined ? 'messages' : isShareGpt(conversations) ? 'sharegpt' : 'conversations';
  const session = firstString(row, ROW_FIELDS.session);
  const storyline = newStoryline(session ?? `${where.relPath}#${where.line ?? ordinal + 1}`, shape, where);
  if (session === undefined) markSynthesized(storyline, '/session');
  const { messages, conversations: _c, ...metadata } = row;
  mapRowMetadata(storyline, metadata);

  const unknown = new UnknownFields();
  const ctx = newMessageContext(storyline, unknown, where.relPath, where.line, (code, message) => report(code, message, where.line));
  if (shape === 'sharegpt') {
    appendConversation(ctx, conversations as unknown[], `${where.pointer}/conversations`);
  } else if (shape === 'conversations') {
    appendMessages(ctx, conversations as unknown[], `${where.pointer}/conversations`);
  } else {
    let list = messages;
    if (typeof messages === 'string') {
      // Some datasets store the messages array as a JSON string; remember to write it back that way.
      list = parseArguments(messages).value;
      if (!Array.isArray(list)) throw new SourceError({ relPath: where.relPath, line: where.line, pointer: `${where.pointer}/messages` }, 'messages is a string that is not a JSON array');
      (storyline.meta ??= {}).messages_as_json_string = true;
    }
    appendMessages(ctx, list as unknown[], `${where.pointer}/messages`);
  }
  unknown.attach(storyline, FORMAT);
  return storyline;
}

/** A conversation row's metadata: all of it in `meta.row`, and what has a Storyline field there too. */
function mapRowMetadata(storyline: Storyline, metadata: JsonObject): void {
  if (Object.keys(metadata).length === 0) return;
  (storyline.meta ??= {}).row = metadata;
  const agent = storyline.agent;
  agent.id = firstString(metadata, ROW_FIELDS.agentId) ?? agent.id;
  assignDefined(agent, {
    name: firstString(metadata, ROW_FIELDS.agentName),
    ver: firstString(metadata, ROW_FIELDS.agentVersion),
    model: firstString(metadata, ROW_FIELDS.model),
  });
  const tools = typeof metadata.tools === 'string' ? parseArguments(metadata.tools).value : metadata.tools;
  if (Array.isArray(tools) && tools.length > 0) agent.tools = tools;
  assignDefined(storyline, { run: firstString(metadata, ROW_FIELDS.run) });
  const result = defined(Object.fromEntries(RESULT_KEYS.map((k) => [k, metadata[k]])));
  if (Object.keys(result).length > 0) storyline.task = { result };
}

/** Row keys with a Storyline field (besides the document-level `agent_id`, `agent_model`, `run_id`). */
const ROW_MAPPED = new Set(['session_id', 'messages', 'response', 'created_at', 'llm_model']);

interface LocatedRow {
  row: JsonObject;
  pointer: string;
  line: number | undefined;
}

/** A per-call row with its step number (`step_id`, which some exporters write as a string of digits). */
interface NumberedRow extends LocatedRow {
  step: number;
}

/** Row-per-LLM-call rows: one Storyline per session, in order of first appearance. */
export function decodeSessionRows(rows: LocatedRow[], relPath: string, shape: ChatShape, rootExtra: JsonObject | undefined, report: Report): Storyline[] {
  const sessions = new Map<string, NumberedRow[]>();
  for (const located of rows) {
    const { row, pointer, line } = located;
    if (typeof row.session_id !== 'string' || row.session_id === '') throw new SourceError({ relPath, line, pointer: `${pointer}/session_id` }, 'a per-call row needs a "session_id" string');
    const step = countOf(row.step_id);
    if (step === undefined || step === 0) throw new SourceError({ relPath, line, pointer: `${pointer}/step_id` }, `step_id must be an integer > 0, not ${shown(row.step_id)}`);
    if (typeof row.step_id === 'string') report('number_from_string', `at ${pointer}/step_id: step ${shown(row.step_id)} read as the number ${step}`, line);
    const list = sessions.get(row.session_id) ?? [];
    if (list.some((r) => r.step === step)) throw new SourceError({ relPath, line, pointer: `${pointer}/step_id` }, `step_id ${step} appears twice in session ${shown(row.session_id)}`);
    const run = list.find((r) => r.row.run_id !== undefined)?.row.run_id;
    if (run !== undefined && row.run_id !== undefined && !isDeepStrictEqual(run, row.run_id)) {
      throw new SourceError({ relPath, line, pointer: `${pointer}/run_id` }, `session ${shown(row.session_id)} has two run_ids, ${shown(run)} and ${shown(row.run_id)} (one run per session)`);
    }
    list.push({ ...located, step });
    sessions.set(row.session_id, list);
  }
  return [...sessions.entries()].map(([session, list]) => {
    list.sort((a, b) => a.step - b.step);
    const first = list[0] as NumberedRow;
    const storyline = newStoryline(session, shape, { relPath, line: first.line, pointer: first.pointer });
    const doc = { agent_id: first.row.agent_id, agent_model: first.row.agent_model, run_id: first.row.run_id };
    if (typeof doc.agent_id === 'string' && doc.agent_id !== '') storyline.agent.id = doc.agent_id;
    else markSynthesized(storyline, '/agent/id');
    if (typeof doc.agent_model === 'string') storyline.agent.model = doc.agent_model;
    if (typeof doc.run_id === 'string') storyline.run = doc.run_id;
    if (rootExtra && Object.keys(rootExtra).length > 0) storyline.extra = rootExtra;
    const unknown = new UnknownFields();
    let previousLength = -1;
    for (const located of list) {
      const ctx = newMessageContext(storyline, unknown, relPath, located.line, (code, message) => report(code, message, located.line));
      previousLength = decodeSessionRow(ctx, located, previousLength, doc, storyline);
    }
    unknown.attach(storyline, FORMAT);
    return storyline;
  });
}

/** Adds one row's turns; returns the length its successor's `messages` should start from. */
function decodeSessionRow(ctx: MessageContext, located: LocatedRow, previousLength: number, doc: JsonObject, storyline: Storyline): number {
  const { row, pointer, line } = located;
  let messages: unknown = row.messages ?? [];
  if (typeof messages === 'string') messages = parseArguments(messages).value;
  if (!Array.isArray(messages)) throw new SourceError({ relPath: ctx.relPath, line, pointer: `${pointer}/messages` }, 'messages must be an array of chat messages');
  const lastUser = messages.map((m) => (isJsonObject(m) ? m.role : undefined)).lastIndexOf('user');
  let start: number;
  if (previousLength < 0) {
    // The first call's prompt: what precedes its last user message is context copied from elsewhere.
    start = Math.max(lastUser, 0);
    appendMessages(ctx, messages.slice(0, start), `${pointer}/messages`, 0, { copied: true });
  } else if (messages.length >= previousLength) {
    // A later call's prompt repeats the previous prompt and reply; only what follows is new.
    start = previousLength;
  } else {
    ctx.report('prompt_not_extending', `at ${pointer}/messages: the prompt does not extend the previous call's; reading from its last user message`);
    start = Math.max(lastUser, 0);
  }
  for (let i = start; i < messages.length; i += 1) appendMessage(ctx, messages[i], childPointer(`${pointer}/messages`, i));

  if (!isJsonObject(row.response)) {
    // No `response`: the reply is the last assistant message of the prompt, when it ends with one.
    const last = storyline.turns[storyline.turns.length - 1];
    if (last && last.src === 'agent' && !last.copied) {
      annotateRow(last, row, doc);
      return messages.length;
    }
  }
  const response = isJsonObject(row.response) ? row.response : { role: 'assistant', content: '' };
  const turn = appendMessage(ctx, response, `${pointer}/response`) as Turn;
  annotateRow(turn, row, doc);
  return messages.length + 1;
}

/** Row fields on the reply turn: time, model, metrics from `meta_json.env_state`, the rest in `extra.row`. */
function annotateRow(turn: Turn, row: JsonObject, doc: JsonObject): void {
  // Epoch seconds written as a string of digits are epoch seconds; the string goes back on export from `extra.row`.
  const created = numberInString(row.created_at) ?? row.created_at;
  if (typeof created === 'string' || typeof created === 'number') turn.ts = created;
  if (typeof row.llm_model === 'string') turn.model = row.llm_model;
  const meta = typeof row.meta_json === 'string' ? parseArguments(row.meta_json).value : row.meta_json;
  const env = isJsonObject(meta) && isJsonObject(meta.env_state) ? meta.env_state : undefined;
  if (env) {
    const metrics = defined({
      prompt_tokens: countOf(env.prompt_tokens),
      completion_tokens: countOf(env.completion_tokens),
      cached_tokens: countOf(env.cached_tokens),
    });
    if (Object.keys(metrics).length > 0) turn.metrics = metrics;
    const latency = env.total_latency_ms ?? env.latency_ms;
    if (typeof latency === 'number' && latency >= 0) turn.latency_ms = latency;
    if (typeof env.ttft_ms === 'number' && env.ttft_ms >= 0) turn.ttft_ms = env.ttft_ms;
  }
  const rest: JsonObject = {};
  for (const [key, value] of Object.entries(row)) {
    // Document-level keys are kept on the row only where the row differs from the first row.
    const keep = Object.hasOwn(doc, key) ? value !== doc[key] : !ROW_MAPPED.has(key);
    if (keep) setOwn(rest, key, value);
  }
  if (Object.hasOwn(row, 'created_at') && turn.ts !== row.created_at) rest.created_at = row.created_at;
  if (Object.hasOwn(row, 'llm_model') && turn.model === undefined) rest.llm_model = row.llm_model;
  turn.extra = { ...(turn.extra ?? {}), row: rest };
}
