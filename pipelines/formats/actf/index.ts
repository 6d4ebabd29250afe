/**
 * The `actf` format: ACTF v1.0 task documents (`*.actf.json`), one Storyline per attempt.
 */
import type { DecodeContext, DecodedDocument, DetectProbe, Detection, FormatModule, SourceFile } from '../types.js';
import { decodeJsonMembers, probeValue } from '../common/documents.js';
import { isObject } from '../common/unknown.js';
import { decodeActfDocument } from './decode.js';
import { encodeActf } from './encode.js';

function detect(probe: DetectProbe): Detection | undefined {
  if (/\.actf\.json$/i.test(probe.relPath)) return { confidence: 0.95, reason: 'file name ends in .actf.json' };
  const value = probeValue(probe);
  const first = Array.isArray(value) ? value[0] : value;
  if (isObject(first) && typeof first.task_id === 'string' && isObject(first.attempts)) return { confidence: 0.9, reason: 'root keys task_id and attempts' };
  if (value === undefined && /"schema_version"\s*:\s*"ACTF_v/.test(probe.head.toString('utf8'))) return { confidence: 0.7, reason: 'an "ACTF_v…" schema_version near the start' };
  return undefined;
}

function decode(file: SourceFile, ctx: DecodeContext): AsyncGenerator<DecodedDocument> {
  return decodeJsonMembers(file, ctx, decodeActfDocument);
}

export const actf: FormatModule = {
  name: 'actf',
  extensions: ['.actf.json', '.json', '.jsonl', '.ndjson'],
  detect,
  decode,
  encode: encodeActf,
};
