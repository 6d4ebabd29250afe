/**
 * What both workers are made of: a loaded model whose context has N sequences, a FIFO queue of
 * requests waiting for a free one, and the generation of one request on its sequence (sampling,
 * stop strings, the caps on its length), with the counts a load report gives.
 *
 * Sequences that generate at the same time are decoded together: node-llama-cpp gathers the tokens
 * every sequence has ready on one event-loop cycle into one batch, so a request admitted while
 * others generate has its prompt decoded in the next step beside their next tokens (continuous
 * batching). With one sequence (LocalModelWorker) requests take turns.
 *
 * A generation is pulled: the next token is decoded when the caller asks for the next chunk, so a
 * slow reader slows its own sequence only. Leaving the stream (`return()`, which is what a reset
 * HTTP/2 stream or a `break` does) stops it at once, even while it waits in the queue.
 */
import type { LlamaContextSequence, Token } from 'node-llama-cpp';
import { Value } from '@sinclair/typebox/value';
import { LoadedModel, type ModelConfig, type Prompt } from './backend.js';
import { GenerateRequest, type FinishReason, type GenerateChunk, type LoadReport } from './contract.js';

export interface RunnerOptions extends ModelConfig {
  /** Caps the generated tokens of every request (EngineWorker's max_new_tokens). */
  maxNewTokens?: number;
  /** Requests that may wait for a sequence; more are refused as overloaded. */
  maxQueued: number;
}

/** OpenAI's default temperature; node-llama-cpp's own default would be greedy decoding. */
const DEFAULT_TEMPERATURE = 1;
/** Tokens per second are measured over this window. */
const RATE_WINDOW_MS = 5_000;
const RATE_SLOTS = 20;
/** Tokens before the ones being decoded that decide how their text starts (a leading space). */
const DETOKENIZE_CONTEXT = 8;
/** Tokens held back at most while their bytes do not yet make whole UTF-8 characters. */
const MAX_PARTIAL_TOKENS = 4;

/** Tokens generated over the last few seconds, in slots. */
class RateMeter {
  private readonly counts = new Float64Array(RATE_SLOTS);
  private readonly slots = new Float64Array(RATE_SLOTS).fill(-1);
  private readonly slotMs = RATE_WINDOW_MS / RATE_SLOTS;

  add(n: number): void {
    const slot = Math.floor(performance.now() / this.slotMs);
    const i = slot % RATE_SLOTS;
    if (this.slots[i] !== slot) {
      this.slots[i] = slot;
      this.counts[i] = 0;
    }
    this.counts[i]! += n;
  }

  perSecond(): number {
    const now = Math.floor(performance.now() / this.slotMs);
    let total = 0;
    for (let i = 0; i < RATE_SLOTS; i++) if (now - this.slots[i]! < RATE_SLOTS) total += this.counts[i]!;
    return total / (RATE_WINDOW_MS / 1000);
  }
}

/**
 * Generated tokens to text as it becomes final: bytes of a character split across tokens wait for
 * the rest, and text that may be the start of a stop string waits until it is known not to be.
 */
class TextAssembler {
  private readonly decoded: Token[];
  private pending: Token[] = [];
  private held = '';
  /** A stop string was generated: nothing more is text. */
  stopped = false;

  constructor(
    private readonly model: LoadedModel,
    private readonly stops: readonly string[],
    prompt: Prompt,
  ) {
    // A completion continues its prompt's text (a space before its first word stays); a chat reply starts afresh.
    this.decoded = prompt.continues ? prompt.tokens.slice(-DETOKENIZE_CONTEXT) : [];
  }

  /** The text that became final with this token (maybe none). */
  push(token: Token): string {
    this.pending.push(token);
    const text = this.model.text(this.pending, this.decoded.slice(-DETOKENIZE_CONTEXT));
    if (text.endsWith('\uFFFD') && this.pending.length < MAX_PARTIAL_TOKENS) return '';
    this.decoded.push(...this.pending);
    this.pending = [];
    return this.release(this.held + text);
  }

  /** What is left when the generation ends for another reason. */
  flush(): string {
    if (this.stopped) return '';
    const rest = this.held + (this.pending.length ? this.model.text(this.pending, this.decoded.slice(-DETOKENIZE_CONTEXT)) : '');
    this.held = '';
    this.pending = [];
    return rest;
  }

  private release(text: string): string {
    let cut = -1;
    for (const stop of this.stops) {
      const at = text.indexOf(stop);
      if (at >= 0 && (cut < 0 || at < cut)) cut = at;
    }
    if (cut >= 0) {
      this.stopped = true;
      this.held = '';
      return text.slice(0, cut);
    }
    let keep = 0;
    for (const stop of this.stops) {
      for (let k = Math.min(stop.length - 1, text.length); k > keep; k--) {
        if (text.endsWith(stop.slice(0, k))) {
          keep = k;
          break;
        }
      }
    }
    this.held = text.slice(text.length - keep);
    return text.slice(0, text.length - keep);
  }
}

/** An iterator over `produce`'s chunks whose `return()` aborts `produce`'s signal before anything else. */
function stoppable<T>(produce: (signal: AbortSignal) => AsyncGenerator<T>): AsyncIterableIterator<T> {
  const controller = new AbortController();
  const inner = produce(controller.signal);
  return {
    next: () => inner.next(),
    return: (value?: unknown) => {
      controller.abort();
      return inner.return(value as never);
    },
    [Symbol.asyncIterator]() {
      return this;
    },
  };
}

/** The first problem of a request that does not match the contract, as an error chunk. */
function invalid(input: unknown): GenerateChunk | undefined {
  const first = Value.Errors(GenerateRequest, input).First();
  if (first) return { type: 'error', code: 'invalid_request', message: `${first.path || 'request'}: ${first.message}`, param: first.path.split('/')[1] ?? '' };
  const request = input as GenerateRequest;
  if ((request.messages === undefined) === (request.prompt === undefined)) {
    return { type: 'error', code: 'invalid_request', message: 'give either messages or prompt', param: 'messages' };
  }
  return undefined;
}

export class ModelRunner {
  /**
   * The context's sequences not in use. They are made once and cleared between requests: a
   * sequence made and disposed of per request cost a third of the batched throughput (measured).
   */
  private readonly free: LlamaContextSequence[];
  private readonly waiting: Array<(sequence: LlamaContextSequence) => void> = [];
  private readonly rate = new RateMeter();
  private generated = 0;
  private completed = 0;
  private cancelled = 0;

  private constructor(
    readonly model: LoadedModel,
    private readonly options: RunnerOptions,
  ) {
    this.free = Array.from({ length: options.sequences }, () => model.sequence());
  }

  /** Sequences generating now (or being cleared for the next request). */
  private get active(): number {
    return this.options.sequences - this.free.length;
  }

  static async start(options: RunnerOptions): Promise<ModelRunner> {
    return new ModelRunner(await LoadedModel.load(options), options);
  }

  /** The chunks of one request (see contract.ts); a request the worker cannot serve gets one error chunk. */
  generate(input: unknown): AsyncIterableIterator<GenerateChunk> {
    return stoppable((signal) => this.run(input, signal));
  }

  load(): LoadReport {
    return {
      model: this.model.name,
      active: this.active,
      queued: this.waiting.length,
      sequences: this.options.sequences,
      tokens_per_s: Math.round(this.rate.perSecond() * 10) / 10,
      generated_tokens: this.generated,
      completed: this.completed,
      cancelled: this.cancelled,
    };
  }

  close(): Promise<void> {
    return this.model.close();
  }

  private async *run(input: unknown, signal: AbortSignal): AsyncGenerator<GenerateChunk> {
    const problem = invalid(input);
    if (problem) return yield problem;
    const request = input as GenerateRequest;
    let prompt: Prompt;
    try {
      prompt = this.model.prompt(request);
    } catch (error) {
      return yield { type: 'error', code: 'invalid_request', message: `cannot apply the chat template: ${(error as Error).message}` };
    }
    if (prompt.tokens.length === 0) return yield { type: 'error', code: 'invalid_request', message: 'the prompt is empty', param: 'prompt' };
    const room = this.model.contextSize - prompt.tokens.length;
    if (room < 1) {
      return yield {
        type: 'error',
        code: 'context_length_exceeded',
        message: `the prompt is ${prompt.tokens.length} tokens; a sequence of this worker holds ${this.model.contextSize}, prompt and reply together`,
        param: request.messages ? 'messages' : 'prompt',
      };
    }
    if (!this.free.length && this.waiting.length >= this.options.maxQueued) {
      return yield { type: 'error', code: 'overloaded', message: `${this.waiting.length} requests are waiting for a sequence already` };
    }
    const maxTokens = Math.min(room, request.max_tokens ?? room, this.options.maxNewTokens ?? room);
    let sequence: LlamaContextSequence;
    try {
      sequence = await this.admit(signal);
    } catch {
      this.cancelled++;
      return;
    }
    let outcome: 'completed' | 'cancelled' | 'failed' = 'cancelled';
    try {
      const finish = yield* this.decode(sequence, prompt, request, maxTokens, signal);
      if (finish) {
        outcome = 'completed';
        const usage = { prompt_tokens: prompt.tokens.length, completion_tokens: finish.tokens, total_tokens: prompt.tokens.length + finish.tokens };
        yield { type: 'end', finish_reason: finish.reason, usage };
      }
    } catch (error) {
      outcome = 'failed';
      yield { type: 'error', code: 'internal', message: `generation failed: ${(error as Error).message}` };
    } finally {
      if (outcome === 'completed') this.completed++;
      else if (outcome === 'cancelled') this.cancelled++;
      await this.release(sequence);
    }
  }

  /** Waits for a free sequence (first come, first served); rejects when the caller leaves first. */
  private admit(signal: AbortSignal): Promise<LlamaContextSequence> {
    const sequence = this.waiting.length ? undefined : this.free.pop();
    if (sequence) return Promise.resolve(sequence);
    return new Promise((resolve, reject) => {
      const enter = (sequence: LlamaContextSequence): void => {
        signal.removeEventListener('abort', leave);
        resolve(sequence);
      };
      const leave = (): void => {
        this.waiting.splice(this.waiting.indexOf(enter), 1);
        reject(new Error('left the queue'));
      };
      signal.addEventListener('abort', leave, { once: true });
      this.waiting.push(enter);
    });
  }

  /** A sequence a request is done with: emptied, then handed to the next request waiting, or kept. */
  private async release(sequence: LlamaContextSequence): Promise<void> {
    try {
      await sequence.clearHistory();
    } catch {
      return; // the context is gone: the worker is stopping
    }
    const next = this.waiting.shift();
    if (next) next(sequence);
    else this.free.push(sequence);
  }

  /** Decodes one request on its sequence; undefined when its caller left first. */
  private async *decode(sequence: LlamaContextSequence, prompt: Prompt, request: GenerateRequest, maxTokens: number, signal: AbortSignal): AsyncGenerator<GenerateChunk, { reason: FinishReason; tokens: number } | undefined> {
    const text = new TextAssembler(this.model, prompt.stopStrings, prompt);
    let tokens = 0;
    let unsent = 0;
    let reason: FinishReason = 'length';
    const sampling = {
      temperature: request.temperature ?? DEFAULT_TEMPERATURE,
      ...(request.top_p === undefined ? {} : { topP: request.top_p }),
      seed: request.seed === undefined ? Math.floor(Math.random() * 2 ** 32) : Number(BigInt.asUintN(32, BigInt(request.seed))),
      yieldEogToken: true,
    };
    for await (const token of sequence.evaluate(prompt.tokens, sampling)) {
      if (signal.aborted) return undefined;
      tokens++;
      this.generated++;
      this.rate.add(1);
      if (this.model.isEndOfText(token) || prompt.stopTokens.has(token)) {
        reason = 'stop';
        break;
      }
      unsent++;
      const piece = text.push(token);
      if (piece) {
        yield { type: 'text', text: piece, tokens: unsent };
        unsent = 0;
        if (signal.aborted) return undefined;
      }
      if (text.stopped) {
        reason = 'stop';
        break;
      }
      if (tokens >= maxTokens) break;
    }
    const rest = text.flush();
    if (rest) yield { type: 'text', text: rest, tokens: unsent };
    return { reason, tokens };
  }
}
