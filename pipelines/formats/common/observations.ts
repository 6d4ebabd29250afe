/** Observation helpers for encoders whose formats tie a tool result to the step that made the call. */
import type { ObservationResult, Turn } from '../../storyline/schema.js';

/**
 * The observation results of each turn, with every result that answers a tool call moved to the
 * turn that made the call (chat-style sources attach results to a later turn). Order is kept.
 */
export function resultsByCallingTurn(turns: readonly Turn[]): ObservationResult[][] {
  const callTurn = new Map<string, number>();
  turns.forEach((turn, t) => turn.tool_calls?.forEach((call) => callTurn.set(call.tcid, t)));
  const results: ObservationResult[][] = turns.map(() => []);
  turns.forEach((turn, t) => {
    for (const result of turn.observation?.results ?? []) {
      const owner = typeof result.source_call_id === 'string' ? callTurn.get(result.source_call_id) : undefined;
      (results[owner ?? t] as ObservationResult[]).push(result);
    }
  });
  return results;
}
