/**
 * Codex CLI rollout logs (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`) to Storyline
 * (reference/trajectory-formats.md §4.2), current and legacy layouts:
 * - current: every line is `{timestamp, type, payload}` with type session_meta | turn_context |
 *   response_item | event_msg | compacted;
 * - legacy (until about September 2025): line 1 is a bare `{id, timestamp, instructions, git}`,
 *   items are bare response items, and `{"record_type":"state"}` markers are skipped.
 *
 * An agent turn is one model call: the items the model produced (reasoning, messages, tool calls)
 * until its `token_count` event or until tool outputs come back; its metrics are that event's
 * `last_token_usage` (prompt = input incl. cached, cached = cached_input, completion = output incl.
 * reasoning). Tool outputs join their call by `call_id` onto the calling turn's observation.
 * `event_msg` user/agent messages and reasoning repeat response items and are emitted once.
 * `turn_aborted` and `error` events, and response items of kinds this build does not know, are
 * kept as written in `extra.events` of the turn they follow; the
 * `exec_command_end`/`patch_apply_end` of a call give it only what its output item may not say
 * (exit code, duration, status, failure), as the output item is already its result.
 * Injected context (`<environment_context>`, `<user_instructions>`, `<permissions instructions>`, ...)
 * is dropped with a diagnostic; the session's base instructions become the system prompt.
 */
import { basename } from 'node:path';
import type { DecodeContext, DecodedDocument, SourceFile } from '../types.js';
import type { Content, Metrics, ObservationResult, Storyline, ToolCall, Turn } from '../../storyline/schema.js';
import { isJsonObject, type JsonObject } from '../../../lib/json-object.js';
import { defined } from '../common/unknown.js';
import { contentName } from '../common/documents.js';
import { contentText, parseArguments } from '../common/values.js';
import { addMetrics, count, keepEvent, objectLines, RawCollector, SkipTally, startsWithAny, str, totalsOf, type CallSlot } from '../common/session-log.js';

export const FORMAT = 'agenta';
const ENVELOPE_TYPES = new Set(['session_meta', 'turn_context', 'response_item', 'event_msg', 'compacted']);
/** Bare response item types of the legacy layout (and of `response_item` payloads). */
export const ITEM_TYPES = new Set([
  'message',
  'reasoning',
  'function_call',
  'function_call_output',
  'custom_tool_call',
  'custom_tool_call_output',
  'local_shell_call',
  'web_search_call',
  'tool_search_call',
  'tool_search_output',
  'image_generation_call',
  'compaction',
]);
const INJECTED_PREFIXES = ['<environment_context>', '<user_instructions>', '<permissions instructions>', '<turn_context>', '# AGENTS.md instructions', '<INSTRUCTIONS>'];
/** Tool call item types and the function name to use when the item has none. */
const CALL_TYPES: Record<string, string> = {
  function_call: '',
  custom_tool_call: '',
  local_shell_call: 'local_shell',
  tool_search_call: 'tool_search',
  web_search_call: 'web_search',
  image_generation_call: 'image_generation',
};
const OUTPUT_TYPES = new Set(['function_call_output', 'custom_tool_call_output', 'tool_search_output', 'local_shell_call_output']);
/** Calls that never get an output item: they are complete as they are. */
const SELF_CONTAINED_CALLS = new Set(['web_search_call', 'image_generation_call']);

const isInjected = (text: string): boolean => startsWithAny(text, INJECTED_PREFIXES);

interface Output {
  content: Content | null;
  result: unknown;
  exitCode?: number;
  durationMs?: number;
}

/** What a tool output says: Codex wraps shell output as JSON `{output, metadata}` or as a text header. */
function readOutput(output: unknown): Output {
  if (typeof output === 'string') {
    if (output.startsWith('{')) {
      const { value, parsed } = parseArguments(output);
      if (parsed && isJsonObject(value) && typeof value.output === 'string') {
        const metadata = isJsonObject(value.metadata) ? value.metadata : {};
        const exit = metadata.exit_code;
        const seconds = metadata.duration_seconds;
        return defined({
          content: value.output,
          result: value.output,
          exitCode: typeof exit === 'number' && Number.isSafeInteger(exit) ? exit : undefined,
          durationMs: typeof seconds === 'number' && seconds >= 0 ? Math.round(seconds * 1000) : undefined,
        });
      }
    }
    // `Exit code: N` heads shell_command and apply_patch outputs; unified exec says `Process exited with code N`.
    const exit = /^(?:Exit code: |Process exited with code )(-?\d+)$/m.exec(output)?.[1];
    const wall = /^Wall time: ([\d.]+) seconds$/m.exec(output)?.[1];
    return defined({
      content: output,
      result: output,
      exitCode: exit !== undefined ? Number(exit) : undefined,
      durationMs: wall !== undefined ? Math.round(Number(wall) * 1000) : undefined,
    });
  }
  // An array of typed parts (input_text, input_image) is message content; any other value is shown as JSON.
  if (Array.isArray(output) && output.every((p) => isJsonObject(p) && typeof p.type === 'string')) return { content: output as JsonObject[], result: output };
  return { content: output === undefined || output === null ? null : JSON.stringify(output), result: output ?? null };
}

/**
 * The identity of the model call a `token_count` event reports: its time and the session's running
 * total. A forked session's file copies its parent's events as they were, so a copy has the same
 * identity, and counting each identity once counts each call once across files.
 */
function responseIdOf(info: JsonObject, ts: string | undefined): string | undefined {
  const total = isJsonObject(info.total_token_usage) ? count(info.total_token_usage, 'total_tokens') : undefined;
  return ts !== undefined && total !== undefined ? `codex:${ts}:${total}` : undefined;
}

function metricsOf(usage: JsonObject, responseId: string | undefined): Metrics {
  const metrics: Metrics = {};
  const input = count(usage, 'input_tokens');
  const cached = count(usage, 'cached_input_tokens');
  const output = count(usage, 'output_tokens');
  if (input !== undefined) metrics.prompt_tokens = input;
  if (output !== undefined) metrics.completion_tokens = output;
  if (cached !== undefined) metrics.cached_tokens = cached;
  const extra = defined({ reasoning_output_tokens: count(usage, 'reasoning_output_tokens'), total_tokens: count(usage, 'total_tokens'), response_id: responseId });
  if (Object.keys(extra).length > 0) metrics.extra = extra;
  return metrics;
}

class Rollout {
  readonly turns: Turn[] = [];
  readonly calls = new Map<string, CallSlot[]>();
  readonly usedIds = new Set<string>();
  readonly skipped = new SkipTally();
  meta?: JsonObject;
  legacy = false;
  firstTs?: string;
  lastTs?: string;
  model?: string;
  effort?: string;
  pendingEnv?: JsonObject;
  /** The agent turn model output is added to; undefined once it is closed. */
  open?: Turn;
  /** Agent turns since the last user turn, for the event_msg duplicates. */
  sinceUser: Turn[] = [];
  lastUserText?: string;
  lastTotals?: string;
  firstModel?: string;
  /** Whether a call failed, from its end event when that came before its output item. */
  readonly failedBeforeOutput = new Map<ToolCall, boolean>();

  constructor(readonly ctx: DecodeContext) {}

  add(turn: Turn): Turn {
    this.turns.push(turn);
    return turn;
  }

  nextId(): number {
    return this.turns.length + 1;
  }

  /** The open agent turn, or a new one: a model call starts. */
  agentTurn(ts: string | undefined): Turn {
    if (this.open) return this.open;
    const turn = this.add(defined({ id: this.nextId(), src: 'agent' as const, msg: '', ts, model: this.model, effort: this.effort, nllm: 1 }));
    this.open = turn;
    this.sinceUser.push(turn);
    return turn;
  }

  /** True when an agent turn since the last prompt already says `text` (as message or reasoning). */
  alreadySaid(text: string, field: 'msg' | 'reason'): boolean {
    return this.sinceUser.some((turn) => {
      const said = field === 'msg' ? (typeof turn.msg === 'string' ? turn.msg : '') : (turn.reason ?? '');
      return said.split('\n\n').includes(text) || said === text;
    });
  }

  userText(text: string | JsonObject[], ts: string | undefined, number: number): void {
    const plain = typeof text === 'string' ? text : contentText(text);
    if (isInjected(plain)) {
      this.ctx.diagnostic('injected_context_dropped', `dropped injected ${plain.trimStart().split(/[>\n]/)[0]}> context`, number);
      return;
    }
    // event_msg/user_message repeats the response item (either may come first): keep one.
    if (this.sinceUser.length === 0 && this.lastUserText === plain) return;
    this.open = undefined;
    this.sinceUser = [];
    this.lastUserText = plain;
    const turn = this.add(defined({ id: this.nextId(), src: 'user' as const, msg: text, ts }));
    if (this.pendingEnv) {
      turn.env = this.pendingEnv;
      this.pendingEnv = undefined;
    }
  }

  agentText(text: string, ts: string | undefined, phase: string | undefined): void {
    if (text === '' || this.alreadySaid(text, 'msg')) return;
    const turn = this.agentTurn(ts);
    turn.msg = typeof turn.msg === 'string' && turn.msg !== '' ? `${turn.msg}\n\n${text}` : text;
    if (phase !== undefined) turn.extra = { ...turn.extra, phase };
  }

  reasoning(text: string, ts: string | undefined): void {
    if (text === '' || this.alreadySaid(text, 'reason')) return;
    const turn = this.agentTurn(ts);
    turn.reason = turn.reason ? `${turn.reason}\n\n${text}` : text;
  }

  call(item: JsonObject, ts: string | undefined, number: number): void {
    const type = str(item, 'type') ?? '';
    const original = str(item, 'call_id') ?? str(item, 'id') ?? `${type}-line-${number}`;
    let tcid = original;
    for (let n = 2; this.usedIds.has(tcid); n++) tcid = `${original}__${n}`;
    if (tcid !== original) this.ctx.diagnostic('duplicate_tool_call_id', `tool call id ${original} repeats; renamed to ${tcid}`, number);
    this.usedIds.add(tcid);
    let args: unknown;
    if (type === 'function_call') {
      const text = item.arguments;
      if (typeof text === 'string') {
        const { value, parsed } = parseArguments(text);
        if (!parsed) this.ctx.diagnostic('tool_arguments_not_json', `arguments of ${tcid} are not JSON that parses exactly; kept as text`, number);
        args = value;
      } else args = text ?? {};
    } else if (type === 'custom_tool_call') args = { input: item.input ?? '' };
    else if (type === 'tool_search_call') args = typeof item.arguments === 'string' ? parseArguments(item.arguments).value : (item.arguments ?? {});
    else if (type === 'image_generation_call') args = defined({ revised_prompt: item.revised_prompt });
    else args = item.action ?? {};
    const namespace = str(item, 'namespace');
    const call: ToolCall = { tcid, fn: str(item, 'name') ?? CALL_TYPES[type] ?? type, args, kind: type };
    // An image generation call holds its own result: the generated image, base64.
    if (type === 'image_generation_call' && item.result !== undefined) call.result = item.result;
    const status = str(item, 'status');
    if (status !== undefined) call.response = { status };
    if (namespace !== undefined) call.extra = { namespace };
    const turn = this.agentTurn(ts);
    (turn.tool_calls ??= []).push(call);
    const slots = this.calls.get(original) ?? [];
    slots.push({ turn, call, answered: SELF_CONTAINED_CALLS.has(type) });
    this.calls.set(original, slots);
  }

  output(item: JsonObject, number: number): void {
    const id = str(item, 'call_id');
    const slots = id !== undefined ? this.calls.get(id) : undefined;
    const slot = slots?.find((s) => !s.answered);
    if (!id || !slot) {
      const code = slots ? 'duplicate_tool_result' : 'orphan_tool_result';
      this.ctx.diagnostic(code, slots ? `another output for tool call ${id}; dropped` : `output for ${id ?? '(no call_id)'} answers no call; dropped`, number);
      return;
    }
    slot.answered = true;
    const out = readOutput(item.type === 'tool_search_output' ? item.tools : item.output);
    const result: ObservationResult = { source_call_id: slot.call.tcid, content: out.content };
    if (out.exitCode !== undefined) {
      result.is_error = out.exitCode !== 0;
      slot.call.response = { ...slot.call.response, exit_code: out.exitCode };
    } else {
      const failed = this.failedBeforeOutput.get(slot.call);
      if (failed !== undefined) result.is_error = failed;
    }
    slot.call.result = out.result;
    if (out.durationMs !== undefined) slot.call.duration_ms = out.durationMs;
    (slot.turn.observation ??= { results: [] }).results.push(result);
    // The model is called again with the outputs: what follows is a new turn.
    this.open = undefined;
  }

  tokens(info: unknown, ts: string | undefined, number: number): void {
    if (!isJsonObject(info) || !isJsonObject(info.last_token_usage)) return; // the first token_count of a turn has info null
    const totals = JSON.stringify(info.total_token_usage ?? null);
    if (totals !== 'null' && totals === this.lastTotals) return; // repeated event: same running total
    this.lastTotals = totals;
    const metrics = metricsOf(info.last_token_usage, responseIdOf(info, ts));
    const target = this.open ?? this.sinceUser.at(-1);
    if (target && !target.metrics) target.metrics = metrics;
    else if (target) {
      this.ctx.diagnostic('token_count_merged', 'a second model call was reported for one turn; its usage was added to the turn', number);
      target.metrics = { ...addMetrics(target.metrics ?? {}, metrics), ...(target.metrics?.extra ? { extra: target.metrics.extra } : {}) };
    } else {
      this.ctx.diagnostic('token_count_unattributed', 'token usage reported before any model output; not attributed', number);
    }
    this.open = undefined;
  }

  /** An event about the turn in progress, kept on the latest turn. */
  event(event: JsonObject, ts: string | undefined, number: number): void {
    const last = this.turns.at(-1);
    if (last) keepEvent(last, ts !== undefined ? { ...event, timestamp: ts } : event);
    else this.skipped.note(`event_msg/${String(event.type)} (before any turn)`, number);
  }

  /**
   * `exec_command_end`/`patch_apply_end`: its output text is the call's output item, already the
   * result; what it may add is the exit code, duration, status and whether the patch applied.
   * The call item always comes first; the output item may come before or after.
   */
  commandEnd(event: JsonObject, number: number): void {
    const id = str(event, 'call_id');
    const slot = id !== undefined ? this.calls.get(id)?.at(-1) : undefined;
    if (!slot) {
      this.skipped.note(`event_msg/${String(event.type)} (no call)`, number);
      return;
    }
    const { call } = slot;
    const exit = typeof event.exit_code === 'number' && Number.isSafeInteger(event.exit_code) ? event.exit_code : undefined;
    const status = str(event, 'status');
    if (exit !== undefined || status !== undefined) call.response = defined({ exit_code: exit, status, ...call.response });
    const duration = isJsonObject(event.duration) ? event.duration : undefined;
    if (typeof duration?.secs === 'number' && typeof duration.nanos === 'number' && duration.secs >= 0) call.duration_ms ??= Math.round(duration.secs * 1000 + duration.nanos / 1e6);
    const failed = exit !== undefined ? exit !== 0 : typeof event.success === 'boolean' ? !event.success : undefined;
    if (failed === undefined) return;
    const result = slot.turn.observation?.results.find((r) => r.source_call_id === call.tcid);
    if (result) result.is_error ??= failed;
    else this.failedBeforeOutput.set(call, failed);
  }

  compaction(message: string, ts: string | undefined, extra: JsonObject): void {
    this.open = undefined;
    this.add(defined({ id: this.nextId(), src: 'system' as const, msg: message, ts, kind: 'compaction', extra: { context_management: { type: 'compaction', boundary: 'replace' }, ...extra } }));
  }
}

function responseItem(r: Rollout, item: JsonObject, ts: string | undefined, number: number): void {
  const type = str(item, 'type') ?? '';
  if (type === 'message') {
    const role = str(item, 'role');
    const content = item.content;
    const text = contentText(content);
    const hasImages = Array.isArray(content) && content.some((p) => isJsonObject(p) && p.type !== 'input_text' && p.type !== 'output_text');
    const msg: string | JsonObject[] = hasImages ? (content as unknown[]).filter(isJsonObject) : text;
    if (role === 'user') r.userText(msg, ts, number);
    else if (role === 'assistant') r.agentText(text, ts, str(item, 'phase'));
    else if (isInjected(text)) r.ctx.diagnostic('injected_context_dropped', `dropped injected ${role ?? 'system'} context`, number);
    else {
      r.open = undefined;
      r.add(defined({ id: r.nextId(), src: 'system' as const, msg, ts, kind: role === 'developer' ? 'developer' : undefined }));
    }
    return;
  }
  if (type === 'reasoning') {
    const text = [contentText(item.summary), contentText(item.content)].filter((t) => t !== '').join('\n\n');
    r.reasoning(text, ts);
    if (typeof item.encrypted_content === 'string') {
      const turn = r.agentTurn(ts);
      turn.extra = { ...turn.extra, encrypted_reasoning: true };
    }
    return;
  }
  if (type in CALL_TYPES) return r.call(item, ts, number);
  if (OUTPUT_TYPES.has(type)) return r.output(item, number);
  if (type === 'compaction') return r.compaction('', ts, { encrypted: typeof item.encrypted_content === 'string' });
  // An item of a kind this build does not know (ghost snapshots, later Codex versions') is kept as written.
  r.event(item, ts, number);
}

function eventMsg(r: Rollout, event: JsonObject, ts: string | undefined, number: number): void {
  switch (event.type) {
    case 'user_message':
      if (typeof event.message === 'string') r.userText(event.message, ts, number);
      return;
    case 'agent_message':
      if (typeof event.message === 'string') r.agentText(event.message, ts, str(event, 'phase'));
      return;
    case 'agent_reasoning':
      if (typeof event.text === 'string') r.reasoning(event.text, ts);
      return;
    case 'token_count':
      r.tokens(event.info, ts, number);
      return;
    case 'turn_aborted':
    case 'error':
      r.event(event, ts, number);
      return;
    case 'exec_command_end':
    case 'patch_apply_end':
      r.commandEnd(event, number);
      return;
    default:
      r.skipped.note(`event_msg/${String(event.type)}`, number);
  }
}

export async function* decodeCodex(file: SourceFile, ctx: DecodeContext): AsyncGenerator<DecodedDocument> {
  const raw = new RawCollector(ctx.keepRaw);
  const r = new Rollout(ctx);
  let first = true;
  for await (const { value: line, number } of objectLines(file, raw, ctx)) {
    if (ctx.signal.aborted) return;
    const envelope = typeof line.type === 'string' && ENVELOPE_TYPES.has(line.type) && isJsonObject(line.payload);
    const ts = envelope ? str(line, 'timestamp') : undefined;
    if (ts !== undefined) {
      r.firstTs ??= ts;
      r.lastTs = ts;
    }
    if (first && !envelope && line.type === undefined && typeof line.id === 'string') {
      // Legacy layout: a bare session header on line 1.
      r.legacy = true;
      r.meta = line;
      const headerTs = str(line, 'timestamp');
      r.firstTs ??= headerTs;
      first = false;
      continue;
    }
    first = false;
    if (!envelope) {
      if (line.record_type !== undefined) r.skipped.note(`record_type ${String(line.record_type)}`, number);
      else if (typeof line.type === 'string' && ITEM_TYPES.has(line.type)) responseItem(r, line, undefined, number);
      else r.skipped.note(typeof line.type === 'string' ? `unknown ${line.type}` : 'unrecognised', number);
      continue;
    }
    const payload = line.payload as JsonObject;
    switch (line.type) {
      case 'session_meta':
        if (r.meta) r.skipped.note('repeated session_meta', number);
        else r.meta = payload;
        break;
      case 'turn_context': {
        r.model = str(payload, 'model') ?? r.model;
        r.firstModel ??= r.model;
        const effort = payload.effort;
        r.effort = typeof effort === 'string' ? effort : r.effort;
        // The rest is the turn's environment as Codex wrote it (cwd, policies, date, time zone, ...):
        // all of it, so fields of later Codex versions are kept too.
        const { model: _model, effort: _effort, ...env } = payload;
        r.pendingEnv = defined(env);
        break;
      }
      case 'response_item':
        responseItem(r, payload, ts, number);
        break;
      case 'event_msg':
        eventMsg(r, payload, ts, number);
        break;
      case 'compacted': {
        const history = payload.replacement_history;
        r.compaction(str(payload, 'message') ?? '', ts, Array.isArray(history) ? { replacement_items: history.length } : {});
        break;
      }
    }
  }
  r.skipped.report(ctx, 'record_type_skipped');
  for (const slots of r.calls.values()) {
    for (const slot of slots) if (!slot.answered) ctx.diagnostic('tool_call_without_output', `tool call ${slot.call.tcid} has no output`);
  }
  if (r.turns.length === 0) {
    ctx.diagnostic('no_conversation', 'no turns in this rollout; nothing imported from it');
    return;
  }
  const bytes = raw.bytes();
  yield { storyline: storylineOf(r, file), sourceDocument: 0, ...(bytes ? { raw: bytes } : {}) };
}

/** The session id: session_meta's (or the legacy header's) id, else the uuid of the file name. */
function sessionOf(r: Rollout, relPath: string): string {
  const id = str(r.meta, 'id');
  if (id) return id;
  const name = basename(contentName(relPath)).replace(/\.jsonl?$/i, '');
  return /([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/i.exec(name)?.[1] ?? name;
}

function storylineOf(r: Rollout, file: SourceFile): Storyline {
  const meta = r.meta ?? {};
  const session = sessionOf(r, file.relPath);
  const storyline: Storyline = {
    schema_version: 'storyline/v1',
    session,
    agent: defined({ id: 'codex', name: 'Codex CLI', ver: str(meta, 'cli_version'), model: r.firstModel }),
    turns: r.turns,
    origin: { format: FORMAT, source_path: file.relPath, line: 1, document_id: session },
    final_metrics: totalsOf(r.turns),
  };
  const instructions = isJsonObject(meta.base_instructions) ? str(meta.base_instructions, 'text') : str(meta, 'instructions');
  if (instructions) storyline.prompt = { system: instructions };
  const started = str(meta, 'timestamp') ?? r.firstTs;
  if (started !== undefined) storyline.started_at = started;
  if (r.lastTs !== undefined) storyline.finished_at = r.lastTs;
  const source = meta.source;
  const spawn = isJsonObject(source) && isJsonObject(source.subagent) && isJsonObject(source.subagent.thread_spawn) ? source.subagent.thread_spawn : undefined;
  const parent = str(spawn, 'parent_thread_id');
  if (parent) storyline.parent = { psid: parent, rel: 'spawn' };
  const extra = defined({
    layout: r.legacy ? 'legacy' : undefined,
    cwd: meta.cwd,
    originator: meta.originator,
    source,
    model_provider: meta.model_provider,
    git: meta.git,
    forked_from_id: meta.forked_from_id,
    agent_nickname: meta.agent_nickname,
    agent_role: meta.agent_role,
  });
  if (Object.keys(extra).length > 0) storyline.extra = extra;
  return storyline;
}
