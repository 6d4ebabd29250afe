/**
 * Shared by the decoders of local agent session logs (`agenta` Codex rollouts, `agentb-code`
 * Claude Code sessions): one JSONL file is one source document, every non-blank line must be a
 * JSON object (anything else is exit 2 with file:line:column), skipped line kinds are reported
 * once per kind instead of once per line, and document totals are summed from the turns.
 */
import type { FinalMetrics, Metrics, ToolCall, Turn } from '../../storyline/schema.js';
import { SourceError } from '../errors.js';
import { parseJson, readLines } from '../lines.js';
import type { DecodeContext, SourceFile } from '../types.js';
import { isJsonObject, type JsonObject } from '../../../lib/json-object.js';
import { defined, shown } from './unknown.js';

export interface ObjectLine {
  value: JsonObject;
  /** 1-based line number. */
  number: number;
}

/** The file's exact bytes, collected while its lines are read (only with `-o preserve`). */
export class RawCollector {
  private readonly chunks: Buffer[] = [];
  constructor(readonly enabled: boolean) {}
  add(bytes: Buffer): void {
    if (this.enabled) this.chunks.push(bytes);
  }
  bytes(): Buffer | undefined {
    return this.enabled ? Buffer.concat(this.chunks) : undefined;
  }
}

/**
 * The JSON object of every non-blank line, in order; a file without any is invalid input. A last
 * line without a newline is a line the agent is still writing: it is left out (with its bytes) and
 * said as a diagnostic, so a live session imports up to its last complete line.
 */
export async function* objectLines(file: SourceFile, raw: RawCollector, ctx: Pick<DecodeContext, 'diagnostic'>): AsyncGenerator<ObjectLine> {
  let any = false;
  for await (const line of readLines(file.open(), file.relPath)) {
    if (!line.terminated && line.text.trim() !== '') {
      ctx.diagnostic('partial_line', `the last line has no newline yet (${line.bytes.length} bytes; the agent may still be writing it): left out`, line.number);
      any = true;
      continue;
    }
    raw.add(line.bytes);
    if (line.text.trim() === '') continue;
    any = true;
    const value = parseJson(line.text, file.relPath, line.number);
    if (!isJsonObject(value)) {
      throw new SourceError({ relPath: file.relPath, line: line.number, column: 1 }, `expected a JSON object, found ${Array.isArray(value) ? 'an array' : shown(value)}`);
    }
    yield { value, number: line.number };
  }
  if (!any) throw new SourceError({ relPath: file.relPath }, 'empty file: no records');
}

/** Counts lines a decoder skips on purpose, by kind, and reports each kind once. */
export class SkipTally {
  private readonly kinds = new Map<string, { count: number; first: number }>();

  note(kind: string, line: number): void {
    const seen = this.kinds.get(kind);
    if (seen) seen.count += 1;
    else this.kinds.set(kind, { count: 1, first: line });
  }

  report(ctx: DecodeContext, code: string): void {
    for (const [kind, { count, first }] of this.kinds) {
      ctx.diagnostic(code, `skipped ${count} ${kind} line${count === 1 ? '' : 's'}`, first);
    }
  }
}

/** Document totals from the turns' metrics (absent when no turn has any). */
export function totalsOf(turns: readonly Turn[]): FinalMetrics {
  const sum = (key: 'prompt_tokens' | 'completion_tokens' | 'cached_tokens'): number | undefined => {
    let total: number | undefined;
    for (const turn of turns) {
      const value = turn.metrics?.[key];
      if (typeof value === 'number') total = (total ?? 0) + value;
    }
    return total;
  };
  return defined({
    total_steps: turns.length,
    total_prompt_tokens: sum('prompt_tokens'),
    total_completion_tokens: sum('completion_tokens'),
    total_cached_tokens: sum('cached_tokens'),
  });
}

/** Adds two metrics records field by field (for sources that report one call's usage in pieces). */
export function addMetrics(a: Metrics, b: Metrics): Metrics {
  const add = (x: number | null | undefined, y: number | null | undefined): number | undefined =>
    typeof x === 'number' || typeof y === 'number' ? (x ?? 0) + (y ?? 0) : undefined;
  return defined({
    prompt_tokens: add(a.prompt_tokens, b.prompt_tokens),
    completion_tokens: add(a.completion_tokens, b.completion_tokens),
    cached_tokens: add(a.cached_tokens, b.cached_tokens),
  });
}

/**
 * Keeps a source event that is no message and has no Storyline field of its own (an aborted turn,
 * an API or stream error, a turn's duration) as written, in `extra.events` of the turn it follows:
 * in order and where it happened, as the turn's own source keys (ids, stop reasons) are kept.
 */
export function keepEvent(turn: Turn, event: JsonObject): void {
  turn.extra ??= {};
  const events = Array.isArray(turn.extra.events) ? (turn.extra.events as JsonObject[]) : (turn.extra.events = []);
  events.push(event);
}

/** A string field of a source object, or undefined. */
export function str(value: JsonObject | undefined, key: string): string | undefined {
  const v = value?.[key];
  return typeof v === 'string' ? v : undefined;
}

/** A non-negative integer field, or undefined. */
export function count(value: JsonObject | undefined, key: string): number | undefined {
  const v = value?.[key];
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : undefined;
}

/** A tool call and the turn that made it, until the call's output line is seen. */
export interface CallSlot {
  turn: Turn;
  call: ToolCall;
  answered: boolean;
}

/** True when `text`, leading white space aside, starts with one of `prefixes`. */
export function startsWithAny(text: string, prefixes: readonly string[]): boolean {
  const trimmed = text.trimStart();
  return prefixes.some((p) => trimmed.startsWith(p));
}
