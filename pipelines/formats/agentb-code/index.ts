/**
 * `agentb-code`: Claude Code session logs, decode only (reference/trajectory-formats.md §4.1).
 * Detection fingerprint: a JSONL line whose `type` is a Claude Code line type and that carries
 * `sessionId`, `uuid` or `leafUuid`.
 */
import type { DetectProbe, Detection, FormatModule } from '../types.js';
import { isJsonObject } from '../../../lib/json-object.js';
import { decodeClaudeCode } from './decode.js';

const CONVERSATION_TYPES = new Set(['user', 'assistant', 'system']);
const OTHER_TYPES = new Set([
  'summary',
  'file-history-snapshot',
  'queue-operation',
  'progress',
  'attachment',
  'custom-title',
  'ai-title',
  'last-prompt',
  'permission-mode',
]);

function detect(probe: DetectProbe): Detection | undefined {
  const line = probe.value;
  if (!isJsonObject(line) || typeof line.type !== 'string') return undefined;
  const ids = ['sessionId', 'uuid', 'leafUuid', 'messageId'].filter((k) => typeof line[k] === 'string');
  if (CONVERSATION_TYPES.has(line.type) && isJsonObject(line.message) && ids.length > 0) {
    return { confidence: 0.9, reason: `first line is a Claude Code \`${line.type}\` line with ${ids.join(', ')}` };
  }
  if (OTHER_TYPES.has(line.type) && ids.length > 0) {
    return { confidence: 0.8, reason: `first line is a Claude Code \`${line.type}\` line` };
  }
  return undefined;
}

export const agentbCode: FormatModule = {
  name: 'agentb-code',
  expects: 'Claude Code session lines ({"type": "user"|"assistant", "sessionId", "message"}) with at least one message',
  extensions: ['.jsonl'],
  detect,
  decode: decodeClaudeCode,
};
