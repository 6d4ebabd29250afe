/** What the gateway tests share: waiting for background work (projection), and rows of `trajstore query`. */
import * as assert from 'uvu/assert';
import type { ToolResult } from '../../../lib/testing/run-tool.js';

export type Json = Record<string, any>;

/** Runs `check` until it passes (it throws while it does not), or fails with its last error after `timeoutMs`. */
export async function eventually<T>(check: () => Promise<T>, what: string, timeoutMs = 30_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (error) {
      if (Date.now() > end) throw new Error(`${what}: ${(error as Error).message}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

/** The rows of a `trajstore query --format json`, run by `trajstore` (a sandbox's runner). */
export async function queryRows(trajstore: (args: string[]) => Promise<ToolResult>, dataset: string, sql: string): Promise<Json[]> {
  const r = await trajstore(['query', dataset, '--sql', sql, '--format', 'json']);
  assert.is(r.code, 0, r.stderr);
  return JSON.parse(r.stdout) as Json[];
}
