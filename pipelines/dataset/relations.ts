/**
 * The relations of a dataset and their columns: the one list from which the Parquet part schemas,
 * the SQLite index tables and the README's column tables are all derived. Readers (`find`, `query`,
 * `stats`, `list`) name columns from here.
 *
 * Conventions: `*_json` columns hold JSON text (null when absent); timestamps are RFC 3339 UTC
 * strings with milliseconds (`2026-05-02T08:00:00.000Z`), normalised from whatever the source wrote,
 * so they sort and compare as text; `*_ms` are numbers of milliseconds.
 *
 * Every column is in the Parquet parts. The SQLite index (what `query` and `find` see) leaves out the
 * columns that only export needs to rebuild documents losslessly (`sql: false`): their content is in
 * the index already in the columns made for reading (the observation as `observation_text` and the
 * calls' `result_json`, a source's bytes as the rows decoded from them), and copying them again made
 * the index about a quarter larger and slower to build.
 *
 * Large strings of the Storyline relations' JSON columns and of their text columns marked `content`
 * are kept once in the `contents` relation and referred to (contents.ts); the index shows these
 * relations as views that put the values back, over tables named `<relation>_stored`.
 */
export type ColumnType = 'string' | 'int64' | 'double' | 'bool' | 'json' | 'binary';

export interface ColumnDef {
  name: string;
  type: ColumnType;
  nullable: boolean;
  description: string;
  /** In the SQLite index too (visible to SQL), not only in the Parquet parts. */
  sql: boolean;
  /** A text column whose large values go to the content store (JSON columns of the Storyline relations all do). */
  content?: boolean;
}

const col = (name: string, type: ColumnType, description: string, nullable = true): ColumnDef => ({ name, type, nullable, description, sql: true });
/** A column only export reads (from the Parquet parts): not copied into the SQLite index. */
const parquetOnly = (column: ColumnDef): ColumnDef => ({ ...column, sql: false });
/** A text column whose large values go to the content store. */
const content = (column: ColumnDef): ColumnDef => ({ ...column, content: true });

/** One row per Storyline document. */
export const RUNS: readonly ColumnDef[] = [
  col('document_id', 'string', 'unique id of the document in the dataset (trajectory id, else session; `#N` suffix on collision)', false),
  col('run_id', 'string', 'Storyline `run` (ACTF task id, ...)'),
  col('session_id', 'string', 'Storyline `session`', false),
  col('trajectory_id', 'string', 'Storyline `trajectory`'),
  col('attempt_id', 'string', 'Storyline `attempt_id` (ACTF attempt key)'),
  col('source_path', 'string', 'source file, relative to the import root', false),
  col('source_format', 'string', 'format it was decoded from (`atif`, `agentb-code`, ...)', false),
  col('source_document', 'int64', 'ordinal of the source document within the source file', false),
  col('agent_id', 'string', 'agent id', false),
  col('agent_name', 'string', 'agent name'),
  col('agent_version', 'string', 'agent version'),
  col('agent_model_name', 'string', 'agent-level model name'),
  col('parent_session_id', 'string', 'session of the parent document (subagents)'),
  col('parent_tool_call_id', 'string', 'tool call in the parent that spawned this document'),
  col('started_at', 'string', 'start time (document `started_at`, else first turn time)'),
  col('finished_at', 'string', 'end time (document `finished_at`, else last turn time)'),
  col('step_count', 'int64', 'number of turns', false),
  col('tool_call_count', 'int64', 'number of tool calls', false),
  col('prompt_tokens', 'int64', 'sum of turn prompt tokens (cached included)'),
  col('completion_tokens', 'int64', 'sum of turn completion tokens'),
  col('cached_tokens', 'int64', 'sum of turn cached prompt tokens'),
  col('cache_write_tokens', 'int64', 'sum of turn prompt tokens written to the cache'),
  col('cost_usd', 'double', 'sum of turn costs'),
  col('notes', 'string', 'document notes'),
  col('final_metrics_json', 'json', 'document `final_metrics`'),
  col('task_json', 'json', 'document `task` (env, llm, result)'),
  col('prompt_json', 'json', 'document `prompt` (system, user)'),
  col('agent_extra_json', 'json', 'agent `extra` (and `tools`)'),
  col('extra_json', 'json', 'document `extra`'),
  col('meta_json', 'json', 'document `meta`'),
  col('unknown_fields_json', 'json', 'source keys without a Storyline field'),
  parquetOnly(col('document_json', 'json', 'the Storyline document without its `turns` (those are the `steps` rows); export joins the two', false)),
];

/** One row per turn. */
export const STEPS: readonly ColumnDef[] = [
  col('document_id', 'string', 'the run', false),
  col('session_id', 'string', 'the run session', false),
  col('step_id', 'string', 'turn id (as text)', false),
  col('turn_ordinal', 'int64', 'position of the turn in the document, from 0', false),
  col('source', 'string', '`system`, `user` or `agent`', false),
  col('effective_kind', 'string', 'turn `kind` when set, else `source`', false),
  col('timestamp', 'string', 'turn time'),
  col('model_name', 'string', 'model of the turn'),
  col('reasoning_effort', 'string', 'reasoning effort'),
  content(col('message_text', 'string', 'message as plain text (text parts joined)', false)),
  col('message_json', 'json', 'message as in the Storyline (string or content parts)', false),
  content(col('reasoning_content', 'string', 'reasoning text')),
  content(col('observation_text', 'string', 'observation results as plain text')),
  parquetOnly(col('observation_json', 'json', 'observation as in the Storyline; a result content equal to its call `result_json` is `"@content_from_call": true` instead of repeated')),
  col('prompt_tokens', 'int64', 'prompt tokens (cached included)'),
  col('completion_tokens', 'int64', 'completion tokens'),
  col('cached_tokens', 'int64', 'prompt tokens read from the cache'),
  col('cache_write_tokens', 'int64', 'prompt tokens written to the cache (`metrics.extra.cache_creation_input_tokens`)'),
  col('cost_usd', 'double', 'cost: as the source reported it, else from the price table (see Usage and cost)'),
  col('response_id', 'string', 'the API response the turn\'s usage comes from (see Usage and cost); copies of one response share it'),
  col('llm_call_count', 'int64', 'LLM calls behind the turn (`nllm`)'),
  col('is_copied_context', 'bool', 'copied prior context'),
  col('latency_ms', 'double', 'turn latency'),
  col('tool_call_count', 'int64', 'tool calls of the turn', false),
  col('metrics_json', 'json', 'turn `metrics`'),
  col('extra_json', 'json', 'turn `extra`'),
  parquetOnly(col('turn_json', 'json', 'the turn without `msg`, `observation` and a text `reason` (those are `message_json`, `observation_json`, `reasoning_content`); a tool call `result` equal to its observation content is listed under `@results_from_observation` instead of repeated', false)),
];

/** One row per tool call. */
export const TOOL_CALLS: readonly ColumnDef[] = [
  col('document_id', 'string', 'the run', false),
  col('session_id', 'string', 'the run session', false),
  col('step_id', 'string', 'the turn that made the call', false),
  col('turn_ordinal', 'int64', 'position of that turn', false),
  col('call_index', 'int64', 'position of the call in its turn, from 0', false),
  col('tool_call_id', 'string', 'call id (`tcid`)', false),
  col('function_name', 'string', 'tool name', false),
  col('kind', 'string', 'call kind from the source'),
  col('arguments_json', 'json', 'arguments', false),
  col('result_json', 'json', 'result (from the call or its observation)'),
  col('result_bytes', 'int64', 'size of the result as UTF-8 text'),
  col('is_error', 'bool', 'the tool reported an error'),
  col('status', 'string', 'response status'),
  col('exit_code', 'int64', 'response exit code'),
  col('duration_ms', 'double', 'call duration'),
  col('extra_json', 'json', 'call `extra`'),
];

/** One row per source document (a file, or a line of a JSONL file). */
export const SOURCES: readonly ColumnDef[] = [
  col('source_path', 'string', 'source file, relative to the import root', false),
  col('source_document', 'int64', 'ordinal of the document within the file', false),
  col('format', 'string', 'format it was decoded from', false),
  col('run_count', 'int64', 'Storyline documents decoded from it', false),
  col('byte_size', 'int64', 'size of its bytes'),
  col('sha256', 'string', 'SHA-256 of its bytes (with `-o preserve`)'),
  parquetOnly(col('raw', 'binary', 'its exact bytes (with `-o preserve`; exported byte for byte)')),
  col('imported_at', 'string', 'when it was imported', false),
];

/** Compact record stores: one row per JSON document; user columns (`--column`) follow as nullable JSON. */
export const RECORDS: readonly ColumnDef[] = [
  col('id', 'string', '`$.id` (or the `--column id=` path); else `<source_filename>#<line_number>`', false),
  col('timestamp', 'string', '`$.timestamp` as text; else `<source_filename>#<line_number>`', false),
  col('filename', 'string', 'source file, relative to the import root', false),
  col('line', 'int64', 'line of the record in its file', false),
  col('data_json', 'json', 'the record', false),
  parquetOnly(col('raw', 'binary', 'the record exact bytes including its line ending', false)),
];

/**
 * Canonical trajectory events, one row per event the gateway (`serve --gateway`, `--gateway-config`)
 * accepted, written with the Storyline runs decoded from them (a trace's rows are replaced whole
 * when it is projected again). Imports write none.
 */
export const EVENTS: readonly ColumnDef[] = [
  col('document_id', 'string', 'the run decoded from the event\'s trace', false),
  col('session_id', 'string', 'the trace\'s session (`session_id` of the gateway body)', false),
  col('agent_id', 'string', 'the trace\'s agent (`agent_id` of the gateway body)', false),
  col('root_session_id', 'string', '`root_session_id` of the gateway body'),
  col('source_path', 'string', 'the trace: `[<partition>/]<agent_id>/<session_id>`', false),
  col('partition', 'string', 'the `--gateway-split` partition of the trace (empty without a split)', false),
  col('ordinal', 'int64', 'position of the event in its trace (by `seq`, then arrival), from 0', false),
  col('seq', 'int64', 'the event\'s `seq`', false),
  col('source', 'string', 'the event\'s `source` (with `seq`, its identity: a retried batch is not stored twice)', false),
  col('kind', 'string', '`llm.request`, `llm.response`, `llm.response.stream`, `session.started`, `tool.execution`, ...', false),
  col('event_id', 'string', '`event_id`'),
  col('call_id', 'string', '`call_id` (pairs a request with its response)'),
  col('trace_id', 'string', '`trace_id`'),
  col('timestamp', 'string', '`timestamp`, else `timestamp_unix_ms`, normalised to RFC 3339 UTC'),
  col('received_at', 'string', 'when the gateway acknowledged it', false),
  col('record_json', 'json', 'the event record as it was sent', false),
];

/** The content store of a Storyline dataset: each large string once, under its hash (contents.ts). */
export const CONTENTS: readonly ColumnDef[] = [
  col('hash', 'string', 'SHA-256 of the value (base64url); cells refer to it as U+0001 followed by the hash', false),
  col('value', 'string', 'the string', false),
];

export const STORYLINE_RELATIONS = { runs: RUNS, steps: STEPS, tool_calls: TOOL_CALLS, sources: SOURCES, events: EVENTS, contents: CONTENTS } as const;
export type StorylineRelation = keyof typeof STORYLINE_RELATIONS;

/** The relations whose cells may refer to the content store. */
export const REFERRING_RELATIONS: ReadonlySet<Relation> = new Set(['runs', 'steps', 'tool_calls']);

/** The index table of a relation's rows: `<relation>_stored` under the view of a relation that refers to the content store. */
export const storedTable = (relation: Relation): string => (REFERRING_RELATIONS.has(relation) ? `${relation}_stored` : relation);

/** Whether a column of a referring relation may hold references: its JSON columns and `content` text columns. */
export const holdsContent = (column: ColumnDef): boolean => column.type === 'json' || column.content === true;
export type Relation = StorylineRelation | 'records';

/**
 * The column by which a snapshot retires rows of a part (layout.ts `PartRef.retired`): a run's rows
 * go by its document id, a source's and a gateway trace's events by its path. The content store and compact records are never retired.
 */
export const RETIRE_KEY: Partial<Record<Relation, string>> = { runs: 'document_id', steps: 'document_id', tool_calls: 'document_id', sources: 'source_path', events: 'source_path' };
