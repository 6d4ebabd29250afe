/** Drives a format module the way the import and export pipelines do, for the format tests. */
import { createReadStream, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import * as assert from 'uvu/assert';
import { Logger } from '../../../lib/log.js';
import type { Storyline } from '../../storyline/schema.js';
import { storylineProblems } from '../../storyline/validate.js';
import { probeOf as probeBytes } from '../../formats/probe.js';
import type { DecodedDocument, DetectProbe, EncodedDocument, FormatModule, SourceFile } from '../../formats/types.js';
import { PROJECT_TESTDATA } from './fixtures.js';

export function fileSource(path: string, relPath: string): SourceFile {
  return { path, relPath, name: relPath, open: () => createReadStream(path) };
}

export function bytesSource(bytes: Buffer | string, relPath: string): SourceFile {
  const data = Buffer.from(bytes);
  return { path: relPath, relPath, name: relPath, open: () => Readable.from([data]) };
}

export interface Decoded {
  docs: DecodedDocument[];
  storylines: Storyline[];
  diagnostics: Array<{ code: string; message: string; line?: number }>;
}

export async function decodeAll(format: FormatModule, file: SourceFile, keepRaw = false): Promise<Decoded> {
  const diagnostics: Decoded['diagnostics'] = [];
  const docs: DecodedDocument[] = [];
  const ctx = {
    log: new Logger('error', { write: () => true }),
    keepRaw,
    signal: new AbortController().signal,
    diagnostic: (code: string, message: string, line?: number) => void diagnostics.push({ code, message, line }),
  };
  for await (const doc of format.decode(file, ctx)) docs.push(doc);
  // What the pipeline stores: a JSON round trip of the Storyline (no undefined, no shared objects).
  const storylines = docs.map((d) => JSON.parse(JSON.stringify(d.storyline)) as Storyline);
  return { docs, storylines, diagnostics };
}

export async function encodeAll(format: FormatModule, storylines: Storyline[]): Promise<EncodedDocument[]> {
  const out: EncodedDocument[] = [];
  async function* source() {
    yield* storylines;
  }
  for await (const doc of format.encode!(source())) {
    out.push({ name: doc.name, value: JSON.parse(JSON.stringify(doc.value)), ...(doc.lines ? { lines: JSON.parse(JSON.stringify(doc.lines)) as unknown[] } : {}) });
  }
  return out;
}

/** Problems of every Storyline, as `session: pointer message` lines (empty when all are valid). */
export function problemsOf(storylines: Storyline[]): string[] {
  return storylines.flatMap((s) => storylineProblems(s).map((p) => `${s.session}: ${p.pointer} ${p.message}`));
}

/** Each bundled sample `testdata/samples/<format>/<name>` decodes to valid Storylines and is detected as the format. */
export async function assertSamplesDecode(format: FormatModule, names: string[]): Promise<void> {
  for (const name of names) {
    const path = join(PROJECT_TESTDATA, 'samples', format.name, name);
    const { storylines } = await decodeAll(format, fileSource(path, name));
    assert.ok(storylines.length > 0, name);
    assert.equal(problemsOf(storylines), []);
    assert.ok(format.detect(probeOf(path, name)), name);
  }
}

/** The probe the import pipeline builds for detection, from a file's bytes. */
export function probeOf(path: string, relPath: string): DetectProbe {
  return probeBytes(relPath, [readFileSync(path)]);
}

/** A deep copy with object keys sorted, so that deep equality ignores key order. */
export function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.keys(value).sort().map((k) => [k, sortKeys((value as Record<string, unknown>)[k])]));
  }
  return value;
}

export const sum = (values: Array<number | null | undefined>): number => values.reduce<number>((a, v) => a + (v ?? 0), 0);

export function tokenTotals(storylines: Storyline[]): { prompt: number; completion: number; cached: number } {
  const turns = storylines.flatMap((s) => s.turns);
  return {
    prompt: sum(turns.map((t) => t.metrics?.prompt_tokens)),
    completion: sum(turns.map((t) => t.metrics?.completion_tokens)),
    cached: sum(turns.map((t) => t.metrics?.cached_tokens)),
  };
}

export const toolCallCount = (storylines: Storyline[]): number => storylines.reduce((n, s) => n + s.turns.reduce((m, t) => m + (t.tool_calls?.length ?? 0), 0), 0);

/** Runs `fn` and returns the error it throws (fails the test when it does not throw). */
export async function thrown(fn: () => Promise<unknown>): Promise<Error> {
  try {
    await fn();
  } catch (error) {
    return error as Error;
  }
  throw new Error('expected an error');
}

/** OpenAI-style `arguments` JSON strings parsed, so that equality ignores their whitespace. */
export function parseArgumentStrings(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value), (key, v) => {
    if (key === 'arguments' && typeof v === 'string') {
      try {
        return JSON.parse(v);
      } catch {
        return v;
      }
    }
    return v;
  });
}

/**
 * chat-messages equality: JSON equal once key order, the whitespace of `arguments` strings and the
 * JSON-string encoding of `messages` are set aside, and per-call rows are compared in
 * (session_id, step_id) order (the decoder orders a session's rows by step_id).
 */
export function chatCanonical(documents: unknown[]): unknown {
  type Row = Record<string, unknown>;
  const rowKey = (r: Row) => `${String(r.session_id)}\u0000${String(r.step_id).padStart(12, '0')}`;
  const rows = (list: Row[]) => [...list].sort((a, b) => rowKey(a).localeCompare(rowKey(b)));
  const one = (doc: unknown): unknown => {
    if (Array.isArray(doc)) return rows(doc as Row[]);
    const row = { ...(doc as Row) };
    if (Array.isArray(row.session_steps)) row.session_steps = rows(row.session_steps as Row[]);
    if (typeof row.messages === 'string') row.messages = JSON.parse(row.messages);
    return row;
  };
  return sortKeys(parseArgumentStrings(documents.map(one)));
}

