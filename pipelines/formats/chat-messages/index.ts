/**
 * The `chat-messages` format: OpenAI-style chat message rows (per conversation, ShareGPT, or one row
 * per LLM call) in `.jsonl`/`.ndjson` (a row per line) or `.json` (an array, an envelope or one row).
 */
import { SourceError } from '../errors.js';
import type { DecodeContext, DecodedDocument, DetectProbe, Detection, FormatModule, SourceFile } from '../types.js';
import { sourceDocuments, withRawOnce } from '../common/documents.js';
import { isObject, type JsonObject } from '../common/unknown.js';
import type { Storyline } from '../../storyline/schema.js';
import { decodeConversationRow, decodeSessionRows, isConversationRow, isSessionRow } from './decode.js';
import { encodeChatMessages } from './encode.js';

function detect(probe: DetectProbe): Detection | undefined {
  const value = probe.value;
  if (isObject(value) && Array.isArray(value.session_steps)) return { confidence: 0.9, reason: 'a "session_steps" array (one row per LLM call)' };
  const first = Array.isArray(value) ? value[0] : value;
  if (isSessionRow(first)) return { confidence: 0.85, reason: 'rows with session_id, step_id and messages/response (one row per LLM call)' };
  if (isObject(first) && Array.isArray(first.conversations) && first.conversations.some((m) => isObject(m) && 'from' in m && 'value' in m)) {
    return { confidence: 0.85, reason: 'ShareGPT "conversations" with from/value' };
  }
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
  const lineRaws: Buffer[] = [];
  let ordinal = 0;
  let conversationLines = 0;
  for await (const source of sourceDocuments(file)) {
    const line = source.perLine ? source.line : undefined;
    const value = source.value;
    let storylines: Storyline[];
    if (source.perLine && isSessionRow(value)) {
      if (conversationLines > 0) fail(line, '', 'a per-call row (session_id, step_id) among conversation rows; one file holds one kind of row');
      lineRows.push({ row: value, pointer: '', line });
      lineRaws.push(source.raw);
      continue;
    }
    if (lineRows.length > 0) fail(line, '', 'a conversation row among per-call rows (session_id, step_id); one file holds one kind of row');
    if (isObject(value) && Array.isArray(value.session_steps)) {
      const { session_steps: rows, ...rootExtra } = value;
      storylines = decodeSessionRows(locate(rows as unknown[], '/session_steps', line, fail), file.relPath, 'session_steps', rootExtra, report);
    } else if (Array.isArray(value) && value.length > 0 && isSessionRow(value[0])) {
      storylines = decodeSessionRows(locate(value, '', line, fail), file.relPath, source.perLine ? 'session_steps_lines' : 'session_steps_array', undefined, report);
    } else {
      const rows: Array<[unknown, string]> = Array.isArray(value) ? value.map((row, i) => [row, `/${i}`]) : [[value, '']];
      if (rows.length === 0) fail(line, '', 'an empty JSON array holds no chat rows');
      storylines = rows.map(([row, pointer], i) => {
        if (!isConversationRow(row)) fail(line, pointer, 'not a chat-messages row: expected "messages", "conversations", or per-call rows with "session_id" and "step_id"');
        return decodeConversationRow(row as JsonObject, { relPath: file.relPath, line, pointer }, i, report);
      });
      if (source.perLine) conversationLines += 1;
    }
    yield* withRawOnce(storylines, ordinal, ctx.keepRaw ? source.raw : undefined);
    ordinal += 1;
  }
  if (lineRows.length > 0) {
    const storylines = decodeSessionRows(lineRows, file.relPath, 'session_steps_lines', undefined, report);
    // Sessions interleave across lines, so the file is one source document.
    yield* withRawOnce(storylines, 0, ctx.keepRaw ? Buffer.concat(lineRaws) : undefined);
  }
}

function locate(rows: unknown[], pointer: string, line: number | undefined, fail: (line: number | undefined, pointer: string, reason: string) => never) {
  return rows.map((row, i) => {
    if (!isObject(row)) fail(line, `${pointer}/${i}`, 'a per-call row must be a JSON object');
    return { row: row as JsonObject, pointer: `${pointer}/${i}`, line };
  });
}

export const chatMessages: FormatModule = {
  name: 'chat-messages',
  extensions: ['.jsonl', '.ndjson', '.json'],
  detect,
  decode,
  encode: encodeChatMessages,
};
