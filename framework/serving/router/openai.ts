/**
 * The Router's HTTP API as TypeBox schemas (the single source of validation and types): OpenAI's
 * chat completions and completions requests, their responses and stream chunks, the model list and
 * the error body `{error: {message, type, param, code}}`. Requests are checked strictly: a field
 * that is not part of the API, as OpenAI answers, is refused rather than ignored, and a field that is
 * (n, stop, ...) takes only the values this server honours.
 */
import { randomUUID } from 'node:crypto';
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { CHAT_ROLES, MAX_STOP_STRINGS, type FinishReason, type GenerateRequest, type Usage } from '../contract.js';

/** The largest `max_tokens` accepted; a worker caps it further by its own limit and its context's room. */
export const MAX_TOKENS_LIMIT = 1 << 20;

/** OpenAI's clients send `null` for an unset optional field. */
const Nullable = <T extends TSchema>(schema: T) => Type.Optional(Type.Union([schema, Type.Null()]));
const strict = { additionalProperties: false } as const;

const TextPart = Type.Object({ type: Type.Literal('text'), text: Type.String() }, strict);
const Message = Type.Object(
  {
    role: Type.Union(CHAT_ROLES.map((r) => Type.Literal(r))),
    content: Type.Union([Type.String(), Type.Array(TextPart, { minItems: 1 })]),
    name: Type.Optional(Type.String()),
  },
  strict,
);
const StopStrings = Type.Union([Type.String({ minLength: 1 }), Type.Array(Type.String({ minLength: 1 }), { maxItems: MAX_STOP_STRINGS })]);
const MaxTokens = Type.Integer({ minimum: 1, maximum: MAX_TOKENS_LIMIT });

/** The sampling and streaming fields both endpoints take. */
const COMMON = {
  model: Type.String({ minLength: 1 }),
  stream: Nullable(Type.Boolean()),
  stream_options: Nullable(Type.Object({ include_usage: Type.Optional(Type.Boolean()) }, strict)),
  max_tokens: Nullable(MaxTokens),
  temperature: Nullable(Type.Number({ minimum: 0, maximum: 2 })),
  top_p: Nullable(Type.Number({ minimum: 0, maximum: 1 })),
  stop: Nullable(StopStrings),
  seed: Nullable(Type.Integer({ minimum: -Number.MAX_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER })),
  presence_penalty: Nullable(Type.Number({ minimum: -2, maximum: 2 })),
  frequency_penalty: Nullable(Type.Number({ minimum: -2, maximum: 2 })),
  n: Nullable(Type.Integer({ minimum: 1, maximum: 1, description: 'one choice per request' })),
  user: Nullable(Type.String()),
};

export const ChatRequest = Type.Object(
  {
    ...COMMON,
    messages: Type.Array(Message, { minItems: 1 }),
    max_completion_tokens: Nullable(MaxTokens),
    // Some clients send `false` for "no log probabilities", which is what every reply here has.
    logprobs: Nullable(Type.Literal(false, { description: 'log probabilities are not returned' })),
  },
  strict,
);
export type ChatRequest = Static<typeof ChatRequest>;

export const CompletionRequest = Type.Object(
  {
    ...COMMON,
    prompt: Type.Union([Type.String(), Type.Array(Type.String(), { minItems: 1, maxItems: 1, description: 'one prompt per request' })]),
  },
  strict,
);
export type CompletionRequest = Static<typeof CompletionRequest>;

export type ApiRequest = ChatRequest | CompletionRequest;

/** The `error` of a request for something OpenAI's API has and this server does not do. */
export interface Unsupported {
  param: string;
  message: string;
}

/**
 * What the schema's first complaint would misname: a `tool` message ("Unrecognized ...
 * tool_call_id"), token ids or several prompts ("must NOT have more than 1 items"). Checked before
 * the schema, on the body as sent.
 */
export function unsupportedPart(body: unknown, chat: boolean): Unsupported | undefined {
  const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);
  if (!isObject(body)) return undefined;
  if (chat) {
    const messages = Array.isArray(body['messages']) ? body['messages'] : [];
    for (const [i, message] of messages.entries()) {
      if (!isObject(message)) continue;
      if (message['role'] === 'tool' || message['role'] === 'function') {
        return { param: `messages[${i}].role`, message: `Invalid value for 'messages[${i}].role': '${message['role']}' messages are not supported: this server does not call tools.` };
      }
      if ('tool_calls' in message || 'function_call' in message) {
        const field = 'tool_calls' in message ? 'tool_calls' : 'function_call';
        return { param: `messages[${i}].${field}`, message: `Unsupported parameter 'messages[${i}].${field}': this server does not call tools.` };
      }
    }
    return undefined;
  }
  const prompt = body['prompt'];
  if (typeof prompt === 'number' || (Array.isArray(prompt) && prompt.some((p) => typeof p === 'number' || Array.isArray(p)))) {
    return { param: 'prompt', message: "Invalid value for 'prompt': token ids are not supported here; give the prompt as text." };
  }
  if (Array.isArray(prompt) && prompt.length > 1) {
    return { param: 'prompt', message: `Invalid value for 'prompt': this server takes one prompt per request (a string, or a list of one string); this list has ${prompt.length}.` };
  }
  return undefined;
}

/** The worker's request for an API request. */
export function generateRequest(body: ApiRequest): GenerateRequest {
  const common: GenerateRequest = {
    ...(body.temperature == null ? {} : { temperature: body.temperature }),
    ...(body.top_p == null ? {} : { top_p: body.top_p }),
    ...(body.seed == null ? {} : { seed: body.seed }),
    ...(body.presence_penalty == null ? {} : { presence_penalty: body.presence_penalty }),
    ...(body.frequency_penalty == null ? {} : { frequency_penalty: body.frequency_penalty }),
    ...(body.stop == null ? {} : { stop: typeof body.stop === 'string' ? [body.stop] : body.stop }),
  };
  if ('messages' in body) {
    const maxTokens = body.max_completion_tokens ?? body.max_tokens;
    return {
      ...common,
      ...(maxTokens == null ? {} : { max_tokens: maxTokens }),
      messages: body.messages.map((m) => ({ role: m.role, content: typeof m.content === 'string' ? m.content : m.content.map((p) => p.text).join('') })),
    };
  }
  return { ...common, ...(body.max_tokens == null ? {} : { max_tokens: body.max_tokens }), prompt: typeof body.prompt === 'string' ? body.prompt : body.prompt[0]! };
}

export const ErrorBody = Type.Object({
  error: Type.Object({
    message: Type.String(),
    type: Type.String(),
    param: Type.Union([Type.String(), Type.Null()]),
    code: Type.Union([Type.String(), Type.Null()]),
  }),
});
export type ErrorBody = Static<typeof ErrorBody>;

export function errorBody(message: string, type: string, code: string | null = null, param: string | null = null): ErrorBody {
  return { error: { message, type, param, code } };
}

const UsageSchema = Type.Object({ prompt_tokens: Type.Integer(), completion_tokens: Type.Integer(), total_tokens: Type.Integer() });
const FinishReasonSchema = Type.Union([Type.Literal('stop'), Type.Literal('length')]);

export const ChatCompletion = Type.Object({
  id: Type.String(),
  object: Type.Literal('chat.completion'),
  created: Type.Integer(),
  model: Type.String(),
  choices: Type.Array(
    Type.Object({
      index: Type.Integer(),
      message: Type.Object({ role: Type.Literal('assistant'), content: Type.String() }),
      logprobs: Type.Null(),
      finish_reason: FinishReasonSchema,
    }),
  ),
  usage: UsageSchema,
});
export type ChatCompletion = Static<typeof ChatCompletion>;

export const Completion = Type.Object({
  id: Type.String(),
  object: Type.Literal('text_completion'),
  created: Type.Integer(),
  model: Type.String(),
  choices: Type.Array(Type.Object({ index: Type.Integer(), text: Type.String(), logprobs: Type.Null(), finish_reason: FinishReasonSchema })),
  usage: UsageSchema,
});
export type Completion = Static<typeof Completion>;

export const ModelList = Type.Object({
  object: Type.Literal('list'),
  data: Type.Array(Type.Object({ id: Type.String(), object: Type.Literal('model'), created: Type.Integer(), owned_by: Type.String() })),
});
export type ModelList = Static<typeof ModelList>;

export const Health = Type.Object({
  status: Type.Union([Type.Literal('ok'), Type.Literal('unavailable')]),
  model: Type.String(),
  workers: Type.Array(
    Type.Object({
      node_id: Type.String(),
      /** Absent, with the loads, for a request without the API key when the Router has one. */
      addr: Type.Optional(Type.String()),
      /** Absent while the Router has no fresh load report of the worker. */
      active: Type.Optional(Type.Integer()),
      queued: Type.Optional(Type.Integer()),
      tokens_per_s: Type.Optional(Type.Number()),
    }),
  ),
});
export type Health = Static<typeof Health>;

/**
 * How one response is written, whichever endpoint it is: the whole object, or the stream chunks
 * (`chat.completion.chunk` deltas, `text_completion` pieces) with the same id and time.
 */
export class ResponseShape {
  readonly id: string;
  readonly created = Math.floor(Date.now() / 1000);

  constructor(
    readonly chat: boolean,
    readonly model: string,
    /** `stream_options.include_usage`: every chunk has `usage` (null but in the last one). */
    readonly includeUsage = false,
  ) {
    this.id = `${chat ? 'chatcmpl' : 'cmpl'}-${randomUUID().replaceAll('-', '')}`;
  }

  complete(text: string, finish: FinishReason, usage: Usage): ChatCompletion | Completion {
    const head = { id: this.id, created: this.created, model: this.model };
    return this.chat
      ? { ...head, object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: text }, logprobs: null, finish_reason: finish }], usage }
      : { ...head, object: 'text_completion', choices: [{ index: 0, text, logprobs: null, finish_reason: finish }], usage };
  }

  /** A stream chunk: the role (chat only, first), a text delta, or the end with its finish reason. */
  chunk(piece: 'role' | { text: string } | { finish: FinishReason }): object {
    const head = { id: this.id, object: this.chat ? 'chat.completion.chunk' : 'text_completion', created: this.created, model: this.model };
    const finish = typeof piece === 'object' && 'finish' in piece ? piece.finish : null;
    const text = typeof piece === 'object' && 'text' in piece ? piece.text : '';
    const usage = this.includeUsage ? { usage: null } : {};
    if (this.chat) {
      const delta = piece === 'role' ? { role: 'assistant', content: '' } : finish ? {} : { content: text };
      return { ...head, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...usage };
    }
    return { ...head, choices: [{ index: 0, text, logprobs: null, finish_reason: finish }], ...usage };
  }

  /** The chunk after the last choice when the client asked for usage (`stream_options.include_usage`). */
  usageChunk(usage: Usage): object {
    return { id: this.id, object: this.chat ? 'chat.completion.chunk' : 'text_completion', created: this.created, model: this.model, choices: [], usage };
  }
}
