/** `sync`: the plan checked, then the resident worker (worker.ts) until it is stopped or, with --once, after one batch. */
import type { Logger } from '../../lib/log.js';
import type { Price } from '../pricing/prices.js';
import { COMPACTION_DEFAULTS } from '../dataset/defaults.js';
import type { SyncPlan } from './plan.js';
import { runSyncWorker, type BatchReport } from './worker.js';

export { planSync, type SyncPlan, type SyncRequest } from './plan.js';
export type { BatchReport } from './worker.js';

export interface SyncIO {
  log: Logger;
  signal: AbortSignal;
  prices: Record<string, Price>;
  /** How long superseded snapshots stay readable (default COMPACTION_DEFAULTS.graceMs). */
  graceMs?: number;
  onBatch: (report: BatchReport) => void;
}

export function runSync(plan: SyncPlan, io: SyncIO): Promise<void> {
  return runSyncWorker({ ...plan, prices: io.prices, log: io.log, signal: io.signal, graceMs: io.graceMs ?? COMPACTION_DEFAULTS.graceMs, onBatch: io.onBatch });
}
