/**
 * OpenAI chat messages <-> Storyline turns, shared by the per-conversation `messages` rows and the
 * row-per-LLM-call `session_steps` variant. system/developer -> system turn (`kind: developer`),
 * user -> user turn, assistant -> agent turn (tool calls with `arguments` parsed when they are valid
 * JSON, kept verbatim when not), tool -> an observation result on the agent turn that made the call
 * (by `tool_call_id`; without one, the next unanswered call that had no id either).
 * The legacy single `function_call` of an assistant message (before `tool_calls`) is a tool call of
 * kind `legacy_function_call` (not `function_call`, which Codex calls are), answered by the
 * `function` message that follows; both are written back so.
 * Message keys without a Storyline field go to the turn's `extra` (the result's `extra` for tool
 * messages) and come back from there.
 */
import { setOwn } from '../../../lib/own-property.js';
import { isDeepStrictEqual } from 'node:util';
import type { ObservationResult, Storyline, ToolCall, Turn } from '../../storyline/schema.js';
import { SourceError } from '../errors.js';
import { isJsonObject, type JsonObject } from '../../../lib/json-object.js';
import { childPointer, defined, markSynthesized, renumberedId, type UnknownFields } from '../common/unknown.js';
import { isContent, parseArguments } from '../common/values.js';
import { reimportableJson } from '../../../lib/json-text.js';

export const FORMAT = 'chat-messages';

const MESSAGE_KEYS = new Set(['role', 'content', 'reasoning_content', 'tool_calls', 'tool_call_id']);
/** The kind of a tool call read from a legacy `function_call` (one call per message, no id). */
const LEGACY_CALL_KIND = 'legacy_function_call';
const ROLES = new Set(['system', 'developer', 'user', 'assistant', 'tool']);
/** Agent turn that only holds tool results that follow no assistant message. */
export const TOOL_RESULTS_KIND = 'tool_results';

export interface MessageContext {
  storyline: Storyline;
  /** Values kept at their source pointers (a `null` content, an unusual role). */
  unknown: UnknownFields;
  relPath: string;
  line: number | undefined;
  report: (code: string, message: string) => void;
  /** Ids already used by tool calls of the document, with renames of duplicates. */
  callIds: Set<string>;
  renamed: Map<string, string>;
  /** Ids made up for tool calls that had none. */
  idless: Set<string>;
}

export function newMessageContext(storyline: Storyline, unknown: UnknownFields, relPath: string, line: number | undefined, report: MessageContext['report']): MessageContext {
  return { storyline, unknown, relPath, line, report, callIds: new Set(), renamed: new Map(), idless: new Set() };
}

const nextId = (ctx: MessageContext) => ctx.storyline.turns.length + 1;

/** Appends the turns of `messages` (the element at index i is at `pointer`/i). */
export function appendMessages(ctx: MessageContext, messages: unknown[], pointer: string, first = 0, options: { copied?: boolean } = {}): void {
  for (let i = first; i < messages.length; i += 1) appendMessage(ctx, messages[i], childPointer(pointer, i), options);
}

export function appendMessage(ctx: MessageContext, message: unknown, pointer: string, options: { copied?: boolean } = {}): Turn | undefined {
  if (!isJsonObject(message)) throw new SourceError({ relPath: ctx.relPath, line: ctx.line, pointer }, 'a chat message must be a JSON object');
  const role = message.role;
  if (typeof role !== 'string') throw new SourceError({ relPath: ctx.relPath, line: ctx.line, pointer: childPointer(pointer, 'role') }, 'a chat message needs a "role" string');
  if (role === 'tool' || role === 'function') {
    attachToolResult(ctx, message, pointer);
    return undefined;
  }
  const extra: JsonObject = {};
  for (const [key, value] of Object.entries(message)) if (!MESSAGE_KEYS.has(key)) setOwn(extra, key, value);
  if (!ROLES.has(role)) ctx.unknown.set(childPointer(pointer, 'role'), role);
  const src: Turn['src'] = role === 'assistant' ? 'agent' : role === 'system' || role === 'developer' ? 'system' : 'user';
  const turn: Turn = { id: nextId(ctx), src, msg: '' };
  if (role === 'developer') turn.kind = 'developer';
  if (options.copied) turn.copied = true;
  if (src === 'agent') {
    if (message.reasoning_content === null || typeof message.reasoning_content === 'string') turn.reason = message.reasoning_content;
    else if (Object.hasOwn(message, 'reasoning_content')) extra.reasoning_content = message.reasoning_content;
    if (Array.isArray(message.tool_calls)) {
      turn.tool_calls = message.tool_calls.map((call, c) => decodeCall(ctx, call, childPointer(childPointer(pointer, 'tool_calls'), c), ctx.storyline.turns.length, c));
    } else if (Object.hasOwn(message, 'tool_calls')) {
      extra.tool_calls = message.tool_calls;
    } else if (isJsonObject(message.function_call)) {
      const call = decodeCall(ctx, { type: LEGACY_CALL_KIND, function: message.function_call }, childPointer(pointer, 'function_call'), ctx.storyline.turns.length, 0);
      turn.tool_calls = [call];
      delete extra.function_call;
    }
  } else {
    for (const key of ['reasoning_content', 'tool_calls', 'tool_call_id']) if (Object.hasOwn(message, key)) extra[key] = message[key];
  }
  const content = message.content;
  if (isContent(content)) turn.msg = content;
  // What the encoder would write differs (a null content that is not the tool-call-only case): keep the original.
  if (Object.hasOwn(message, 'content') && !isDeepStrictEqual(encodeContent(turn), content)) ctx.unknown.set(childPointer(pointer, 'content'), content);
  if (Object.keys(extra).length > 0) turn.extra = extra;
  ctx.storyline.turns.push(turn);
  return turn;
}

/** The `content` the encoder writes for a turn: `null` for an assistant message that only calls tools. */
export function encodeContent(turn: Turn): unknown {
  return turn.src === 'agent' && turn.msg === '' && (turn.tool_calls?.length ?? 0) > 0 ? null : turn.msg;
}

function decodeCall(ctx: MessageContext, call: unknown, pointer: string, turnIndex: number, index: number): ToolCall {
  if (!isJsonObject(call)) throw new SourceError({ relPath: ctx.relPath, line: ctx.line, pointer }, 'a tool call must be a JSON object');
  const fn = isJsonObject(call.function) ? call.function : {};
  const extra: JsonObject = {};
  for (const [key, value] of Object.entries(call)) if (!['id', 'type', 'function'].includes(key)) setOwn(extra, key, value);
  for (const [key, value] of Object.entries(fn)) if (!['name', 'arguments'].includes(key)) extra[`function.${key}`] = value;
  let tcid = typeof call.id === 'string' && call.id !== '' ? call.id : `call-${turnIndex + 1}-${index}`;
  if (tcid !== call.id) {
    markSynthesized(ctx.storyline, `/turns/${turnIndex}/tool_calls/${index}/tcid`);
    ctx.idless.add(tcid);
    ctx.report('tool_call_id_synthesized', `at ${pointer}: tool call without id; using ${tcid}`);
  }
  if (ctx.callIds.has(tcid)) {
    const fresh = renumberedId(tcid, ctx.callIds);
    ctx.report('duplicate_tool_call_id', `at ${pointer}: tool call id ${JSON.stringify(tcid)} was used before; renamed ${JSON.stringify(fresh)}`);
    ctx.unknown.set(childPointer(pointer, 'id'), call.id);
    ctx.renamed.set(tcid, fresh);
    tcid = fresh;
  }
  ctx.callIds.add(tcid);
  let args: unknown = fn.arguments;
  if (typeof fn.arguments === 'string') {
    const parsed = parseArguments(fn.arguments);
    if (!parsed.parsed) ctx.report('tool_arguments_malformed', `at ${pointer}/function/arguments: not JSON that parses exactly; kept verbatim`);
    args = parsed.value;
  } else if (fn.arguments === undefined) {
    args = {};
  }
  const out: ToolCall = { tcid, fn: typeof fn.name === 'string' ? fn.name : '', args };
  if (typeof call.type === 'string') out.kind = call.type;
  if (Object.keys(extra).length > 0) out.extra = extra;
  return out;
}

/**
 * The call a tool or function message without `tool_call_id` answers: the first unanswered call of
 * the latest assistant message that had no id either (a legacy `function_call` never has one), of
 * the message's `name` when it gives one.
 */
function idlessCallAnswered(ctx: MessageContext, message: JsonObject): string | undefined {
  const turn = [...ctx.storyline.turns].reverse().find((t) => t.src === 'agent' && t.kind !== TOOL_RESULTS_KIND);
  const answered = new Set((turn?.observation?.results ?? []).map((r) => r.source_call_id));
  const name = typeof message.name === 'string' ? message.name : undefined;
  return turn?.tool_calls?.find((c) => ctx.idless.has(c.tcid) && !answered.has(c.tcid) && (name === undefined || c.fn === name))?.tcid;
}

function attachToolResult(ctx: MessageContext, message: JsonObject, pointer: string): void {
  const turns = ctx.storyline.turns;
  const idless = Object.hasOwn(message, 'tool_call_id') ? undefined : idlessCallAnswered(ctx, message);
  const id = typeof message.tool_call_id === 'string' ? (ctx.renamed.get(message.tool_call_id) ?? message.tool_call_id) : idless;
  let owner = id === undefined ? undefined : [...turns].reverse().find((t) => t.tool_calls?.some((c) => c.tcid === id));
  const result: ObservationResult = {};
  if (id !== undefined && owner) result.source_call_id = id;
  else if (Object.hasOwn(message, 'tool_call_id')) {
    ctx.report('orphan_tool_result', `at ${pointer}: tool_call_id ${JSON.stringify(message.tool_call_id)} answers no earlier tool call`);
    ctx.unknown.set(childPointer(pointer, 'tool_call_id'), message.tool_call_id);
  }
  if (message.role !== 'tool') ctx.unknown.set(childPointer(pointer, 'role'), message.role);
  if (isContent(message.content) || message.content === null) result.content = message.content;
  else if (Object.hasOwn(message, 'content')) ctx.unknown.set(childPointer(pointer, 'content'), message.content);
  const extra: JsonObject = {};
  for (const [key, value] of Object.entries(message)) if (!['role', 'content', 'tool_call_id'].includes(key)) setOwn(extra, key, value);
  if (Object.keys(extra).length > 0) result.extra = extra;
  if (!owner) {
    // Attach to the last agent turn, or to a turn made to hold results that follow no assistant message.
    const last = turns[turns.length - 1];
    owner = last && (last.src === 'agent' || last.kind === TOOL_RESULTS_KIND) ? last : undefined;
    if (!owner) {
      owner = { id: nextId(ctx), src: 'agent', msg: '', kind: TOOL_RESULTS_KIND };
      turns.push(owner);
    }
  }
  (owner.observation ??= { results: [] }).results.push(result);
}

/** The assistant message of an agent turn. `history` leaves out reasoning (what clients send back). */
export function assistantMessage(turn: Turn, history = false): JsonObject {
  const extra = turn.extra ?? {};
  const message: JsonObject = { role: 'assistant', content: encodeContent(turn) };
  if (turn.reason !== undefined && !history) message.reasoning_content = turn.reason;
  const [only] = turn.tool_calls ?? [];
  if (turn.tool_calls?.length === 1 && only?.kind === LEGACY_CALL_KIND) message.function_call = encodeCall(only).function as JsonObject;
  else if (turn.tool_calls && turn.tool_calls.length > 0) message.tool_calls = turn.tool_calls.map(encodeCall);
  return { ...message, ...messageExtra(extra) };
}

/** The keys of a turn's `extra` that came from the message (not the row bookkeeping). */
function messageExtra(extra: JsonObject): JsonObject {
  const { row: _row, ...rest } = extra;
  return rest;
}

function encodeCall(call: ToolCall): JsonObject {
  const fnExtra: JsonObject = {};
  const extra: JsonObject = {};
  for (const [key, value] of Object.entries(call.extra ?? {})) {
    if (key.startsWith('function.')) setOwn(fnExtra, key.slice('function.'.length), value);
    else setOwn(extra, key, value);
  }
  return {
    id: call.tcid,
    type: call.kind ?? 'function',
    function: { name: call.fn, arguments: typeof call.args === 'string' ? call.args : reimportableJson(call.args ?? {}), ...fnExtra },
    ...extra,
  };
}

/** The messages of one turn: its own message (none for a results-only turn), then its tool results. */
export function turnMessages(turn: Turn, results: ObservationResult[], history = false): JsonObject[] {
  const out: JsonObject[] = [];
  if (turn.kind !== TOOL_RESULTS_KIND) {
    if (turn.src === 'agent') out.push(assistantMessage(turn, history));
    else out.push({ role: turn.kind === 'developer' && turn.src === 'system' ? 'developer' : turn.src, content: turn.msg, ...messageExtra(turn.extra ?? {}) });
  }
  for (const result of results) {
    const legacy = turn.tool_calls?.some((c) => c.tcid === result.source_call_id && c.kind === LEGACY_CALL_KIND) === true;
    out.push({
      role: legacy ? 'function' : 'tool',
      ...defined({ tool_call_id: typeof result.source_call_id === 'string' && !legacy ? result.source_call_id : undefined }),
      content: result.content ?? '',
      ...(result.extra ?? {}),
    });
  }
  return out;
}
