/**
 * What both workers are made of: a loaded model whose context has N sequences, a FIFO queue of
 * requests waiting for a free one, and the decoding loop that steps every request that has a
 * sequence forward together, with the counts a load report gives.
 *
 * Continuous batching, explicitly: each step asks every generating sequence for its next token at
 * once (node-llama-cpp decodes what is queued on one event-loop cycle as one batch), waits for all
 * of them, hands each token to its request, drops the requests that ended and lets in those waiting
 * for a sequence, whose prompts are decoded in the next step beside the others' next tokens. Steps
 * in lockstep matter, and so does their order: llama.cpp decodes a batch whose sequence ids are
 * not in ascending order as one small batch per sequence, which made 32 sequences a third as fast
 * as in order (measured), so each step asks its sequences in the order the context made them. With
 * one sequence (LocalModelWorker) requests take turns.
 *
 * A request's chunks wait in a buffer for its reader; a reader that lags gets what waits as one
 * chunk, and one MAX_AHEAD chunks behind makes its request sit out steps until it catches up: a slow
 * reader slows only its own request. Leaving the stream (`return()`, which is what a reset HTTP/2
 * stream or a `break` does) ends the request at the next step, and takes it out of the queue at once.
 */
import type { LlamaContextSequence, Token } from 'node-llama-cpp';
import { Value } from '@sinclair/typebox/value';
import { InvalidReplyFormat, LoadedModel, PromptTooLong, type ModelConfig, type Prompt, type ReplyGrammar } from './backend.js';
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
/** A sampler option node-llama-cpp leaves out of the chain (its type says number; null is what it drops). */
const NO_SAMPLER = null as unknown as number;
/** Tokens held back at most while their bytes do not yet make whole UTF-8 characters. */
const MAX_PARTIAL_TOKENS = 4;
/**
 * The generated tokens that the penalties (presence, frequency, repetition) count: the reply's last ones, so that a
 * step's cost stays bounded (OpenAI counts the whole reply; past this many tokens, the oldest drop out).
 */
const MAX_PENALIZED_TOKENS = 4096;
/** Chunks a request may have waiting for its reader before it sits out steps. */
const MAX_AHEAD = 64;
/**
 * A request's text goes to its reader at most once per tick of a clock this long, shared by all
 * requests (what comes between goes with the next). Shared, so that the requests of a batch send
 * their text on the same step: their frames leave together, and the Router and clients wake once
 * per tick rather than once per request (at 8 requests that was 0.87-0.95 of the direct latency
 * through the Router; on a shared clock, 0.94-1.03).
 */
const TEXT_INTERVAL_MS = 10;
/**
 * What a request gets when its worker stops before the reply ended: `overloaded`, as the worker can
 * take no more, so the Router sends a request that has not started elsewhere.
 */
const STOPPING: GenerateChunk = { type: 'error', code: 'overloaded', message: 'the worker is stopping' };

/** Ends the chunks of the requests a stopping worker still holds. */
class WorkerStopping extends Error {}

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

/**
 * The chunks of one request that its reader has not taken: the reader takes the text chunks
 * waiting as one; `full` says the request should sit out steps, `room()` waits until it need not.
 *
 * Text is handed out at most once per TEXT_INTERVAL_MS tick: text made later in the tick of the
 * last waits and goes out with what follows. A reply then costs its reader tens of chunks a second,
 * not one per token (each one a frame, and at the Router an event, each a system call); the first
 * text and the end of a reply are never held back, so neither the first token nor the end comes later.
 */
class ChunkBuffer {
  private readonly chunks: GenerateChunk[] = [];
  private ended = false;
  private failure: unknown;
  /** The tick of the shared clock (TEXT_INTERVAL_MS long) in which text last went out. */
  private lastTextTick = -Infinity;
  /** The reader holds text back until the next tick: only the end, or more than text, wakes it sooner. */
  private holding = false;
  private wakeReader: (() => void) | undefined;
  private wakeWriter: (() => void) | undefined;

  get full(): boolean {
    return this.chunks.length >= MAX_AHEAD;
  }

  push(chunk: GenerateChunk): void {
    this.chunks.push(chunk);
    if (!this.holding || chunk.type !== 'text') this.wake('reader');
  }

  /** Resolves when the reader has taken chunks, or the buffer has ended. */
  room(): Promise<void> {
    return this.ended || !this.full ? Promise.resolve() : new Promise((resolve) => (this.wakeWriter = resolve));
  }

  /** No more chunks (after the error that ended the generation, if one did). */
  end(failure?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    this.failure = failure;
    this.wake('reader');
    this.wake('writer');
  }

  async *read(): AsyncGenerator<GenerateChunk> {
    for (;;) {
      const first = this.chunks[0];
      const now = performance.now();
      const wait = (this.lastTextTick + 1) * TEXT_INTERVAL_MS - now;
      if (first && (first.type !== 'text' || wait <= 0 || this.ended || this.chunks.some((c) => c.type !== 'text'))) {
        let chunk = this.chunks.shift()!;
        while (chunk.type === 'text' && this.chunks[0]?.type === 'text') {
          const next = this.chunks.shift() as typeof chunk;
          chunk = { type: 'text', text: chunk.text + next.text, tokens: chunk.tokens + next.tokens };
        }
        if (chunk.type === 'text') this.lastTextTick = Math.floor(now / TEXT_INTERVAL_MS);
        this.wake('writer');
        yield chunk;
      } else if (!first && this.ended) {
        if (this.failure !== undefined) throw this.failure;
        return;
      } else {
        this.holding = first !== undefined;
        await new Promise<void>((resolve) => {
          this.wakeReader = resolve;
          if (this.holding) setTimeout(() => this.wake('reader'), Math.ceil(wait));
        });
        this.holding = false;
      }
    }
  }

  private wake(who: 'reader' | 'writer'): void {
    const wake = who === 'reader' ? this.wakeReader : this.wakeWriter;
    if (who === 'reader') this.wakeReader = undefined;
    else this.wakeWriter = undefined;
    wake?.();
  }
}

/** How a request's generation ended: its finish reason and generated tokens, or undefined when its reader left. */
type Outcome = { reason: FinishReason; tokens: number } | undefined;

/** One request on its sequence: its token stream, its text, its caps, and the chunks for its reader. */
class Generation {
  readonly buffer = new ChunkBuffer();
  readonly tokens: AsyncGenerator<Token, void, void>;
  private readonly text: TextAssembler;
  private count = 0;
  private unsent = 0;
  /** The reply's tokens, for the penalties (only when the request has one). */
  private readonly generated: Token[] | undefined;
  /** Set when the reader has left: the loop drops the request at its next step. */
  left = false;
  /** Resolves when the loop has dropped the request. */
  readonly done: Promise<Outcome>;
  finish!: (outcome: Outcome) => void;

  constructor(
    private readonly model: LoadedModel,
    readonly sequence: LlamaContextSequence,
    /** The sequence's place in the order the context made its sequences (their ids). */
    readonly slot: number,
    readonly prompt: Prompt,
    request: GenerateRequest,
    private readonly maxTokens: number,
    /** Holds the reply to its `response_format`. */
    grammar: ReplyGrammar | undefined,
  ) {
    this.text = new TextAssembler(model, prompt.stopStrings, prompt);
    const presencePenalty = request.presence_penalty ?? 0;
    const frequencyPenalty = request.frequency_penalty ?? 0;
    const repetitionPenalty = request.repetition_penalty ?? 1;
    const generated = presencePenalty || frequencyPenalty || repetitionPenalty !== 1 ? ([] as Token[]) : undefined;
    this.generated = generated;
    this.tokens = sequence.evaluate(prompt.tokens, {
      // top_p 0 is greedy, as OpenAI reads it (it is not handed to the sampler, which reads 0 its own way).
      temperature: request.top_p === 0 ? 0 : (request.temperature ?? DEFAULT_TEMPERATURE),
      // As OpenAI samples: from the whole distribution unless top_p says otherwise. node-llama-cpp's own
      // defaults (top-k 40, top-p 0.95) apply to a field left undefined, and none to a null one.
      topK: request.top_k === undefined || request.top_k <= 0 ? NO_SAMPLER : request.top_k,
      topP: request.top_p === undefined || request.top_p === 0 ? NO_SAMPLER : request.top_p,
      minP: request.min_p ?? NO_SAMPLER,
      seed: request.seed === undefined ? Math.floor(Math.random() * 2 ** 32) : Number(BigInt.asUintN(32, BigInt(request.seed))),
      // OpenAI's two penalties and llama.cpp's repetition penalty (vLLM's repetition_penalty), over the reply's tokens.
      ...(generated
        ? { repeatPenalty: { punishTokens: () => generated.slice(-MAX_PENALIZED_TOKENS), maxPunishTokens: MAX_PENALIZED_TOKENS, penalty: repetitionPenalty, presencePenalty, frequencyPenalty } }
        : {}),
      ...(grammar ? { grammarEvaluationState: grammar.state } : {}),
      yieldEogToken: true,
    });
    this.done = new Promise((resolve) => (this.finish = resolve));
  }

  /** Takes the step's token; the outcome when the request ended with it, else undefined. */
  take(token: Token | undefined): { reason: FinishReason; tokens: number } | undefined {
    if (token === undefined) return this.end('stop');
    this.count++;
    this.generated?.push(token);
    if (this.model.isEndOfText(token) || this.prompt.stopTokens.has(token)) return this.end('stop');
    this.unsent++;
    const piece = this.text.push(token);
    if (piece) {
      this.buffer.push({ type: 'text', text: piece, tokens: this.unsent });
      this.unsent = 0;
    }
    if (this.text.stopped) return this.end('stop');
    if (this.count >= this.maxTokens) return this.end('length');
    return undefined;
  }

  private end(reason: FinishReason): { reason: FinishReason; tokens: number } {
    const rest = this.text.flush();
    if (rest) this.buffer.push({ type: 'text', text: rest, tokens: this.unsent });
    return { reason, tokens: this.count };
  }
}

export class ModelRunner {
  /**
   * The context's sequences not in use. They are made once, all at the start (so their ids follow
   * the order they were made in, the order each step asks them in), and cleared between requests.
   */
  private readonly free: LlamaContextSequence[];
  /** Each sequence's place in the order they were made: the order of their ids in a fresh context. */
  private readonly slots: Map<LlamaContextSequence, number>;
  /** Requests waiting for a sequence, first come first served; given none when the worker stops. */
  private readonly waiting: Array<(sequence: LlamaContextSequence | undefined) => void> = [];
  /** Requests with a sequence, stepped together by `loop`. */
  private readonly generating = new Set<Generation>();
  private looping = false;
  /** The running (or last) decoding loop: the model is disposed only once it has ended. */
  private stepped: Promise<void> = Promise.resolve();
  private stopping = false;
  /** Retired requests whose token stream and sequence are still being let go (`retire`). */
  private readonly retiring = new Set<Promise<void>>();
  private readonly rate = new RateMeter();
  private generated = 0;
  private completed = 0;
  private cancelled = 0;

  private constructor(
    readonly model: LoadedModel,
    private readonly options: RunnerOptions,
  ) {
    this.free = Array.from({ length: options.sequences }, () => model.sequence());
    this.slots = new Map(this.free.map((sequence, slot) => [sequence, slot]));
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
      active: this.options.sequences - this.free.length,
      queued: this.waiting.length,
      sequences: this.options.sequences,
      tokens_per_s: Math.round(this.rate.perSecond() * 10) / 10,
      generated_tokens: this.generated,
      completed: this.completed,
      cancelled: this.cancelled,
    };
  }

  /**
   * Stops generating, then frees the model: waiting requests and those generating end with the
   * STOPPING chunk, and the loop drops them at its next step; the native context is disposed only
   * after that step, never under one.
   */
  async close(): Promise<void> {
    this.stopping = true;
    for (const enter of this.waiting.splice(0)) enter(undefined);
    for (const g of this.generating) g.buffer.end(new WorkerStopping());
    await this.stepped;
    // The sequences the loop let go are still being emptied: not under a disposed context.
    await Promise.all(this.retiring);
    await this.model.close();
  }

  private async *run(input: unknown, signal: AbortSignal): AsyncGenerator<GenerateChunk> {
    // Nothing more reaches the model once it is being freed (the prompt too is tokenized by it).
    if (this.stopping) return yield STOPPING;
    const problem = invalid(input);
    if (problem) return yield problem;
    const request = input as GenerateRequest;
    let prompt: Prompt;
    try {
      prompt = this.model.prompt(request);
    } catch (error) {
      if (error instanceof PromptTooLong) return yield { type: 'error', code: 'context_length_exceeded', message: error.message, param: request.messages ? 'messages' : 'prompt' };
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
    // Before the grammar: a worker that takes no more requests makes none for them.
    if (!this.free.length && this.waiting.length >= this.options.maxQueued) {
      return yield { type: 'error', code: 'overloaded', message: `${this.waiting.length} requests are waiting for a sequence already` };
    }
    let grammar: ReplyGrammar | undefined;
    if (request.response_format) {
      try {
        grammar = await this.model.replyGrammar(request.response_format);
      } catch (error) {
        if (error instanceof InvalidReplyFormat) return yield { type: 'error', code: 'invalid_request', message: error.message, param: 'response_format' };
        throw error;
      }
      prompt.stopStrings.push(...grammar.stopStrings);
    }
    const maxTokens = Math.min(room, request.max_tokens ?? room, this.options.maxNewTokens ?? room);
    let sequence: LlamaContextSequence;
    try {
      sequence = await this.admit(signal);
    } catch (error) {
      if (error instanceof WorkerStopping) return yield STOPPING;
      this.cancelled++;
      return;
    }
    const generation = new Generation(this.model, sequence, this.slots.get(sequence)!, prompt, request, maxTokens, grammar);
    // The caller leaving ends the request at the next step, even while its reader waits for text.
    const leave = (): void => {
      generation.left = true;
      generation.buffer.end();
    };
    signal.addEventListener('abort', leave, { once: true });
    this.generating.add(generation);
    if (!this.looping) this.stepped = this.loop();
    let outcome: Outcome;
    let failed = false;
    try {
      yield* generation.buffer.read();
      outcome = await generation.done;
    } catch (error) {
      failed = true;
      if (error instanceof WorkerStopping) return yield STOPPING;
      return yield { type: 'error', code: 'internal', message: `generation failed: ${(error as Error).message}` };
    } finally {
      // The reply ended, or its reader left: then the loop drops the request at its next step.
      signal.removeEventListener('abort', leave);
      leave();
      if (!(await generation.done) && !failed) this.cancelled++;
    }
    if (!outcome) return;
    this.completed++;
    const usage = { prompt_tokens: prompt.tokens.length, completion_tokens: outcome.tokens, total_tokens: prompt.tokens.length + outcome.tokens };
    yield { type: 'end', finish_reason: outcome.reason, usage };
  }

  /**
   * Steps every request that has a sequence (and room for its chunks) forward by one token, all at
   * once, until none is left; requests admitted meanwhile join at the next step.
   */
  private async loop(): Promise<void> {
    this.looping = true;
    try {
      while (this.generating.size) {
        const stepping: Generation[] = [];
        for (const g of this.generating) {
          if (g.left || this.stopping) this.retire(g, undefined);
          else if (!g.buffer.full) stepping.push(g);
        }
        stepping.sort((a, b) => a.slot - b.slot);
        if (!stepping.length) {
          // Every reader is behind: wait until one of them has taken chunks (or left).
          if (this.generating.size) await Promise.race([...this.generating].map((g) => g.buffer.room()));
          continue;
        }
        const results = await Promise.all(stepping.map((g) => g.tokens.next().then((r) => (r.done ? undefined : r.value), (error: unknown) => error as Error)));
        stepping.forEach((g, i) => {
          const result = results[i];
          if (result instanceof Error) return this.retire(g, undefined, result);
          if (result !== undefined) {
            this.generated++;
            this.rate.add(1);
          }
          try {
            const outcome = g.take(result);
            if (outcome) this.retire(g, outcome);
          } catch (error) {
            this.retire(g, undefined, error as Error);
          }
        });
      }
    } finally {
      this.looping = false;
    }
  }

  /** A request leaves the loop: its reader gets the end (or the failure); its sequence is cleared and passed on. */
  private retire(g: Generation, outcome: Outcome, failure?: Error): void {
    this.generating.delete(g);
    g.buffer.end(failure);
    g.finish(failure ? undefined : outcome);
    const done = (async () => {
      await g.tokens.return().catch(() => undefined);
      await this.release(g.sequence);
    })();
    this.retiring.add(done);
    void done.finally(() => this.retiring.delete(done));
  }

  /** Waits for a free sequence (first come, first served); rejects when the caller leaves first, or the worker stops. */
  private admit(signal: AbortSignal): Promise<LlamaContextSequence> {
    // close() may have come while the request was being prepared (its grammar is made asynchronously).
    if (this.stopping) return Promise.reject(new WorkerStopping());
    const sequence = this.waiting.length ? undefined : this.free.pop();
    if (sequence) return Promise.resolve(sequence);
    return new Promise((resolve, reject) => {
      const enter = (sequence: LlamaContextSequence | undefined): void => {
        signal.removeEventListener('abort', leave);
        if (sequence) resolve(sequence);
        else reject(new WorkerStopping());
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
}
