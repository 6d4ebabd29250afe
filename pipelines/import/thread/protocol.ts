/** Messages between an import and the thread it runs on (client.ts, worker.ts). */
import type { ExitCode, StopSignal } from '../../../lib/errors.js';
import type { LogLevel } from '../../../lib/log.js';
import type { CompactImportOptions } from '../compact.js';
import type { ImportOptions, ImportSummary } from '../import.js';

/** `workerData` of an import thread; `role` tells the thread's module what it was started for. */
export interface ImportThreadData {
  role: typeof IMPORT_THREAD_ROLE;
  job: ImportJob;
  logLevel: LogLevel;
}

export const IMPORT_THREAD_ROLE = 'trajstore-import';

export type ImportJob =
  | { kind: 'storyline'; options: Omit<ImportOptions, 'stdin' | 'log' | 'signal' | 'progress'> }
  | { kind: 'compact'; options: Omit<CompactImportOptions, 'log' | 'signal' | 'progress'> };

export type ToImportThread = { type: 'abort'; signal: StopSignal };

export type FromImportThread =
  | { type: 'log'; level: LogLevel; message: string }
  | { type: 'progress'; records: number; bytes: number }
  | { type: 'done'; summary: ImportSummary }
  | { type: 'error'; exitCode: ExitCode | undefined; message: string; hint: string | undefined; stack: string | undefined };
