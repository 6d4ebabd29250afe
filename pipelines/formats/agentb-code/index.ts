/**
 * `agentb-code`: Claude Code session logs, decode only (reference/trajectory-formats.md §4.1).
 * Detection fingerprint: a JSONL line whose `type` is a Claude Code line type and that carries
 * `sessionId`, `uuid` or `leafUuid`; with less confidence, a line of a kebab-case type this build
 * does not know that carries a UUID `sessionId`, as the line types newer Claude Code versions add do
 * (a session file can start with any of them). A subagent's `agent-<id>.meta.json` sidecar is a
 * companion file: the import passes over it, and the subagent's decode reads it.
 */
import type { DetectProbe, Detection, FormatModule } from '../types.js';
import { isJsonObject } from '../../../lib/json-object.js';
import { decodeClaudeCode, isSubagentSidecar } from './decode.js';

const CONVERSATION_TYPES = new Set(['user', 'assistant', 'system']);
/** The other line types of Claude Code 2.1.144 (the community session schema). */
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
  'pr-link',
  'agent-name',
  'agent-setting',
  'bridge-session',
  'worktree-state',
]);
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** How Claude Code names the line types it has added since 2.1 (`pr-link`, `worktree-state`). */
const KEBAB = /^[a-z]+(?:-[a-z]+)+$/;

function detect(probe: DetectProbe): Detection | undefined {
  const line = probe.value;
  if (isSubagentSidecar(probe.relPath) && isJsonObject(line) && line.type === undefined) {
    return { confidence: 0.9, reason: "a Claude Code subagent's metadata sidecar", companion: true };
  }
  if (!isJsonObject(line) || typeof line.type !== 'string') return undefined;
  const ids = ['sessionId', 'uuid', 'leafUuid', 'messageId'].filter((k) => typeof line[k] === 'string');
  if (CONVERSATION_TYPES.has(line.type) && isJsonObject(line.message) && ids.length > 0) {
    return { confidence: 0.9, reason: `first line is a Claude Code \`${line.type}\` line with ${ids.join(', ')}` };
  }
  if (OTHER_TYPES.has(line.type) && ids.length > 0) {
    return { confidence: 0.8, reason: `first line is a Claude Code \`${line.type}\` line` };
  }
  if (KEBAB.test(line.type) && typeof line.sessionId === 'string' && UUID.test(line.sessionId)) {
    return { confidence: 0.5, reason: `first line is a \`${line.type}\` line with a session UUID, as Claude Code writes` };
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
