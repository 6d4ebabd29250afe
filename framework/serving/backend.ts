/**
 * The model backend: a GGUF model loaded with node-llama-cpp (its prebuilt CPU binary from npm;
 * nothing is downloaded or built), one context whose sequences the workers decode, and what turns
 * a request into prompt tokens (the model's chat template, from its GGUF metadata when it has one)
 * and generated tokens back into text.
 *
 * node-llama-cpp is imported when a model is loaded, never when this module is: the Router's
 * process, which loads the serving module too, does not pay for it.
 */
import type { ChatHistoryItem, ChatWrapper, Llama, LlamaContext, LlamaContextSequence, LlamaGrammar, LlamaGrammarEvaluationState, LlamaModel, Token } from 'node-llama-cpp';
import { InvalidInputError } from '../../lib/errors.js';
import type { ChatMessage, GenerateRequest, ReplyFormat } from './contract.js';
import { locateModel } from './models/locate.js';
import { replySchema } from './reply-schema.js';

export interface ModelConfig {
  /** A model name (models directory) or a path to a GGUF file. */
  model: string;
  /** CPU threads for decoding. */
  threads: number;
  /** Tokens each sequence holds (prompt and generated), at most the model's own context length. */
  contextSize: number;
  /** Sequences of the one context: how many requests are decoded together. */
  sequences: number;
}

/** A request as tokens, with what ends its generation besides the end-of-text token. */
export interface Prompt {
  tokens: Token[];
  stopStrings: string[];
  stopTokens: Set<Token>;
  /** Whether the text continues the prompt's (a completion) or starts a reply (a chat). */
  continues: boolean;
}

/**
 * A prompt found too long for the context before it was tokenized whole: it takes more than
 * `tokens` tokens, and a sequence holds `contextSize`.
 */
export class PromptTooLong extends Error {
  constructor(
    readonly tokens: number,
    readonly contextSize: number,
  ) {
    super(`the prompt is more than ${tokens} tokens; a sequence of this worker holds ${contextSize}, prompt and reply together`);
  }
}

/** Characters of a long prompt tokenized at a time while it is measured (`measure`). */
const MEASURE_PIECE_CHARS = 8 * 1024;
/** Tokens a piece may count beyond what the same text counts whole: its own leading space, and tokens split at its edges. */
const PIECE_EDGE_TOKENS = 8;

/**
 * Grammars kept for reuse (a client sends the same few schemas again and again). Few: a dropped
 * grammar's native memory is freed only when the garbage collector comes to it.
 */
const KEPT_GRAMMARS = 16;
/** llama.cpp's log lines are cut to this: a grammar it refuses comes whole in its message. */
const MAX_NATIVE_LOG_CHARS = 2000;
/**
 * node-llama-cpp's schema grammars end a value with blank lines, where its own chat stops: a reply
 * held to a schema ends there too, without them.
 */
const SCHEMA_GRAMMAR_END = '\n\n\n\n';

/** A `response_format` the worker cannot hold a reply to; its message says why. */
export class InvalidReplyFormat extends Error {}

/** How a reply is held to its format: the grammar's state, and the text that ends it. */
export interface ReplyGrammar {
  state: LlamaGrammarEvaluationState;
  stopStrings: string[];
}

/** GGUF keys without which the native library aborts the process (instead of throwing) or cannot run the model. */
const REQUIRED_ARCH_KEYS = ['context_length', 'embedding_length', 'block_count', 'feed_forward_length', 'attention.head_count'];
const REQUIRED_KEYS = ['general.architecture', 'tokenizer.ggml.model', 'tokenizer.ggml.tokens'];

type NodeLlamaCpp = typeof import('node-llama-cpp');

let library: Promise<{ cpp: NodeLlamaCpp; llama: Llama }> | undefined;

/** node-llama-cpp and its CPU backend, once per process (the first caller's thread count is the process's). */
function llamaCpp(threads: number): Promise<{ cpp: NodeLlamaCpp; llama: Llama }> {
  library ??= (async () => {
    // Never download or build llama.cpp: the prebuilt binary of @node-llama-cpp/linux-x64 is the only one used.
    process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD ??= 'true';
    const cpp = await import('node-llama-cpp');
    const llama = await cpp.getLlama({
      gpu: false,
      build: 'never',
      maxThreads: threads,
      logLevel: cpp.LlamaLogLevel.warn,
      logger: (level, message) => process.stderr.write(`llama.cpp ${level}: ${message.length > MAX_NATIVE_LOG_CHARS ? `${message.slice(0, MAX_NATIVE_LOG_CHARS)}... (cut)` : message.trimEnd()}\n`),
    });
    return { cpp, llama };
  })();
  return library;
}

function metadataValue(metadata: unknown, key: string): unknown {
  let value: unknown = metadata;
  for (const part of key.split('.')) value = typeof value === 'object' && value !== null ? (value as Record<string, unknown>)[part] : undefined;
  return value;
}

/** Reads the file's GGUF header and checks the keys the native library needs before it is given the file. */
async function checkModelFile(cpp: NodeLlamaCpp, path: string): Promise<void> {
  let metadata: unknown;
  try {
    ({ metadata } = await cpp.readGgufFileInfo(path, { sourceType: 'filesystem', readTensorInfo: false, logWarnings: false }));
  } catch (error) {
    throw new InvalidInputError(`model file ${path} is not a readable GGUF file: ${(error as Error).message}`);
  }
  const architecture = metadataValue(metadata, 'general.architecture');
  const keys = [...REQUIRED_KEYS, ...(typeof architecture === 'string' ? REQUIRED_ARCH_KEYS.map((k) => `${architecture}.${k}`) : [])];
  const missing = keys.filter((key) => metadataValue(metadata, key) === undefined);
  if (missing.length) throw new InvalidInputError(`model file ${path} lacks GGUF keys the model needs: ${missing.join(', ')}`);
}

export class LoadedModel {
  private constructor(
    readonly name: string,
    readonly path: string,
    private readonly model: LlamaModel,
    readonly context: LlamaContext,
    private readonly chatWrapper: ChatWrapper,
    private readonly library: { cpp: NodeLlamaCpp; llama: Llama },
  ) {}

  /** Grammars made for replies' formats, by format, the oldest dropped past KEPT_GRAMMARS. */
  private readonly grammars = new Map<string, Promise<LlamaGrammar>>();

  /** Finds, checks and loads a model, and makes its context. Invalid input (exit 2) names the model and what is wrong. */
  static async load(config: ModelConfig): Promise<LoadedModel> {
    const path = locateModel(config.model);
    const library = await llamaCpp(config.threads);
    const { cpp, llama } = library;
    await checkModelFile(cpp, path);
    const model = await llama.loadModel({ modelPath: path });
    try {
      const contextSize = Math.min(config.contextSize, model.trainContextSize);
      const context = await model.createContext({ contextSize, sequences: config.sequences, threads: config.threads });
      const chatWrapper = cpp.resolveChatWrapper(model) ?? new cpp.GeneralChatWrapper();
      return new LoadedModel(config.model, path, model, context, chatWrapper, library);
    } catch (error) {
      await model.dispose();
      throw error;
    }
  }

  /** Tokens one sequence holds. */
  get contextSize(): number {
    return this.context.contextSize;
  }

  /** Which chat template applies: the name of node-llama-cpp's wrapper (`JinjaTemplate` for the GGUF's own). */
  get chatTemplate(): string {
    return this.chatWrapper.wrapperName;
  }

  /** One of the context's sequences (there are as many as the config says; the runner keeps them all). */
  sequence(): LlamaContextSequence {
    return this.context.getSequence();
  }

  /**
   * The request as tokens: a chat through the chat template, a prompt as it is (after the BOS token
   * when the model wants one). A text that cannot leave a sequence room for a reply is refused
   * (PromptTooLong) before it is tokenized whole: see `measure`.
   */
  prompt(request: GenerateRequest): Prompt {
    this.measure(request.messages ? request.messages.map((m) => m.content) : [request.prompt ?? '']);
    const stopStrings = [...(request.stop ?? [])];
    const stopTokens = new Set<Token>();
    if (request.messages) {
      const state = this.chatWrapper.generateContextState({ chatHistory: [...request.messages.map(chatItem), { type: 'model', response: [] }] });
      // The template's own end-of-turn markers: text ones stop like stop strings, a special token by its id.
      for (const trigger of state.stopGenerationTriggers) {
        if (trigger.values.every((v) => typeof v === 'string')) stopStrings.push(trigger.values.join(''));
        else {
          const tokens = trigger.tokenize(this.model.tokenizer);
          if (tokens.length === 1) stopTokens.add(tokens[0]!);
        }
      }
      return { tokens: state.contextText.tokenize(this.model.tokenizer), stopStrings: stopStrings.filter(Boolean), stopTokens, continues: false };
    }
    const bos = this.model.tokens.bos;
    const tokens = [...(bos !== null && this.model.tokens.shouldPrependBosToken ? [bos] : []), ...this.model.tokenize(request.prompt ?? '')];
    return { tokens, stopStrings, stopTokens, continues: true };
  }

  /**
   * Throws PromptTooLong when `texts` together certainly take the whole context, found by tokenizing
   * them a piece at a time and stopping there. llama.cpp's tokenizer takes time that grows with the
   * square of a run of bytes its vocabulary lacks (byte fallback: CJK, emoji, accents in a small
   * vocabulary); tokenized whole, a 300 KB prompt held a worker's thread for a minute, deaf to the
   * cluster's probes, which took it for dead. In pieces, a long text costs time in proportion to its
   * length, and a text over the limit only up to the piece that shows it. Each piece may count a few
   * tokens more than the whole text would (PIECE_EDGE_TOKENS), so a prompt that fits is never refused
   * here; the exact count, of the text that passes, is the runner's to check.
   */
  private measure(texts: readonly string[]): void {
    // A short text is cheap to tokenize whole, and the runner counts it exactly.
    if (texts.reduce((n, text) => n + text.length, 0) <= MEASURE_PIECE_CHARS) return;
    const limit = this.contextSize - 1;
    let tokens = 0;
    let pieces = 0;
    for (const text of texts) {
      for (let at = 0; at < text.length; ) {
        let end = Math.min(text.length, at + MEASURE_PIECE_CHARS);
        // Never between the two halves of a surrogate pair (a high surrogate ends the piece).
        const last = text.charCodeAt(end - 1);
        if (end < text.length && last >= 0xd800 && last <= 0xdbff) end--;
        tokens += this.model.tokenize(text.slice(at, end)).length;
        pieces++;
        at = end;
        const atLeast = tokens - pieces * PIECE_EDGE_TOKENS;
        if (atLeast > limit) throw new PromptTooLong(atLeast, this.contextSize);
      }
    }
  }

  /** What holds a reply to `format`; throws InvalidReplyFormat for a schema the grammar would not follow. */
  async replyGrammar(format: ReplyFormat): Promise<ReplyGrammar> {
    const { cpp, llama } = this.library;
    let key = 'json';
    let make = (): Promise<LlamaGrammar> => llama.getGrammarFor('json');
    if (format.type === 'json_schema') {
      const checked = replySchema(format.schema);
      if ('problem' in checked) throw new InvalidReplyFormat(checked.problem);
      key = `schema:${JSON.stringify(checked.schema)}`;
      // Its parameter type is inferred from a literal schema; a checked one from a request is the general kind.
      make = () => llama.createGrammarForJsonSchema(checked.schema as Parameters<Llama['createGrammarForJsonSchema']>[0]);
    }
    let grammar = this.grammars.get(key);
    if (!grammar) {
      grammar = make();
      this.grammars.set(key, grammar);
      if (this.grammars.size > KEPT_GRAMMARS) this.grammars.delete(this.grammars.keys().next().value!);
      const made = grammar;
      made.catch(() => this.grammars.get(key) === made && this.grammars.delete(key));
    }
    let made: LlamaGrammar;
    try {
      made = await grammar;
    } catch (error) {
      throw new InvalidReplyFormat(`llama.cpp refused the grammar made from the JSON Schema (${(error as Error).message}): a definition that is only a $ref to itself, or to one that refers back, is one such schema`);
    }
    return { state: new cpp.LlamaGrammarEvaluationState({ model: this.model, grammar: made }), stopStrings: format.type === 'json_schema' ? [SCHEMA_GRAMMAR_END] : [] };
  }

  isEndOfText(token: Token): boolean {
    return this.model.isEogToken(token);
  }

  /** The text of `tokens`, which follow `before` (a leading space is kept or dropped as the tokenizer would). */
  text(tokens: readonly Token[], before: readonly Token[]): string {
    return this.model.detokenize(tokens, false, before);
  }

  async close(): Promise<void> {
    await this.context.dispose();
    await this.model.dispose();
  }
}

function chatItem(message: ChatMessage): ChatHistoryItem {
  switch (message.role) {
    case 'system':
    case 'developer':
      return { type: 'system', text: message.content };
    case 'user':
      return { type: 'user', text: message.content };
    case 'assistant':
      return { type: 'model', response: [message.content] };
  }
}
