/**
 * Validation of Storyline documents: the TypeBox schema plus the rules a schema cannot say
 * (unique turn ids, unique tool-call ids, observations that answer a call of the document).
 * Every problem carries a JSON Pointer into the document.
 */
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { STORYLINE_SCHEMA_VERSION, Storyline } from './schema.js';

export interface StorylineProblem {
  /** JSON Pointer (RFC 6901) of the offending value; `` is the whole document. */
  pointer: string;
  message: string;
}

const compiled = TypeCompiler.Compile(Storyline);

/** Escape one JSON Pointer reference token (RFC 6901 §3). */
export function escapePointerToken(token: string | number): string {
  return String(token).replace(/~/g, '~0').replace(/\//g, '~1');
}

export function pointerOf(...tokens: Array<string | number>): string {
  return tokens.map((t) => `/${escapePointerToken(t)}`).join('');
}

/** All problems of a candidate document, most useful first; empty when it is valid. */
export function storylineProblems(doc: unknown, maxProblems = 20): StorylineProblem[] {
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) {
    return [{ pointer: '', message: 'a Storyline document must be a JSON object' }];
  }
  // Fail closed on other versions before anything else: a v2 document may mean anything.
  const version = (doc as Record<string, unknown>).schema_version;
  if (version !== STORYLINE_SCHEMA_VERSION) {
    const seen = version === undefined ? 'missing' : JSON.stringify(version);
    return [{ pointer: '/schema_version', message: `unsupported schema_version ${seen} (this build reads "${STORYLINE_SCHEMA_VERSION}")` }];
  }
  // Check() is far cheaper than walking Errors(); valid documents (the common case) skip the walk.
  if (compiled.Check(doc)) return referenceProblems(doc as Storyline, maxProblems);
  const problems: StorylineProblem[] = [];
  for (const error of compiled.Errors(doc)) {
    problems.push({ pointer: error.path, message: error.message });
    if (problems.length >= maxProblems) return problems;
  }
  if (problems.length > 0) return problems;
  return referenceProblems(doc as Storyline, maxProblems);
}

function referenceProblems(doc: Storyline, maxProblems: number): StorylineProblem[] {
  const problems: StorylineProblem[] = [];
  const turnIds = new Set<string>();
  const callIds = new Set<string>();
  doc.turns.forEach((turn, t) => {
    const key = `${typeof turn.id}:${turn.id}`;
    if (turnIds.has(key)) problems.push({ pointer: pointerOf('turns', t, 'id'), message: `duplicate turn id ${JSON.stringify(turn.id)}` });
    turnIds.add(key);
    turn.tool_calls?.forEach((call, c) => {
      if (callIds.has(call.tcid)) problems.push({ pointer: pointerOf('turns', t, 'tool_calls', c, 'tcid'), message: `duplicate tool call id ${JSON.stringify(call.tcid)}` });
      callIds.add(call.tcid);
    });
  });
  doc.turns.forEach((turn, t) => {
    turn.observation?.results.forEach((result, r) => {
      const id = result.source_call_id;
      if (typeof id === 'string' && !callIds.has(id)) {
        problems.push({ pointer: pointerOf('turns', t, 'observation', 'results', r, 'source_call_id'), message: `no tool call has id ${JSON.stringify(id)}` });
      }
    });
  });
  return problems.slice(0, maxProblems);
}
