/**
 * The `atif` format: Harbor's Agent Trajectory Interchange Format, one trajectory per `.json` file
 * (or a JSON array of them) or one per line of a `.jsonl`/`.ndjson` file.
 */
import type { DecodeContext, DecodedDocument, DetectProbe, Detection, FormatModule, SourceFile } from '../types.js';
import { decodeJsonMembers } from '../common/documents.js';
import { isJsonObject } from '../../../lib/json-object.js';
import { decodeTrajectory, isAtifVersion } from './decode.js';
import { encodeAtif } from './encode.js';

function detect(probe: DetectProbe): Detection | undefined {
  const first = Array.isArray(probe.value) ? probe.value[0] : probe.value;
  if (!isJsonObject(first)) return undefined;
  const version = first.schema_version;
  if (isAtifVersion(version) && Array.isArray(first.steps)) return { confidence: 0.95, reason: `root schema_version ${JSON.stringify(version)} with steps` };
  // A version this build does not read: ATIF's decoder says so, naming it.
  if (typeof version === 'string' && /^ATIF-/i.test(version)) return { confidence: 0.9, reason: `root ATIF schema_version ${JSON.stringify(version)}` };
  if (Array.isArray(first.steps) && isJsonObject(first.agent) && isJsonObject(first.steps[0]) && 'step_id' in first.steps[0] && 'source' in first.steps[0]) {
    return { confidence: 0.6, reason: 'root keys agent and steps with step_id/source' };
  }
  return undefined;
}

function decode(file: SourceFile, ctx: DecodeContext): AsyncGenerator<DecodedDocument> {
  return decodeJsonMembers(file, ctx, decodeTrajectory, 'an empty JSON array holds no ATIF trajectory');
}

export const atif: FormatModule = {
  name: 'atif',
  expects: 'ATIF trajectories (JSON objects with "schema_version": "ATIF-v1.x", "agent" and "steps")',
  extensions: ['.json', '.jsonl', '.ndjson'],
  detect,
  decode,
  encode: encodeAtif,
};
