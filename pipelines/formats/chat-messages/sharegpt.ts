/**
 * ShareGPT `conversations` (`from`/`value`) <-> Storyline turns. Tool calls are text markup:
 * `<tool_call>{"name", "arguments"}</tool_call>` in a `gpt` value and `<tool_response>…</tool_response>`
 * in the following `tool` value, linked by position. The values are re-created from the turns; where
 * that would not give the exact source text, the source text is kept at its pointer.
 */
import { setOwn } from '../../../lib/own-property.js';
import type { ObservationResult, Turn } from '../../storyline/schema.js';
import { SourceError } from '../errors.js';
import { isJsonObject, type JsonObject } from '../../../lib/json-object.js';
import { childPointer, markSynthesized } from '../common/unknown.js';
import { contentText, isJsonText, parseArguments } from '../common/values.js';
import { TOOL_RESULTS_KIND, type MessageContext } from './messages.js';
import { reimportableJson } from '../../../lib/json-text.js';

const FROM_SRC: Record<string, Turn['src']> = { system: 'system', human: 'user', user: 'user', gpt: 'agent', assistant: 'agent' };
const SRC_FROM: Record<Turn['src'], string> = { system: 'system', user: 'human', agent: 'gpt' };
const TOOL_FROM = new Set(['tool', 'observation', 'function_response', 'ipython']);
const CALL_BLOCK = /<tool_call>\s*([\s\S]*?)\s*<\/tool_call>/g;
const RESPONSE_BLOCK = /<tool_response>\s*([\s\S]*?)\s*<\/tool_response>/g;

export function appendConversation(ctx: MessageContext, conversation: unknown[], pointer: string): void {
  conversation.forEach((entry, i) => {
    const at = childPointer(pointer, i);
    if (!isJsonObject(entry)) throw new SourceError({ relPath: ctx.relPath, line: ctx.line, pointer: at }, 'a ShareGPT message must be a JSON object');
    const from = typeof entry.from === 'string' ? entry.from : '';
    const value = typeof entry.value === 'string' ? entry.value : '';
    if (typeof entry.value !== 'string') ctx.unknown.set(childPointer(at, 'value'), entry.value);
    const extra: JsonObject = {};
    for (const [key, v] of Object.entries(entry)) if (key !== 'from' && key !== 'value') setOwn(extra, key, v);
    if (TOOL_FROM.has(from)) {
      appendResponses(ctx, value, at, extra);
      if (from !== 'tool') ctx.unknown.set(childPointer(at, 'from'), from);
      return;
    }
    const src = FROM_SRC[from] ?? 'user';
    // The encoder writes human/gpt/system; keep any other spelling.
    if (from !== SRC_FROM[src]) ctx.unknown.set(childPointer(at, 'from'), entry.from);
    const turn: Turn = { id: ctx.storyline.turns.length + 1, src, msg: value };
    if (src === 'agent') parseCalls(ctx, turn, value, at);
    if (Object.keys(extra).length > 0) turn.extra = extra;
    if (typeof entry.value === 'string' && gptValue(turn) !== value) ctx.unknown.set(childPointer(at, 'value'), value);
    ctx.storyline.turns.push(turn);
  });
}

function parseCalls(ctx: MessageContext, turn: Turn, value: string, pointer: string): void {
  const calls = [...value.matchAll(CALL_BLOCK)];
  if (calls.length === 0) return;
  const turnIndex = ctx.storyline.turns.length;
  turn.tool_calls = [];
  for (const match of calls) {
    const { value: parsed, parsed: isJson } = parseArguments(match[1] as string);
    if (!isJson) {
      ctx.report('tool_call_markup_invalid', `at ${pointer}/value: a <tool_call> block is not JSON (or nests too deeply); left in the text`);
      continue;
    }
    const call = isJsonObject(parsed) ? parsed : {};
    const index = turn.tool_calls.length;
    const tcid = `call-${turnIndex + 1}-${index}`;
    markSynthesized(ctx.storyline, `/turns/${turnIndex}/tool_calls/${index}/tcid`);
    ctx.callIds.add(tcid);
    turn.tool_calls.push({ tcid, fn: typeof call.name === 'string' ? call.name : '', args: call.arguments ?? {} });
  }
  // The text around the calls is the message; a block that is not JSON stays in it.
  turn.msg = value.replace(CALL_BLOCK, (block: string, inner: string) => (isJsonText(inner) ? '' : block)).trim();
}

function appendResponses(ctx: MessageContext, value: string, pointer: string, extra: JsonObject): void {
  const turns = ctx.storyline.turns;
  let owner = turns[turns.length - 1];
  if (!owner || (owner.src !== 'agent' && owner.kind !== TOOL_RESULTS_KIND)) {
    owner = { id: turns.length + 1, src: 'agent', msg: '', kind: TOOL_RESULTS_KIND };
    turns.push(owner);
  }
  const blocks = [...value.matchAll(RESPONSE_BLOCK)].map((m) => m[1] as string);
  const texts = blocks.length > 0 ? blocks : [value];
  const answered = owner.observation?.results.length ?? 0;
  const results: ObservationResult[] = texts.map((text, i) => {
    const call = owner.tool_calls?.[answered + i];
    const result: ObservationResult = { content: text };
    if (call) result.source_call_id = call.tcid;
    return result;
  });
  if (Object.keys(extra).length > 0 && results[0]) results[0].extra = extra;
  (owner.observation ??= { results: [] }).results.push(...results);
  if (toolValue(results) !== value) ctx.unknown.set(childPointer(pointer, 'value'), value);
}

/** Python's `json.dumps` layout (`", "` and `": "` separators), which ShareGPT exports use. */
export function pyJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(pyJson).join(', ')}]`;
  if (isJsonObject(value)) return `{${Object.entries(value).map(([k, v]) => `${JSON.stringify(k)}: ${pyJson(v)}`).join(', ')}}`;
  return value === undefined ? 'null' : reimportableJson(value);
}

export function gptValue(turn: Turn): string {
  const parts: string[] = [];
  const text = contentText(turn.msg);
  if (text !== '') parts.push(text);
  for (const call of turn.tool_calls ?? []) parts.push(`<tool_call>\n${pyJson({ name: call.fn, arguments: call.args })}\n</tool_call>`);
  return parts.join('\n');
}

export function toolValue(results: ObservationResult[]): string {
  return results.map((r) => `<tool_response>\n${typeof r.content === 'string' ? r.content : contentText(r.content)}\n</tool_response>`).join('\n');
}

/** The ShareGPT messages of a Storyline's turns (results already moved to the calling turn). */
export function conversationOf(turns: Turn[], results: ObservationResult[][]): JsonObject[] {
  const out: JsonObject[] = [];
  turns.forEach((turn, t) => {
    const own = results[t] as ObservationResult[];
    if (turn.kind !== TOOL_RESULTS_KIND) out.push({ from: SRC_FROM[turn.src], value: turn.src === 'agent' ? gptValue(turn) : contentText(turn.msg), ...(turn.extra ?? {}) });
    if (own.length > 0) out.push({ from: 'tool', value: toolValue(own), ...(own[0]?.extra ?? {}) });
  });
  return out;
}
