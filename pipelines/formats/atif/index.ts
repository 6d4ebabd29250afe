/**
 * The `atif` format: Harbor's Agent Trajectory Interchange Format, one trajectory per `.json` file
 * (or a JSON array of them) or one per line of a `.jsonl`/`.ndjson` file.
 */
import type { DecodeContext, DecodedDocument, DetectProbe, Detection, FormatModule, SourceFile } from '../types.js';
import { decodeJsonMembers, probeValue } from '../common/documents.js';
import { isObject } from '../common/unknown.js';
import { decodeTrajectory, isAtifVersion } from './decode.js';
import { encodeAtif } from './encode.js';

function detect(probe: DetectProbe): Detection | undefined {
  const value = probeValue(probe);
  const first = Array.isArray(value) ? value[0] : value;
  if (isObject(first)) {
    const version = first.schema_version;
    if (isAtifVersion(version) && Array.isArray(first.steps)) return { confidence: 0.95, reason: `schema_version ${JSON.stringify(version)} with steps` };
    if (typeof version === 'string' && /^ATIF-/i.test(version)) return { confidence: 0.9, reason: `ATIF schema_version ${JSON.stringify(version)}` };
    if (Array.isArray(first.steps) && isObject(first.agent) && first.steps.some((s) => isObject(s) && 'step_id' in s && 'source' in s)) {
      return { confidence: 0.6, reason: 'root keys agent and steps with step_id/source' };
    }
    return undefined;
  }
  if (value === undefined) {
    // The head did not parse (a large or broken file): look for the version string.
    const head = probe.head.toString('utf8');
    if (/"schema_version"\s*:\s*"ATIF-v\d/.test(head)) return { confidence: 0.8, reason: 'an "ATIF-v…" schema_version near the start' };
  }
  return undefined;
}

function decode(file: SourceFile, ctx: DecodeContext): AsyncGenerator<DecodedDocument> {
  return decodeJsonMembers(file, ctx, decodeTrajectory, 'an empty JSON array holds no ATIF trajectory');
}

export const atif: FormatModule = {
  name: 'atif',
  extensions: ['.json', '.jsonl', '.ndjson'],
  detect,
  decode,
  encode: encodeAtif,
};
