/**
 * `agenta`: Codex CLI rollout logs, decode only (reference/trajectory-formats.md §4.2).
 * Fingerprint: a first line `{timestamp, type, payload}` with a rollout line type; the legacy
 * layout's bare header `{id, timestamp, instructions?, git?}` is recognised with less confidence,
 * more when the file is named `rollout-*.jsonl`.
 */
import { basename } from 'node:path';
import type { DetectProbe, Detection, FormatModule } from '../types.js';
import { isJsonObject } from '../../../lib/json-object.js';
import { decodeCodex, ITEM_TYPES } from './decode.js';

const LINE_TYPES = new Set(['session_meta', 'turn_context', 'response_item', 'event_msg', 'compacted']);

function detect(probe: DetectProbe): Detection | undefined {
  const line = probe.value;
  if (!isJsonObject(line)) return undefined;
  const rolloutName = /^rollout-.*\.jsonl$/i.test(basename(probe.relPath));
  if (typeof line.type === 'string' && LINE_TYPES.has(line.type) && isJsonObject(line.payload) && 'timestamp' in line) {
    return { confidence: 0.95, reason: `first line is a Codex rollout \`${line.type}\` line` };
  }
  const header = typeof line.id === 'string' && typeof line.timestamp === 'string' && line.type === undefined;
  if (header && ('instructions' in line || 'git' in line)) {
    return { confidence: rolloutName ? 0.85 : 0.6, reason: 'first line is a legacy Codex session header' };
  }
  if (rolloutName && typeof line.type === 'string' && ITEM_TYPES.has(line.type)) {
    return { confidence: 0.6, reason: 'a rollout-*.jsonl file starting with a bare response item' };
  }
  return undefined;
}

export const agenta: FormatModule = {
  name: 'agenta',
  expects: 'Codex CLI rollout lines ({"timestamp", "type": "session_meta"|"response_item"|..., "payload"}) with at least one message',
  extensions: ['.jsonl'],
  detect,
  decode: decodeCodex,
};
