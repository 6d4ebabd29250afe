/**
 * The `chat-messages` format: OpenAI-style chat message rows (per conversation under `messages` or
 * `conversations`, ShareGPT, or one row per LLM call) in `.jsonl`/`.ndjson` (a row per line) or
 * `.json` (an array, an envelope or one row). decode.ts lists the shapes and what is refused.
 */
import { SourceError } from '../errors.js';
import type { DecodeContext, DecodedDocument, DetectProbe, Detection, FormatModule, SourceFile } from '../types.js';
import { locatedIn, sourceDocuments, withRawOnce, type SourceJson } from '../common/documents.js';
import { isJsonObject, type JsonObject } from '../../../lib/json-object.js';
import type { Storyline } from '../../storyline/schema.js';
import { decodeConversationRow, decodeSessionRows, isConversationRow, isSessionRow } from './decode.js';
import { encodeChatMessages } from './encode.js';

function detect(probe: DetectProbe): Detection | undefined {
  const value = probe.value;
  if (isJsonObject(value) && Array.isArray(value.session_steps)) return { confidence: 0.9, reason: 'a "session_steps" array (one row per LLM call)' };
  const first = Array.isArray(value) ? value[0] : value;
  if (isSessionRow(first)) return { confidence: 0.85, reason: 'rows with session_id, step_id and messages/response (one row per LLM call)' };
  const entry = isJsonObject(first) && Array.isArray(first.conversations) ? first.conversations[0] : undefined;
  if (isJsonObject(entry) && 'from' in entry && 'value' in entry) return { confidence: 0.85, reason: 'ShareGPT "conversations" with from/value' };
  if (isJsonObject(entry) && typeof entry.role === 'string') return { confidence: 0.8, reason: 'rows with "conversations" of role/content messages' };
  if (isConversationRow(first)) {
    const messages = typeof first.messages === 'string' ? first.messages : JSON.stringify(first.messages);
    if (/"role"\s*:/.test(messages)) return { confidence: 0.8, reason: 'rows with a "messages" array of role/content messages' };
  }
  return undefined;
}

type Report = (code: string, message: string, line?: number) => void;

async function* decode(file: SourceFile, ctx: DecodeContext): AsyncGenerator<DecodedDocument> {
  const report: Report = (code, message, line) => ctx.diagnostic(code, message, line);
  const fail = (line: number | undefined, pointer: string, reason: string): never => {
    throw new SourceError({ relPath: file.relPath, line, pointer: pointer === '' ? undefined : pointer }, reason);
  };
  // Per-call rows on separate lines belong together: collected and decoded at the end of the file.
  const lineRows: Array<{ row: JsonObject; pointer: string; line: number | undefined }> = [];
  const lineSources: SourceJson[] = [];
  let ordinal = 0;
  let conversationLines = 0;
  /** The Storylines of one source document (any but a per-call row on a line of its own). */
  const storylinesOf = (source: SourceJson): Storyline[] => {
    const line = source.perLine ? source.line : undefined;
    const value = source.value;
    if (isJsonObject(value) && Array.isArray(value.session_steps)) {
      const { session_steps: rows, ...rootExtra } = value;
      return decodeSessionRows(locate(rows as unknown[], '/session_steps', line, fail), file.relPath, 'session_steps', rootExtra, report);
    }
    if (Array.isArray(value) && value.length > 0 && isSessionRow(value[0])) {
      // An array on a JSONL line too: export writes it back as one array, as it writes a `.json` one to a JSONL stream.
      return decodeSessionRows(locate(value, '', line, fail), file.relPath, 'session_steps_array', undefined, report);
    }
    const rows: Array<[unknown, string]> = Array.isArray(value) ? value.map((row, i) => [row, `/${i}`]) : [[value, '']];
    if (rows.length === 0) fail(line, '', 'an empty JSON array holds no chat rows');
    if (source.perLine) conversationLines += 1;
    return rows.map(([row, pointer], i) => {
      if (!isConversationRow(row)) fail(line, pointer, 'not a chat-messages row: expected "messages", "conversations", or per-call rows with "session_id" and "step_id"');
      return decodeConversationRow(row as JsonObject, { relPath: file.relPath, line, pointer }, i, report);
    });
  };
  for await (const source of sourceDocuments(file)) {
    const line = source.perLine ? source.line : undefined;
    const value = source.value;
    if (source.perLine && isSessionRow(value)) {
      if (conversationLines > 0) fail(line, '', 'a per-call row (session_id, step_id) among conversation rows; one file holds one kind of row');
      lineRows.push({ row: value, pointer: '', line });
      lineSources.push(source);
      continue;
    }
    if (lineRows.length > 0) fail(line, '', 'a conversation row among per-call rows (session_id, step_id); one file holds one kind of row');
    let storylines: Storyline[];
    try {
      storylines = storylinesOf(source);
    } catch (error) {
      throw locatedIn(error, source);
    }
    yield* withRawOnce(storylines, ordinal, ctx.keepRaw ? source.raw : undefined);
    ordinal += 1;
  }
  if (lineRows.length > 0) {
    let storylines: Storyline[];
    try {
      storylines = decodeSessionRows(lineRows, file.relPath, 'session_steps_lines', undefined, report);
    } catch (error) {
      // A problem is about one row: its line is the source document to place the pointer in.
      const source = error instanceof SourceError ? lineSources.find((s) => s.line === error.location.line) : undefined;
      throw source ? locatedIn(error, source) : error;
    }
    // Sessions interleave across lines, so the file is one source document.
    yield* withRawOnce(storylines, 0, ctx.keepRaw ? Buffer.concat(lineSources.map((s) => s.raw)) : undefined);
  }
}

function locate(rows: unknown[], pointer: string, line: number | undefined, fail: (line: number | undefined, pointer: string, reason: string) => never) {
  return rows.map((row, i) => {
    if (!isJsonObject(row)) fail(line, `${pointer}/${i}`, 'a per-call row must be a JSON object');
    return { row: row as JsonObject, pointer: `${pointer}/${i}`, line };
  });
}

export const chatMessages: FormatModule = {
  name: 'chat-messages',
  expects: 'chat rows (objects with a "messages" or "conversations" list, or per-call rows with "session_id", "step_id" and "messages")',
  extensions: ['.jsonl', '.ndjson', '.json'],
  detect,
  decode,
  encode: encodeChatMessages,
};
