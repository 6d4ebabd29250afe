/**
 * The Router's HTTP API as TypeBox schemas (the single source of validation and types): OpenAI's
 * chat completions and completions requests, their responses and stream chunks, the model list and
 * the error body `{error: {message, type, param, code}}`. Requests are checked strictly: a field
 * that is not part of the API, as OpenAI answers, is refused rather than ignored, and a field that is
 * (n, stop, ...) takes only the values this server honours. What clients send by default for a
 * feature this server does not have is taken when it asks for nothing (`tools: []`, `logit_bias: {}`,
 * `store: false`, a reply sent back as history with `tool_calls: null` and `refusal: null`); asked
 * for, it is refused by name (`requestProblem`).
 */
import { randomUUID } from 'node:crypto';
import { replySchema, type ReplySchema } from '../reply-schema.js';
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { CHAT_ROLES, MAX_STOP_STRINGS, type FinishReason, type GenerateRequest, type ReplyFormat, type Usage } from '../contract.js';
import { isJsonObject } from '../../../lib/json-object.js';

/** The largest `max_tokens` accepted; a worker caps it further by its own limit and its context's room. */
export const MAX_TOKENS_LIMIT = 1 << 20;

/** OpenAI's clients send `null` for an unset optional field. */
const Nullable = <T extends TSchema>(schema: T) => Type.Optional(Type.Union([schema, Type.Null()]));
const strict = { additionalProperties: false } as const;

const TextPart = Type.Object({ type: Type.Literal('text'), text: Type.String() }, strict);
const Message = Type.Object(
  {
    role: Type.Union(CHAT_ROLES.map((r) => Type.Literal(r))),
    // Null for an assistant's reply sent back as history (a refusal, or one that only called tools).
    content: Type.Union([Type.String(), Type.Array(TextPart, { minItems: 1 }), Type.Null()]),
    name: Type.Optional(Type.String()),
    // What clients keep of a reply they send back as history (openai-python's model_dump, openai-node's
    // stream helper): taken when it holds nothing this server would have to act on.
    refusal: Nullable(Type.String()),
    tool_calls: Nullable(Type.Array(Type.Unknown(), { maxItems: 0 })),
    function_call: Type.Optional(Type.Null()),
    audio: Type.Optional(Type.Null()),
    annotations: Nullable(Type.Array(Type.Unknown())),
    parsed: Type.Optional(Type.Unknown()),
  },
  strict,
);
const StopStrings = Type.Union([Type.String({ minLength: 1 }), Type.Array(Type.String({ minLength: 1 }), { maxItems: MAX_STOP_STRINGS })]);
const MaxTokens = Type.Integer({ minimum: 1, maximum: MAX_TOKENS_LIMIT });

/** The sampling and streaming fields both endpoints take. */
const COMMON = {
  model: Type.String({ minLength: 1 }),
  stream: Nullable(Type.Boolean()),
  // include_obfuscation: false is what clients send to save the padding; true is refused by name (requestProblem).
  stream_options: Nullable(Type.Object({ include_usage: Type.Optional(Type.Boolean()), include_obfuscation: Type.Optional(Type.Boolean()) }, strict)),
  max_tokens: Nullable(MaxTokens),
  temperature: Nullable(Type.Number({ minimum: 0, maximum: 2 })),
  top_p: Nullable(Type.Number({ minimum: 0, maximum: 1 })),
  stop: Nullable(StopStrings),
  seed: Nullable(Type.Integer({ minimum: -Number.MAX_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER })),
  presence_penalty: Nullable(Type.Number({ minimum: -2, maximum: 2 })),
  frequency_penalty: Nullable(Type.Number({ minimum: -2, maximum: 2 })),
  n: Nullable(Type.Integer({ minimum: 1, maximum: 1, description: 'one choice per request' })),
  user: Nullable(Type.String()),
  logit_bias: Nullable(Type.Record(Type.String(), Type.Number(), { maxProperties: 0 })),
  // vLLM's sampling extensions, which its clients send.
  top_k: Nullable(Type.Integer({ minimum: -1, maximum: 1 << 20, description: '0 or -1: every token' })),
  min_p: Nullable(Type.Number({ minimum: 0, maximum: 1 })),
  repetition_penalty: Nullable(Type.Number({ minimum: 1e-6, maximum: 10, description: 'smaller is 0 once the sampler takes it as a 32-bit float' })),
};

/**
 * The reply formats, told apart by `type` (ajv's `discriminator`, which the Router's ajv turns on):
 * a format is checked as the one its `type` names, so `{"type": "json_schema"}` is missing its
 * `json_schema`, rather than a `type` that is neither `text` nor `json_object`.
 */
const ResponseFormats = Type.Union([
  Type.Object({ type: Type.Literal('text') }, strict),
  Type.Object({ type: Type.Literal('json_object') }, strict),
  Type.Object(
    {
      type: Type.Literal('json_schema'),
      json_schema: Type.Object({ name: Type.String({ maxLength: 64 }), description: Type.Optional(Type.String()), schema: Type.Optional(Type.Unknown()), strict: Nullable(Type.Boolean()) }, strict),
    },
    strict,
  ),
]);
const ResponseFormat = Type.Unsafe<Static<typeof ResponseFormats>>({ type: 'object', required: ['type'], discriminator: { propertyName: 'type' }, oneOf: ResponseFormats.anyOf });

export const ChatRequest = Type.Object(
  {
    ...COMMON,
    messages: Type.Array(Message, { minItems: 1 }),
    max_completion_tokens: Nullable(MaxTokens),
    // Some clients send `false` for "no log probabilities", which is what every reply here has.
    logprobs: Nullable(Type.Literal(false, { description: 'log probabilities are not returned' })),
    top_logprobs: Nullable(Type.Literal(0)),
    response_format: Nullable(ResponseFormat),
    tools: Nullable(Type.Array(Type.Unknown(), { maxItems: 0 })),
    tool_choice: Nullable(Type.Union([Type.Literal('none'), Type.Literal('auto')])),
    parallel_tool_calls: Nullable(Type.Boolean()),
    // Labels for OpenAI's stored completions: nothing is stored here, so they have no use, and no harm.
    metadata: Nullable(Type.Record(Type.String({ maxLength: 64 }), Type.String({ maxLength: 512 }), { maxProperties: 16 })),
    store: Nullable(Type.Literal(false)),
    // OpenAI's replacements for the deprecated `user` (taken above): labels, with no effect here either.
    safety_identifier: Nullable(Type.String()),
    prompt_cache_key: Nullable(Type.String()),
    service_tier: Nullable(Type.Union([Type.Literal('auto'), Type.Literal('default')])),
    modalities: Nullable(Type.Array(Type.Literal('text'), { minItems: 1, maxItems: 1 })),
    reasoning_effort: Type.Optional(Type.Null()),
  },
  strict,
);
export type ChatRequest = Static<typeof ChatRequest>;

export const CompletionRequest = Type.Object(
  {
    ...COMMON,
    prompt: Type.Union([Type.String(), Type.Array(Type.String(), { minItems: 1, maxItems: 1, description: 'one prompt per request' })]),
    /** The prompt comes back before the completion. */
    echo: Nullable(Type.Boolean()),
    best_of: Nullable(Type.Integer({ minimum: 1, maximum: 1 })),
    logprobs: Type.Optional(Type.Null()),
    suffix: Nullable(Type.String({ maxLength: 0 })),
  },
  strict,
);
export type CompletionRequest = Static<typeof CompletionRequest>;

export type ApiRequest = ChatRequest | CompletionRequest;

/**
 * A request's schema, checked once: the preValidation hook checks it (requestProblem), and the
 * request's mapping passes on what the check made (replyFormat), for the same object.
 */
const checkedSchemas = new WeakMap<object, ReplySchema>();
function checkedSchema(schema: unknown): ReplySchema {
  if (typeof schema !== 'object' || schema === null) return replySchema(schema);
  let checked = checkedSchemas.get(schema);
  if (!checked) checkedSchemas.set(schema, (checked = replySchema(schema)));
  return checked;
}

/** What is wrong with a request, for its `error`. */
export interface RequestProblem {
  param: string;
  message: string;
}

const isEmpty = (value: unknown): boolean => value == null || (Array.isArray(value) && value.length === 0) || (isJsonObject(value) && Object.keys(value).length === 0);
const unsupported = (param: string, what: string): RequestProblem => ({ param, message: `Unsupported parameter '${param}': ${what}.` });

/**
 * Checked before the schema, on the body as sent: a feature this server does not have, asked for
 * (the schema would call it an invalid value of another field, or a wrong type: "must NOT have more
 * than 1 items"), and null content anywhere but in an assistant's reply.
 */
export function requestProblem(body: unknown, chat: boolean): RequestProblem | undefined {
  if (!isJsonObject(body)) return undefined;
  if (!isEmpty(body['logit_bias'])) return unsupported('logit_bias', 'token biases are not applied by this server');
  const streamOptions = body['stream_options'];
  if (isJsonObject(streamOptions) && streamOptions['include_obfuscation'] === true) {
    return unsupported('stream_options.include_obfuscation', 'stream chunks are not padded by this server (false, or leaving it out, is accepted)');
  }
  return chat ? chatProblem(body) : completionProblem(body);
}

function chatProblem(body: Record<string, unknown>): RequestProblem | undefined {
  const noTools = 'this server does not call tools';
  if (!isEmpty(body['tools'])) return unsupported('tools', noTools);
  if (body['tool_choice'] != null && body['tool_choice'] !== 'none' && body['tool_choice'] !== 'auto') return unsupported('tool_choice', noTools);
  if (body['logprobs'] != null && body['logprobs'] !== false) {
    return { param: 'logprobs', message: "Invalid value for 'logprobs': log probabilities are not returned by this server, so only false (or null) is accepted." };
  }
  if (typeof body['top_logprobs'] === 'number' && body['top_logprobs'] > 0) return unsupported('top_logprobs', 'log probabilities are not returned by this server');
  const format = body['response_format'];
  // A format without a type is the schema's to name (a missing parameter).
  if (isJsonObject(format) && format['type'] !== undefined && !['text', 'json_object', 'json_schema'].includes(format['type'] as string)) {
    return unsupported('response_format', `the types served here are text, json_object and json_schema, not ${JSON.stringify(String(format['type']).slice(0, 40))}`);
  }
  // Here, not only on the worker: what is passed on is the checked schema (reply-schema.ts).
  const schema = isJsonObject(format) && isJsonObject(format['json_schema']) ? format['json_schema']['schema'] : undefined;
  if (schema !== undefined) {
    const checked = checkedSchema(schema);
    if ('problem' in checked) return { param: 'response_format', message: checked.problem };
  }
  if (body['store'] === true) return unsupported('store', 'completions are not stored by this server');
  if (body['reasoning_effort'] != null) return unsupported('reasoning_effort', 'the model does not reason before it answers');
  const messages = Array.isArray(body['messages']) ? body['messages'] : [];
  for (const [i, message] of messages.entries()) {
    if (!isJsonObject(message)) continue;
    const at = `messages[${i}]`;
    if (message['role'] === 'tool' || message['role'] === 'function') {
      return { param: `${at}.role`, message: `Invalid value for '${at}.role': '${message['role']}' messages are not supported: ${noTools}.` };
    }
    if (!isEmpty(message['tool_calls'])) return unsupported(`${at}.tool_calls`, noTools);
    if (message['function_call'] != null) return unsupported(`${at}.function_call`, noTools);
    if (message['content'] === null && message['role'] !== 'assistant') {
      return { param: `${at}.content`, message: `Invalid value for '${at}.content': only an assistant's message may have null content.` };
    }
    const parts = Array.isArray(message['content']) ? message['content'] : [];
    const other = parts.findIndex((part) => isJsonObject(part) && part['type'] !== 'text');
    if (other >= 0) return unsupported(`${at}.content[${other}].type`, `content parts of type ${JSON.stringify(String((parts[other] as Record<string, unknown>)['type']).slice(0, 40))} are not read by this server, which takes text`);
  }
  return undefined;
}

function completionProblem(body: Record<string, unknown>): RequestProblem | undefined {
  const prompt = body['prompt'];
  if (typeof prompt === 'number' || (Array.isArray(prompt) && prompt.some((p) => typeof p === 'number' || Array.isArray(p)))) {
    return { param: 'prompt', message: "Invalid value for 'prompt': token ids are not supported here; give the prompt as text." };
  }
  if (Array.isArray(prompt) && prompt.length > 1) {
    return { param: 'prompt', message: `Invalid value for 'prompt': this server takes one prompt per request (a string, or a list of one string); this list has ${prompt.length}.` };
  }
  if (body['logprobs'] != null) return unsupported('logprobs', 'log probabilities are not returned by this server (logprobs may be null)');
  if (typeof body['suffix'] === 'string' && body['suffix'] !== '') return unsupported('suffix', 'this server continues a prompt; it does not fill in before a suffix');
  return undefined;
}

/** Fields the worker takes as they are, when given. */
const SAMPLING_FIELDS = ['temperature', 'top_p', 'seed', 'presence_penalty', 'frequency_penalty', 'top_k', 'min_p', 'repetition_penalty'] as const;

/**
 * A message's text: its parts one per line (as vLLM reads them: joined without a separator, two parts'
 * words would run together); for an assistant's reply without content, its refusal, if any.
 */
function textOf(message: ChatRequest['messages'][number]): string {
  if (typeof message.content === 'string') return message.content;
  if (message.content === null) return message.refusal ?? '';
  return message.content.map((p) => p.text).join('\n');
}

/** The worker's reply format for OpenAI's: none for text; a json_schema without a schema is any JSON object. */
function replyFormat(format: ChatRequest['response_format']): ReplyFormat | undefined {
  if (!format || format.type === 'text') return undefined;
  if (format.type === 'json_schema' && format.json_schema.schema !== undefined) {
    const checked = checkedSchema(format.json_schema.schema);
    if ('problem' in checked) throw new Error(`a response_format schema was not checked: ${checked.problem}`); // requestProblem refuses it first
    return { type: 'json_schema', schema: checked.schema };
  }
  return { type: 'json_object' };
}

/** The worker's request for an API request. */
export function generateRequest(body: ApiRequest): GenerateRequest {
  const common = Object.fromEntries(SAMPLING_FIELDS.filter((field) => body[field] != null).map((field) => [field, body[field]])) as GenerateRequest;
  if (body.stop != null) common.stop = typeof body.stop === 'string' ? [body.stop] : body.stop;
  if ('messages' in body) {
    const maxTokens = body.max_completion_tokens ?? body.max_tokens;
    const format = replyFormat(body.response_format);
    return {
      ...common,
      ...(maxTokens == null ? {} : { max_tokens: maxTokens }),
      ...(format ? { response_format: format } : {}),
      messages: body.messages.map((m) => ({ role: m.role, content: textOf(m) })),
    };
  }
  return { ...common, ...(body.max_tokens == null ? {} : { max_tokens: body.max_tokens }), prompt: promptOf(body) };
}

export const promptOf = (body: CompletionRequest): string => (typeof body.prompt === 'string' ? body.prompt : body.prompt[0]!);

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
    /** Text the reply starts with: a completion's prompt, with `echo`. */
    readonly echoed = '',
  ) {
    this.id = `${chat ? 'chatcmpl' : 'cmpl'}-${randomUUID().replaceAll('-', '')}`;
  }

  complete(generated: string, finish: FinishReason, usage: Usage): ChatCompletion | Completion {
    const head = { id: this.id, created: this.created, model: this.model };
    const text = this.echoed + generated;
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
