/** An ATIF trajectory of big tool outputs, for the tests of what bounds a page of steps. */
import { writeFileSync } from 'node:fs';

/**
 * Writes `path`: one run (document id `documentId`) of `count` agent steps, each with a tool output of
 * `bytes` bytes, each its own (the content store keeps a repeated value once).
 */
export function writeBigRun(path: string, documentId: string, count: number, bytes: number): void {
  const steps = Array.from({ length: count }, (_, i) => ({
    step_id: i + 1,
    source: 'agent',
    message: `step ${i}`,
    tool_calls: [{ tool_call_id: `c${i}`, function_name: 'cat', arguments: {} }],
    observation: { results: [{ source_call_id: `c${i}`, content: `${i} `.padEnd(bytes, String.fromCharCode(97 + (i % 26))) }] },
  }));
  writeFileSync(path, JSON.stringify({ schema_version: 'ATIF-v1.7', session_id: documentId, trajectory_id: documentId, agent: { name: 'a', version: '1' }, steps }));
}
