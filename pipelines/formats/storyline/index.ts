/**
 * The `storyline` format: Storyline `storyline/v1` documents as they are, one per `.json` file or one
 * per JSONL line. Decoding validates each document (fail closed on other versions) and reports a
 * problem with its file, line, column and JSON Pointer; encoding is the identity.
 */
import { SourceError } from '../errors.js';
import type { DecodedDocument, DetectProbe, Detection, EncodedDocument, FormatModule, SourceFile, DecodeContext } from '../types.js';
import type { Storyline } from '../../storyline/schema.js';
import { storylineProblems } from '../../storyline/validate.js';
import { locatedIn, sourceDocuments } from '../common/documents.js';
import { isJsonObject } from '../../../lib/json-object.js';

function detect(probe: DetectProbe): Detection | undefined {
  const version = isJsonObject(probe.value) ? probe.value.schema_version : undefined;
  // Any storyline/ version: the decoder refuses the ones this build does not read, naming the version.
  if (typeof version === 'string' && version.startsWith('storyline/')) return { confidence: 1, reason: `root schema_version ${JSON.stringify(version)}` };
  return undefined;
}

async function* decode(file: SourceFile, ctx: DecodeContext): AsyncGenerator<DecodedDocument> {
  let ordinal = 0;
  for await (const doc of sourceDocuments(file)) {
    if (ctx.signal.aborted) return;
    const [problem] = storylineProblems(doc.value, 1);
    if (problem) throw locatedIn(new SourceError({ relPath: file.relPath, pointer: problem.pointer }, problem.message), doc);
    yield { storyline: doc.value as Storyline, sourceDocument: ordinal++, ...(ctx.keepRaw ? { raw: doc.raw } : {}) };
  }
}

/** A file name from a document id: path separators and control characters replaced. */
export function safeFileName(id: string): string {
  const name = id.replace(/[/\\\u0000-\u001f]/g, '_').replace(/^\.+/, '_');
  return name === '' ? '_' : name.slice(0, 200);
}

async function* encode(docs: AsyncIterable<Storyline>): AsyncGenerator<EncodedDocument> {
  for await (const doc of docs) yield { name: `${safeFileName(doc.trajectory ?? doc.session)}.storyline.json`, value: doc };
}

export const storyline: FormatModule = {
  name: 'storyline',
  expects: 'Storyline documents (JSON objects with "schema_version": "storyline/v1", "session", "agent" and "turns")',
  extensions: ['.json', '.jsonl', '.ndjson'],
  detect,
  decode,
  encode,
};
