/**
 * What the capture gateway reads of an upstream's answer, from a copy of its bytes (the client gets
 * the bytes themselves, untouched): a JSON body, or a server-sent event stream of OpenAI
 * chat-completion chunks or Anthropic message events, aggregated into the message it streamed
 * (text, reasoning, tool calls, usage, model, finish reason). A compressed answer is decompressed
 * for reading. Reading stops keeping bytes past MAX_KEPT_BYTES, and a stream's aggregate stops
 * growing past as many characters (the answer still passes through whole; the capture says it was cut).
 * A body or an event nesting deeper than MAX_JSON_DEPTH is not read either, and said to be cut: its
 * record could not be written.
 */
import { createBrotliDecompress, createGunzip, createInflate, type Gunzip } from 'node:zlib';
import { jsonOrAsGiven } from '../gateway/decode.js';
import { jsonDepthExceeds } from '../../../lib/json-depth.js';
import { MAX_JSON_DEPTH } from '../../formats/lines.js';
import { isJsonObject, type JsonObject } from '../../../lib/json-object.js';

/**
 * Bytes of one answer the capture keeps to read (and characters of a stream's aggregate). Bound by
 * what the dataset can take as one row: projection writes a call's record through the storage
 * thread, whose heap is 64 MB, and a 64 MiB aggregate did not fit, so its batch failed and was
 * retried for good, holding back every trace after it. 16 MiB is far past any model's reply.
 */
export const MAX_KEPT_BYTES = 16 * 1024 * 1024;

export type Protocol = 'openai-chat' | 'anthropic-messages';


interface ToolCallDraft {
  id: string;
  name: string;
  arguments: string;
  /** Anthropic's tool_use blocks start with an input object (usually empty) before the JSON deltas. */
  input?: unknown;
}

/** The message a stream carried, in the shape of the protocol's non-streamed answer. */
class StreamAggregate {
  text = '';
  reasoning = '';
  readonly calls = new Map<number, ToolCallDraft>();
  usage: JsonObject | undefined;
  model: string | undefined;
  id: string | undefined;
  finish: string | undefined;
  error: unknown;
  events = 0;
  /** Whether text, reasoning or tool arguments were dropped past MAX_KEPT_BYTES characters. */
  truncated = false;
  private kept = 0;

  constructor(private readonly protocol: Protocol) {}

  /** `piece`, or '' once the aggregate holds MAX_KEPT_BYTES characters: an endless stream must not take the memory. */
  private take(piece: string): string {
    if (this.truncated || this.kept + piece.length > MAX_KEPT_BYTES) {
      this.truncated = true;
      return '';
    }
    this.kept += piece.length;
    return piece;
  }

  add(event: JsonObject): void {
    this.events += 1;
    if (this.protocol === 'openai-chat') this.addOpenAi(event);
    else this.addAnthropic(event);
  }

  private addOpenAi(chunk: JsonObject): void {
    if (typeof chunk.model === 'string') this.model = chunk.model;
    if (typeof chunk.id === 'string') this.id = chunk.id;
    if (isJsonObject(chunk.usage)) this.usage = chunk.usage;
    if (chunk.error !== undefined) this.error = chunk.error;
    const choice = Array.isArray(chunk.choices) && isJsonObject(chunk.choices[0]) ? chunk.choices[0] : undefined;
    if (!choice) return;
    if (typeof choice.finish_reason === 'string') this.finish = choice.finish_reason;
    const delta = isJsonObject(choice.delta) ? choice.delta : {};
    if (typeof delta.content === 'string') this.text += this.take(delta.content);
    const reasoning = typeof delta.reasoning_content === 'string' ? delta.reasoning_content : typeof delta.reasoning === 'string' ? delta.reasoning : '';
    this.reasoning += this.take(reasoning);
    for (const call of Array.isArray(delta.tool_calls) ? delta.tool_calls.filter(isJsonObject) : []) {
      const index = typeof call.index === 'number' ? call.index : this.calls.size;
      const draft = this.calls.get(index) ?? { id: '', name: '', arguments: '' };
      if (typeof call.id === 'string') draft.id = call.id;
      const fn = isJsonObject(call.function) ? call.function : {};
      if (typeof fn.name === 'string') draft.name += this.take(fn.name);
      if (typeof fn.arguments === 'string') draft.arguments += this.take(fn.arguments);
      this.calls.set(index, draft);
    }
  }

  private addAnthropic(event: JsonObject): void {
    switch (event.type) {
      case 'message_start': {
        const message = isJsonObject(event.message) ? event.message : {};
        if (typeof message.model === 'string') this.model = message.model;
        if (typeof message.id === 'string') this.id = message.id;
        if (isJsonObject(message.usage)) this.usage = { ...message.usage };
        break;
      }
      case 'content_block_start': {
        const block = isJsonObject(event.content_block) ? event.content_block : {};
        const index = typeof event.index === 'number' ? event.index : this.calls.size;
        if (block.type === 'text' && typeof block.text === 'string') this.text += this.take(block.text);
        if (block.type === 'tool_use') this.calls.set(index, { id: String(block.id ?? ''), name: String(block.name ?? ''), arguments: '', input: block.input });
        break;
      }
      case 'content_block_delta': {
        const delta = isJsonObject(event.delta) ? event.delta : {};
        if (delta.type === 'text_delta' && typeof delta.text === 'string') this.text += this.take(delta.text);
        if (delta.type === 'thinking_delta' && typeof delta.thinking === 'string') this.reasoning += this.take(delta.thinking);
        const draft = typeof event.index === 'number' ? this.calls.get(event.index) : undefined;
        if (delta.type === 'input_json_delta' && draft && typeof delta.partial_json === 'string') draft.arguments += this.take(delta.partial_json);
        break;
      }
      case 'message_delta': {
        const delta = isJsonObject(event.delta) ? event.delta : {};
        if (typeof delta.stop_reason === 'string') this.finish = delta.stop_reason;
        if (isJsonObject(event.usage)) this.usage = { ...this.usage, ...event.usage };
        break;
      }
      case 'error':
        this.error = event.error ?? event;
        break;
      default:
        break;
    }
  }

  /** The streamed message as the protocol's non-streamed answer would have been (what decode.ts reads). */
  body(): JsonObject {
    const calls = [...this.calls.entries()].sort(([a], [b]) => a - b).map(([, c]) => c);
    if (this.protocol === 'openai-chat') {
      const message: JsonObject = { role: 'assistant', content: this.text };
      if (this.reasoning) message.reasoning_content = this.reasoning;
      if (calls.length > 0) message.tool_calls = calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } }));
      return { ...(this.id ? { id: this.id } : {}), object: 'chat.completion', ...(this.model ? { model: this.model } : {}), choices: [{ index: 0, message, finish_reason: this.finish ?? null }], ...(this.usage ? { usage: this.usage } : {}) };
    }
    const content: JsonObject[] = [];
    if (this.reasoning) content.push({ type: 'thinking', thinking: this.reasoning });
    if (this.text) content.push({ type: 'text', text: this.text });
    for (const c of calls) content.push({ type: 'tool_use', id: c.id, name: c.name, input: parseArguments(c.arguments, c.input) });
    return { ...(this.id ? { id: this.id } : {}), type: 'message', role: 'assistant', ...(this.model ? { model: this.model } : {}), content, stop_reason: this.finish ?? null, ...(this.usage ? { usage: this.usage } : {}) };
  }
}

/** A tool's streamed JSON arguments as an object; the text as it came when it is not JSON. */
const parseArguments = (text: string, fallback: unknown): unknown => (text === '' ? (fallback ?? {}) : jsonOrAsGiven(text));

/** The blank line that ends a server-sent event. */
const EVENT_END = /\r?\n\r?\n/;
const EVENT_ENDS = new RegExp(EVENT_END.source, 'g');

/** Reads a copy of an answer's bytes as they pass; `result` once it has ended. */
export class AnswerReader {
  private readonly decoder = new TextDecoder();
  private readonly chunks: Buffer[] = [];
  private kept = 0;
  /**
   * The text of the event under way, in the pieces it came in: each piece is searched once for the
   * blank line that ends it, and joined only then, so an event that never ends costs linear time.
   */
  private pending: string[] = [];
  private pendingLength = 0;
  /** The last characters of `pending`: a blank line may start in them and end in the next piece. */
  private pendingTail = '';
  private inflate: Gunzip | undefined;
  private inflated: Promise<void> = Promise.resolve();
  readonly aggregate: StreamAggregate;
  /** Bytes of the answer as sent (compressed when it was). */
  bytes = 0;
  truncated = false;

  constructor(
    protocol: Protocol,
    readonly streamed: boolean,
    encoding: string | undefined,
  ) {
    this.aggregate = new StreamAggregate(protocol);
    const make = encoding === 'gzip' ? createGunzip : encoding === 'deflate' ? createInflate : encoding === 'br' ? createBrotliDecompress : undefined;
    if (make) {
      const inflate = make() as Gunzip;
      this.inflate = inflate;
      inflate.on('data', (chunk: Buffer) => this.read(chunk));
      this.inflated = new Promise((resolve) => {
        inflate.on('end', resolve);
        inflate.on('error', () => {
          this.truncated = true;
          resolve();
        });
      });
    }
  }

  push(chunk: Buffer): void {
    this.bytes += chunk.length;
    if (this.inflate) this.inflate.write(chunk);
    else this.read(chunk);
  }

  private read(chunk: Buffer): void {
    if (!this.streamed) {
      if (this.kept + chunk.length > MAX_KEPT_BYTES) {
        this.truncated = true;
        return;
      }
      this.chunks.push(chunk);
      this.kept += chunk.length;
      return;
    }
    const text = this.decoder.decode(chunk, { stream: true });
    if (EVENT_END.test(this.pendingTail + text)) this.events(text);
    else this.keepPending(text);
    if (this.pendingLength > MAX_KEPT_BYTES) {
      this.truncated = true;
      this.pending = [];
      this.pendingLength = 0;
    }
  }

  /** The events `text` ends, the one under way first; what follows the last is kept pending. */
  private events(text: string): void {
    const whole = this.pending.join('') + text;
    let start = 0;
    // A blank line is at most 4 characters: one that ends in `text` starts at most 3 before it.
    EVENT_ENDS.lastIndex = Math.max(0, this.pendingLength - 3);
    for (let m = EVENT_ENDS.exec(whole); m; m = EVENT_ENDS.exec(whole)) {
      this.event(whole.slice(start, m.index));
      start = m.index + m[0].length;
    }
    this.pending = [];
    this.pendingLength = 0;
    this.pendingTail = '';
    this.keepPending(whole.slice(start));
  }

  private keepPending(text: string): void {
    if (text === '') return;
    this.pending.push(text);
    this.pendingLength += text.length;
    this.pendingTail = (this.pendingTail + text).slice(-3);
  }

  /** One server-sent event: its data lines joined, as JSON. */
  private event(block: string): void {
    const data = block
      .split(/\r?\n/)
      .filter((line) => line.startsWith('data:'))
      .map((line) => line.slice(5).replace(/^ /, ''))
      .join('\n');
    if (data === '' || data === '[DONE]') return;
    // An event nested deeper than a record may be is not read (as an answer: see result()).
    if (jsonDepthExceeds(Buffer.from(data, 'utf8'), MAX_JSON_DEPTH)) {
      this.truncated = true;
      return;
    }
    try {
      const value = JSON.parse(data) as unknown;
      if (isJsonObject(value)) this.aggregate.add(value);
    } catch {
      this.truncated = true;
    }
  }

  /** The answer's body as text, once it has ended (result()), when it is not a stream and was kept whole: an error page that is not JSON. */
  text(): string | undefined {
    return this.streamed || this.truncated ? undefined : Buffer.concat(this.chunks).toString('utf8');
  }

  /** The answer's body as JSON (the aggregate of a stream); undefined when it is not JSON. */
  async result(): Promise<JsonObject | undefined> {
    if (this.inflate) {
      this.inflate.end();
      await this.inflated;
    }
    if (this.streamed) {
      const rest = this.pending.join('');
      if (rest.trim() !== '') this.event(rest);
      if (this.aggregate.truncated) this.truncated = true;
      return this.aggregate.events > 0 ? this.aggregate.body() : undefined;
    }
    if (this.truncated) return undefined;
    const bytes = Buffer.concat(this.chunks);
    // Nested deeper than a record may be, it is not read: the capture could not be written (its walks run out of stack).
    if (jsonDepthExceeds(bytes, MAX_JSON_DEPTH)) {
      this.truncated = true;
      return undefined;
    }
    try {
      const value = JSON.parse(bytes.toString('utf8')) as unknown;
      return isJsonObject(value) ? value : undefined;
    } catch {
      return undefined;
    }
  }
}
