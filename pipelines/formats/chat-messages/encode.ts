/**
 * Storyline to chat-messages, in the shape recorded in `origin.schema_version` by the decoder
 * (`messages`, `conversations`, `sharegpt`, `session_steps`, `session_steps_array`,
 * `session_steps_lines`), with a conversation row's metadata back from `meta.row`; other Storylines
 * become per-conversation `messages` rows whose metadata says the session, agent, model, run and
 * outcome. Adjacent Storylines decoded from the same per-call document (a file, or a line of a
 * JSONL file) are written back as one document (the envelope or the array).
 */
import { assignOwn } from '../../../lib/own-property.js';
import type { ObservationResult, Storyline, Turn } from '../../storyline/schema.js';
import type { EncodedDocument } from '../types.js';
import { resultsByCallingTurn } from '../common/observations.js';
import { isJsonObject, type JsonObject } from '../../../lib/json-object.js';
import { defined, restoreUnknown, synthesizedSet, unknownFieldsOf } from '../common/unknown.js';
import { safeFileName } from '../common/values.js';
import type { ChatShape } from './decode.js';
import { assistantMessage, FORMAT, TOOL_RESULTS_KIND, turnMessages } from './messages.js';
import { conversationOf } from './sharegpt.js';
import { reimportableJson } from '../../../lib/json-text.js';

const shapeOf = (doc: Storyline): ChatShape => {
  const version = doc.origin?.format === FORMAT ? doc.origin.schema_version : undefined;
  return version === 'conversations' || version === 'sharegpt' || version === 'session_steps' || version === 'session_steps_array' || version === 'session_steps_lines' ? version : 'messages';
};
const perCall = (shape: ChatShape) => shape.startsWith('session_steps');

export async function* encodeChatMessages(docs: AsyncIterable<Storyline>): AsyncGenerator<EncodedDocument> {
  let group: Storyline[] = [];
  const flush = function* (): Generator<EncodedDocument> {
    if (group.length > 0) yield* encodeSessionGroup(group);
    group = [];
  };
  for await (const doc of docs) {
    const shape = shapeOf(doc);
    if (!perCall(shape)) {
      yield* flush();
      yield { name: safeFileName(doc.session, '.json'), value: conversationRow(doc, shape) };
      continue;
    }
    const head = group[0];
    // One array or envelope per source document: a JSONL file of several holds them on separate lines
    // (rows one per line are one document, the file: its sessions interleave).
    const sameDocument = shape === 'session_steps_lines' || head?.origin?.line === doc.origin?.line;
    if (head && (shapeOf(head) !== shape || head.origin?.source_path !== doc.origin?.source_path || !sameDocument)) yield* flush();
    group.push(doc);
  }
  yield* flush();
}

function conversationRow(doc: Storyline, shape: ChatShape): JsonObject {
  const fromChat = doc.origin?.format === FORMAT;
  const results = resultsByCallingTurn(doc.turns);
  const metadata = isJsonObject(doc.meta?.row) ? doc.meta.row : {};
  const row: JsonObject = fromChat
    ? { ...metadata }
    : defined({ id: doc.session, agent: doc.agent.name, model: doc.agent.model, run_id: doc.run, tools: doc.agent.tools, ...(doc.task?.result ?? {}) });
  if (shape === 'sharegpt') {
    row.conversations = conversationOf(doc.turns, results);
  } else {
    const messages = doc.turns.flatMap((turn, t) => turnMessages(turn, results[t] as ObservationResult[]));
    row[shape === 'conversations' ? 'conversations' : 'messages'] = messages;
  }
  if (fromChat) {
    restoreUnknown(row, unknownFieldsOf(doc, FORMAT));
    if (doc.meta?.messages_as_json_string === true) row.messages = reimportableJson(row.messages);
  }
  return row;
}

function* encodeSessionGroup(group: Storyline[]): Generator<EncodedDocument> {
  const shape = shapeOf(group[0] as Storyline);
  const rows = group.flatMap(sessionRows);
  const name = safeFileName((group[0] as Storyline).origin?.source_path?.split('/').pop()?.replace(/\.(json|jsonl|ndjson)$/i, '') ?? (group[0] as Storyline).session, '.json');
  if (shape === 'session_steps_lines') {
    // In a directory, one file per row would make each row a session of its own on import.
    yield { name, value: rows, lines: rows };
  } else if (shape === 'session_steps_array') {
    yield { name, value: rows };
  } else {
    yield { name, value: { ...((group[0] as Storyline).extra ?? {}), session_steps: rows } };
  }
}

/** One row per agent turn that is not copied context; each row's prompt is everything before it. */
function sessionRows(doc: Storyline): JsonObject[] {
  const synthesized = synthesizedSet(doc);
  const results = resultsByCallingTurn(doc.turns);
  const history: JsonObject[] = [];
  const rows: JsonObject[] = [];
  doc.turns.forEach((turn: Turn, t) => {
    const own = results[t] as ObservationResult[];
    const isCall = turn.src === 'agent' && !turn.copied && turn.kind !== TOOL_RESULTS_KIND;
    if (!isCall) {
      history.push(...turnMessages(turn, own, true));
      return;
    }
    const extraRow = isJsonObject(turn.extra?.row) ? turn.extra.row : {};
    const row: JsonObject = { session_id: doc.session, step_id: rows.length + 1 };
    Object.assign(row, defined({ run_id: doc.run, agent_id: synthesized.has('/agent/id') ? undefined : doc.agent.id, agent_model: doc.agent.model, llm_model: turn.model, created_at: turn.ts ?? undefined }));
    row.messages = history.map((m) => structuredClone(m));
    row.response = assistantMessage(turn);
    if (extraRow.meta_json === undefined && (turn.metrics || turn.latency_ms != null || turn.ttft_ms != null)) {
      row.meta_json = { env_state: defined({ ...(turn.metrics ?? {}), extra: undefined, total_latency_ms: turn.latency_ms ?? undefined, ttft_ms: turn.ttft_ms ?? undefined }) };
    }
    assignOwn(row, extraRow);
    rows.push(row);
    history.push(...turnMessages(turn, own, true));
  });
  return rows;
}
