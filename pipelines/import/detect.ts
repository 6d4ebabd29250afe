/**
 * Per-file format detection for `-i auto`: every registered format looks at the probe (the skeleton
 * of the file's first JSON value, formats/probe.ts) and the most confident one wins (ties go to the
 * earlier entry of the registry). A file nobody recognises is refused with the most precise reason
 * available: empty, invalid UTF-8, a JSON syntax error with its line and column, or an unrecognised
 * shape.
 */
import { SourceError } from '../formats/errors.js';
import { parseJson } from '../formats/lines.js';
import { contentName, isJsonlPath } from '../formats/common/documents.js';
import { isJsonText } from '../formats/common/values.js';
import { probeOf } from '../formats/probe.js';
import type { FormatModule } from '../formats/types.js';
import type { ImportFile } from './sources.js';

export interface Detected {
  format: FormatModule;
  reason: string;
  /** A companion file of the format, with no document of its own (Detection.companion). */
  companion?: boolean;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Throws located "invalid UTF-8" when the head has a bad sequence (a sequence cut by the head's end is fine). */
function checkUtf8(relPath: string, head: Buffer, complete: boolean): void {
  const body = complete ? head : head.subarray(0, Math.max(0, head.length - 3));
  try {
    utf8.decode(body);
  } catch {
    let line = 1;
    let lineStart = 0;
    for (let i = 0; i < body.length; i++) {
      if (body[i] === 0x0a) {
        try {
          utf8.decode(body.subarray(lineStart, i));
        } catch {
          break;
        }
        line++;
        lineStart = i + 1;
      }
    }
    throw new SourceError({ relPath, line }, 'invalid UTF-8');
  }
}

/**
 * The format of a file, or undefined for a JSONL file that holds nothing yet but the start of its
 * first line (a session log the agent has just begun to write): there is nothing to import yet.
 */
export async function detectFormat(file: ImportFile, formats: readonly FormatModule[]): Promise<Detected | undefined> {
  const head = await file.head();
  const complete = file.size !== undefined ? head.length >= file.size : head.length < 64 * 1024;
  if (head.length === 0) throw new SourceError({ relPath: file.relPath }, 'empty file: no records');
  if (complete && isJsonlPath(file.relPath) && !head.includes(0x0a) && !isJsonText(head.toString('utf8'))) return undefined;
  checkUtf8(file.relPath, head, complete);
  const probe = probeOf(contentName(file.relPath), file.peek());
  let best: Detected | undefined;
  let bestConfidence = 0;
  for (const format of formats) {
    const detection = format.detect(probe);
    if (detection && detection.confidence > bestConfidence) {
      best = { format, reason: detection.reason, ...(detection.companion ? { companion: true } : {}) };
      bestConfidence = detection.confidence;
    }
  }
  if (best) return best;
  const text = head.toString('utf8');
  if (complete && probe.value === undefined) parseJson(text, file.relPath, 1); // throws the located syntax error
  const shape = Array.isArray(probe.value) ? 'a JSON array' : 'JSON';
  throw new SourceError({ relPath: file.relPath, line: 1 }, `${shape} that no trajectory format recognises (tried: ${formats.map((f) => f.name).join(', ')})`, {
    hint: 'name the format with -i/--input-format if detection is wrong',
  });
}
