/**
 * Storyline `storyline/v1`: the canonical trajectory document every import decodes to and every
 * export encodes from (reference/trajectory-formats.md §5.1). ATIF-shaped, with short wire names.
 *
 * The TypeBox schemas are both the TypeScript types and the validator. Objects are closed
 * (`additionalProperties: false`) so a typo in a decoder is caught at import time; whatever a
 * source format carries that has no Storyline field goes to `extra` or to `unknown_fields`,
 * never silently dropped. The only open bags are the `extra`/`meta`/`env`-style fields.
 */
import { Type, type Static } from '@sinclair/typebox';

export const STORYLINE_SCHEMA_VERSION = 'storyline/v1';

const closed = <T extends Parameters<typeof Type.Object>[0]>(properties: T, description?: string) =>
  Type.Object(properties, { additionalProperties: false, ...(description ? { description } : {}) });

/** Any JSON value (arguments, results, extra bags). */
export const JsonValue = Type.Unknown();
/** A JSON object bag for format-specific data that has no Storyline field. */
export const JsonObject = Type.Record(Type.String(), Type.Unknown());

/** RFC 3339 string or epoch seconds (integer or float), kept as the source wrote it. */
export const Timestamp = Type.Union([Type.String({ minLength: 1 }), Type.Number()]);

/** Message content: a string (possibly empty) or an array of content parts (text, image, ...). */
export const Content = Type.Union([Type.String(), Type.Array(JsonObject)]);

/** Counts are stored as int64 and computed with as JavaScript numbers, so they are exact integers. */
const Count = Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER });
const ExactInteger = Type.Integer({ minimum: -Number.MAX_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER });

/** Per-turn usage. `prompt_tokens` includes cached tokens; `completion_tokens` includes reasoning. */
export const Metrics = closed({
  prompt_tokens: Type.Optional(Type.Union([Count, Type.Null()])),
  completion_tokens: Type.Optional(Type.Union([Count, Type.Null()])),
  cached_tokens: Type.Optional(Type.Union([Count, Type.Null()])),
  cost_usd: Type.Optional(Type.Union([Type.Number(), Type.Null()])),
  prompt_token_ids: Type.Optional(Type.Array(Type.Integer())),
  completion_token_ids: Type.Optional(Type.Array(Type.Integer())),
  logprobs: Type.Optional(Type.Array(Type.Unknown())),
  extra: Type.Optional(JsonObject),
});

export const FinalMetrics = closed({
  total_prompt_tokens: Type.Optional(Type.Union([Count, Type.Null()])),
  total_completion_tokens: Type.Optional(Type.Union([Count, Type.Null()])),
  total_cached_tokens: Type.Optional(Type.Union([Count, Type.Null()])),
  total_cost_usd: Type.Optional(Type.Union([Type.Number(), Type.Null()])),
  total_steps: Type.Optional(Type.Union([Count, Type.Null()])),
  extra: Type.Optional(JsonObject),
});

export const ToolResponse = closed({
  status: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  exit_code: Type.Optional(Type.Union([ExactInteger, Type.Null()])),
});

export const ToolCall = closed({
  /** Unique within the document. */
  tcid: Type.String({ minLength: 1 }),
  fn: Type.String(),
  /** Arguments as the source gave them: usually an object; a string when the source's JSON was malformed. */
  args: JsonValue,
  result: Type.Optional(JsonValue),
  duration_ms: Type.Optional(Type.Union([Type.Number({ minimum: 0 }), Type.Null()])),
  /** The source's call kind, e.g. `function`, `tool_use`, `command_execution`, `custom_tool_call`. */
  kind: Type.Optional(Type.String()),
  response: Type.Optional(ToolResponse),
  extra: Type.Optional(JsonObject),
});

export const SubagentRef = closed({
  trajectory_id: Type.Optional(Type.String()),
  trajectory_path: Type.Optional(Type.String()),
  session_id: Type.Optional(Type.String()),
  extra: Type.Optional(JsonObject),
});

export const ObservationResult = closed({
  /** The `tcid` of the call this result answers; null when it is not from a tool call. */
  source_call_id: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  content: Type.Optional(Type.Union([Content, Type.Null()])),
  subagent_trajectory_ref: Type.Optional(Type.Array(SubagentRef)),
  /** Set when the tool reported an error (ATIF keeps it in `extra.is_error`; we lift it). */
  is_error: Type.Optional(Type.Boolean()),
  extra: Type.Optional(JsonObject),
});

export const Observation = closed({ results: Type.Array(ObservationResult) });

export const TURN_SOURCES = ['system', 'user', 'agent'] as const;

export const Turn = closed({
  /** Unique within the document; sources number turns 1, 2, 3... or give string ids. */
  id: Type.Union([Type.Integer(), Type.String({ minLength: 1 })]),
  src: Type.Union(TURN_SOURCES.map((s) => Type.Literal(s))),
  msg: Content,
  ts: Type.Optional(Type.Union([Timestamp, Type.Null()])),
  model: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  effort: Type.Optional(Type.Union([Type.String(), Type.Number(), Type.Null()])),
  /** Reasoning text (thinking). */
  reason: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  tool_calls: Type.Optional(Type.Array(ToolCall)),
  observation: Type.Optional(Observation),
  metrics: Type.Optional(Metrics),
  /** LLM calls behind this turn; 0 on an agent turn means no LLM was involved. */
  nllm: Type.Optional(Count),
  /** Copied prior context (not produced in this run); excluded from training data. */
  copied: Type.Optional(Type.Boolean()),
  /** A finer kind than `src`, e.g. `compaction`, `subagent_prompt`, `summary`. */
  kind: Type.Optional(Type.String()),
  latency_ms: Type.Optional(Type.Union([Type.Number({ minimum: 0 }), Type.Null()])),
  ttft_ms: Type.Optional(Type.Union([Type.Number({ minimum: 0 }), Type.Null()])),
  env: Type.Optional(JsonObject),
  /** Per-turn prompt override (ACTF `system_prompt`/`user_content` on a step). */
  prompt: Type.Optional(JsonObject),
  finished_at: Type.Optional(Type.Union([Timestamp, Type.Null()])),
  extra: Type.Optional(JsonObject),
});

export const Agent = closed({
  id: Type.String({ minLength: 1 }),
  name: Type.Optional(Type.String()),
  ver: Type.Optional(Type.String()),
  model: Type.Optional(Type.String()),
  /** Tool definitions in the OpenAI function-tool shape. */
  tools: Type.Optional(Type.Array(JsonValue)),
  extra: Type.Optional(JsonObject),
});

/** Where the document came from: format, that format's version, and its id there. */
export const Origin = closed({
  format: Type.String(),
  schema_version: Type.Optional(Type.String()),
  document_id: Type.Optional(Type.String()),
  /** Path of the source file relative to the import root, and the line for JSONL sources. */
  source_path: Type.Optional(Type.String()),
  line: Type.Optional(Type.Integer({ minimum: 1 })),
});

export const Parent = closed({
  /** Session of the parent document. */
  psid: Type.String({ minLength: 1 }),
  /** The tool call in the parent that spawned this document. */
  scid: Type.Optional(Type.String()),
  /** The parent turn id. */
  ptid: Type.Optional(Type.Union([Type.Integer(), Type.String()])),
  rel: Type.Optional(Type.Literal('spawn')),
});

export const Task = closed({
  env: Type.Optional(JsonObject),
  llm: Type.Optional(JsonObject),
  /** Outcome: correct, score, status, error, final_answer, ... */
  result: Type.Optional(JsonObject),
  extra: Type.Optional(JsonObject),
});

export const Prompt = closed({
  system: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  user: Type.Optional(Type.Union([Type.String(), Type.Null()])),
});

/**
 * Keys of the source that have no Storyline field, by format:
 * `unknown_fields.sources[format].fields[<escaped JSON Pointer in the source>] = value`.
 */
export const UnknownFields = closed({
  sources: Type.Record(Type.String(), closed({ fields: JsonObject })),
});

export const Storyline = closed({
  schema_version: Type.Literal(STORYLINE_SCHEMA_VERSION),
  session: Type.String({ minLength: 1 }),
  agent: Agent,
  turns: Type.Array(Turn),
  origin: Type.Optional(Origin),
  run: Type.Optional(Type.String()),
  /** Per-document id (ATIF v1.7 `trajectory_id`). */
  trajectory: Type.Optional(Type.String()),
  attempt_id: Type.Optional(Type.String()),
  notes: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  task: Type.Optional(Task),
  prompt: Type.Optional(Prompt),
  started_at: Type.Optional(Type.Union([Timestamp, Type.Null()])),
  finished_at: Type.Optional(Type.Union([Timestamp, Type.Null()])),
  final_metrics: Type.Optional(FinalMetrics),
  continued_trajectory_ref: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  extra: Type.Optional(JsonObject),
  meta: Type.Optional(JsonObject),
  unknown_fields: Type.Optional(UnknownFields),
  unknown_key_counts: Type.Optional(Type.Record(Type.String(), Type.Integer({ minimum: 0 }))),
  /** Sessions of the documents this one spawned. */
  children: Type.Optional(Type.Array(Type.String())),
  parent: Type.Optional(Parent),
});

export type Metrics = Static<typeof Metrics>;
export type FinalMetrics = Static<typeof FinalMetrics>;
export type ToolCall = Static<typeof ToolCall>;
export type ObservationResult = Static<typeof ObservationResult>;
export type Observation = Static<typeof Observation>;
export type Turn = Static<typeof Turn>;
export type TurnSource = (typeof TURN_SOURCES)[number];
export type Agent = Static<typeof Agent>;
export type Origin = Static<typeof Origin>;
export type Parent = Static<typeof Parent>;
export type Task = Static<typeof Task>;
export type Storyline = Static<typeof Storyline>;
export type Content = Static<typeof Content>;
