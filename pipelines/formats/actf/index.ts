/**
 * The `actf` format: ACTF v1.0 task documents (`*.actf.json`), one Storyline per attempt.
 */
import type { DecodeContext, DecodedDocument, DetectProbe, Detection, FormatModule, SourceFile } from '../types.js';
import { decodeJsonMembers } from '../common/documents.js';
import { isJsonObject } from '../../../lib/json-object.js';
import { decodeActfDocument } from './decode.js';
import { encodeActf } from './encode.js';

function detect(probe: DetectProbe): Detection | undefined {
  if (/\.actf\.json$/i.test(probe.relPath)) return { confidence: 0.95, reason: 'file name ends in .actf.json' };
  const first = Array.isArray(probe.value) ? probe.value[0] : probe.value;
  if (isJsonObject(first) && typeof first.task_id === 'string' && isJsonObject(first.attempts)) return { confidence: 0.9, reason: 'root keys task_id and attempts' };
  return undefined;
}

function decode(file: SourceFile, ctx: DecodeContext): AsyncGenerator<DecodedDocument> {
  return decodeJsonMembers(file, ctx, decodeActfDocument);
}

export const actf: FormatModule = {
  name: 'actf',
  expects: 'ACTF task documents (JSON objects with "task_id", "k", "attempts_tried" and "attempts")',
  extensions: ['.actf.json', '.json', '.jsonl', '.ndjson'],
  detect,
  decode,
  encode: encodeActf,
};
