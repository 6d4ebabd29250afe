/**
 * The one contract of every serving worker (LocalModelWorker, EngineWorker), as the Router and any
 * other caller in the cluster see it:
 *
 * - `generateStream(request)`, a streamed call: chat messages or a plain prompt in; text chunks out
 *   (the first at once, then at most one per 10 ms tick of a clock the worker's requests share,
 *   holding the text made meanwhile), then exactly
 *   one last chunk: `end` (finish reason and token usage) or `error` (what was wrong). Leaving the
 *   stream (breaking out of the loop, a reset HTTP/2 stream) stops the generation.
 * - `load()`, an ask: the worker's load report.
 *
 * There is no non-streamed `generate` ask: an ask holds the actor's mailbox until it returns, so a
 * long generation would hold up every other call of the worker (its load reports among them). A
 * caller that wants the whole text collects the stream.
 */
import { Type, type Static } from '@sinclair/typebox';

export const CHAT_ROLES = ['system', 'developer', 'user', 'assistant'] as const;

/** Stop strings a request may give (as OpenAI allows). */
export const MAX_STOP_STRINGS = 4;

export const ChatMessage = Type.Object(
  {
    role: Type.Union(CHAT_ROLES.map((r) => Type.Literal(r))),
    content: Type.String(),
  },
  { additionalProperties: false },
);
export type ChatMessage = Static<typeof ChatMessage>;

export const GenerateRequest = Type.Object(
  {
    /** A chat, rendered with the model's chat template; or `prompt`, a text continued as it is. */
    messages: Type.Optional(Type.Array(ChatMessage, { minItems: 1 })),
    prompt: Type.Optional(Type.String()),
    /** Upper bound of generated tokens; the worker's own cap and the context's room bound it too. */
    max_tokens: Type.Optional(Type.Integer({ minimum: 1 })),
    temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 2 })),
    top_p: Type.Optional(Type.Number({ minimum: 0, maximum: 1, description: '0 keeps only the most likely token (greedy), as OpenAI reads it' })),
    stop: Type.Optional(Type.Array(Type.String({ minLength: 1 }), { maxItems: MAX_STOP_STRINGS })),
    /**
     * OpenAI's penalties of tokens the reply already holds: each logit is lowered by
     * `frequency_penalty` times the token's count, and by `presence_penalty` once it is there.
     */
    presence_penalty: Type.Optional(Type.Number({ minimum: -2, maximum: 2 })),
    frequency_penalty: Type.Optional(Type.Number({ minimum: -2, maximum: 2 })),
    /** vLLM's: llama.cpp's repetition penalty (1 is none), over the same tokens as the two above. */
    repetition_penalty: Type.Optional(Type.Number({ minimum: 1e-6, maximum: 10 })),
    /** vLLM's: sample among the `top_k` likeliest tokens (0 or -1: all of them). */
    top_k: Type.Optional(Type.Integer({ minimum: -1, maximum: 1 << 20 })),
    /** vLLM's: drop tokens less likely than `min_p` times the likeliest one. */
    min_p: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
    /**
     * The reply is JSON: any object (`json_object`), or a value that `schema` describes (the part of
     * JSON Schema reply-schema.ts takes). Generation follows a grammar, so it cannot stray from it.
     */
    response_format: Type.Optional(
      Type.Union([Type.Object({ type: Type.Literal('json_object') }, { additionalProperties: false }), Type.Object({ type: Type.Literal('json_schema'), schema: Type.Unknown() }, { additionalProperties: false })]),
    ),
    /** Fixes the sampling: the same request with the same seed gives the same tokens. */
    seed: Type.Optional(Type.Integer({ minimum: -Number.MAX_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER })),
  },
  { additionalProperties: false },
);
export type GenerateRequest = Static<typeof GenerateRequest>;
export type ReplyFormat = NonNullable<GenerateRequest['response_format']>;

export type FinishReason = 'stop' | 'length';

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/**
 * Why a request was not served: `invalid_request` and `context_length_exceeded` are the caller's
 * (HTTP 400), `overloaded` is worth retrying elsewhere (503; a stopping worker's requests end with it),
 * `internal` is the worker's (500).
 */
export type GenerateErrorCode = 'invalid_request' | 'context_length_exceeded' | 'overloaded' | 'internal';

export type GenerateChunk =
  /** `tokens`: how many generated tokens this text stands for. */
  | { type: 'text'; text: string; tokens: number }
  | { type: 'end'; finish_reason: FinishReason; usage: Usage }
  | { type: 'error'; code: GenerateErrorCode; message: string; param?: string };

/** What a worker reports as its load; the Router sends a request where `active + queued` is lowest. */
export interface LoadReport {
  model: string;
  /** Sequences generating now. */
  active: number;
  /** Requests waiting for a free sequence. */
  queued: number;
  /** Sequences the worker decodes together (1 for LocalModelWorker). */
  sequences: number;
  /** Generated tokens per second over the last few seconds. */
  tokens_per_s: number;
  /** Totals since the worker started. */
  generated_tokens: number;
  completed: number;
  /** Requests whose caller left before their end: their generation was stopped. */
  cancelled: number;
}
