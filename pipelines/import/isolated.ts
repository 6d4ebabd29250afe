/**
 * Runs an import on a worker thread whose V8 heap is capped. An import allocates quickly and keeps
 * little, and V8 lets an uncapped heap grow lazily towards gigabytes before collecting; with the cap
 * the peak RSS of a 1 GB import stays under 300 MB (issue 3). The cap leaves room for the largest
 * whole-file document of the source (a `.json` file is parsed in one piece).
 *
 * The worker reads stdin through `worker.stdin` (piped from the command's stdin), sends its log
 * lines and progress to this thread, and is told to stop when the command's signal aborts.
 */
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import type { Readable } from 'node:stream';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { CliError, ExitCode, ResourceLimitError, type ExitCode as Code } from '../../cli/kit/errors.js';
import { Logger, type LogLevel } from '../../cli/kit/log.js';
import { runCompactImport, type CompactImportOptions } from '../dataset/compact/import.js';
import { runImport, type ImportOptions, type ImportSummary, type ProgressSink } from './import.js';

const ROLE = 'trajstore-import';
const BASE_HEAP_MB = 128;
const MAX_HEAP_MB = 4096;
const INITIAL_OLD_SPACE_MB = 96;

export type ImportJob =
  | { kind: 'storyline'; options: Omit<ImportOptions, 'stdin' | 'log' | 'signal' | 'progress'> }
  | { kind: 'compact'; options: Omit<CompactImportOptions, 'log' | 'signal' | 'progress'> };

export interface ImportIO {
  stdin: Readable;
  log: Logger;
  signal: AbortSignal;
  progress?: ProgressSink;
}

type FromWorker =
  | { type: 'log'; level: LogLevel; message: string }
  | { type: 'progress'; records: number; bytes: number }
  | { type: 'done'; summary: ImportSummary }
  | { type: 'error'; exitCode: Code | undefined; message: string; hint: string | undefined; stack: string | undefined };

/** The heap cap: the base, plus room for the largest whole-file (`.json`) document of the source. */
function heapMbFor(from: string): number {
  // A parsed JSON document takes several times its text; stdin gets room for one of about 40 MB
  // (JSONL is read line by line and needs only the base).
  if (from === '-') return BASE_HEAP_MB + 256;
  const stat = statSync(from, { throwIfNoEntry: false });
  const paths = stat?.isDirectory() ? (readdirSync(from, { recursive: true }) as string[]).map((p) => join(from, p)) : [from];
  let largest = 0;
  for (const path of paths) {
    if (!/\.json$/i.test(path)) continue;
    const size = statSync(path, { throwIfNoEntry: false })?.size ?? 0;
    largest = Math.max(largest, size);
  }
  return Math.min(MAX_HEAP_MB, BASE_HEAP_MB + Math.ceil((largest * 6) / (1024 * 1024)));
}

export function runImportIsolated(job: ImportJob, io: ImportIO): Promise<ImportSummary> {
  const heapMb = heapMbFor(job.options.from);
  const usesStdin = job.options.from === '-';
  // V8 sizes a new heap's first collection limit from what survives, and an import keeps little, so
  // with the default the import thread ran a full collection for nearly every batch (about 200 per
  // 200 MB, a third of its CPU time). Isolates read this flag when they are created (only the import
  // and storage threads are created after it here; neither can exceed its resourceLimits cap), and a
  // larger starting limit cuts those collections tenfold for a few MB of peak RSS (measured).
  setFlagsFromString(`--initial-old-space-size=${Math.min(heapMb, INITIAL_OLD_SPACE_MB)}`);
  const worker = new Worker(new URL(import.meta.url), {
    workerData: { role: ROLE, job, logLevel: io.log.level },
    stdin: usesStdin,
    resourceLimits: { maxOldGenerationSizeMb: heapMb, maxYoungGenerationSizeMb: 16 },
  });
  if (usesStdin && worker.stdin) io.stdin.pipe(worker.stdin);
  const stop = (): void => worker.postMessage({ type: 'abort' });
  io.signal.addEventListener('abort', stop, { once: true });
  return new Promise<ImportSummary>((resolve, reject) => {
    let settled = false;
    const finish = (error: unknown, summary?: ImportSummary): void => {
      if (settled) return;
      settled = true;
      io.signal.removeEventListener('abort', stop);
      if (usesStdin) {
        // Stop reading stdin: an import that failed early must not wait for the writer to close it.
        io.stdin.unpipe();
        io.stdin.destroy();
      }
      void worker.terminate();
      if (summary) resolve(summary);
      else reject(error);
    };
    worker.on('message', (message: FromWorker) => {
      switch (message.type) {
        case 'log':
          io.log[message.level](message.message);
          break;
        case 'progress':
          io.progress?.add(message.records, message.bytes);
          break;
        case 'done':
          finish(undefined, message.summary);
          break;
        case 'error': {
          const error =
            message.exitCode === undefined
              ? Object.assign(new Error(message.message), { stack: message.stack })
              : new CliError(message.exitCode, message.message, message.hint === undefined ? {} : { hint: message.hint });
          finish(error);
          break;
        }
      }
    });
    worker.on('error', (error: Error & { code?: string }) => {
      if (error.code === 'ERR_WORKER_OUT_OF_MEMORY') {
        finish(new ResourceLimitError(`import ran out of memory (heap limit ${heapMb} MB)`, { hint: 'a single source document is too large; split it, or store it as JSONL' }));
      } else finish(error);
    });
    worker.on('exit', (code) => finish(new Error(`import thread exited (${code}) without a result`)));
  });
}

/** The worker side: the same pipeline, with logs, progress and the abort signal bridged to the command. */
async function workerMain(port: NonNullable<typeof parentPort>, data: { job: ImportJob; logLevel: LogLevel }): Promise<void> {
  const post = (message: FromWorker): void => port.postMessage(message);
  const log = new Logger(data.logLevel, { write: () => true });
  for (const level of ['error', 'warn', 'info', 'debug'] as const) {
    log[level] = (message: string): void => {
      if (log.enabled(level)) post({ type: 'log', level, message });
    };
  }
  const controller = new AbortController();
  port.on('message', (message: { type: string }) => {
    if (message.type === 'abort') controller.abort(new CliError(ExitCode.Unavailable, 'interrupted'));
  });
  let records = 0;
  let bytes = 0;
  const flushProgress = (): void => {
    if (records === 0 && bytes === 0) return;
    post({ type: 'progress', records, bytes });
    records = 0;
    bytes = 0;
  };
  const timer = setInterval(flushProgress, 100);
  const progress: ProgressSink = {
    add: (r, b = 0) => {
      records += r;
      bytes += b;
    },
  };
  try {
    const summary =
      data.job.kind === 'storyline'
        ? await runImport({ ...data.job.options, stdin: process.stdin, log, signal: controller.signal, progress })
        : await runCompactImport({ ...data.job.options, log, signal: controller.signal, progress });
    flushProgress();
    post({ type: 'done', summary });
  } catch (error) {
    const cli = error instanceof CliError ? error : undefined;
    post({
      type: 'error',
      exitCode: cli?.exitCode,
      message: error instanceof Error ? error.message : String(error),
      hint: cli?.hint,
      stack: error instanceof Error ? error.stack : undefined,
    });
  } finally {
    clearInterval(timer);
    port.close();
  }
}

if (!isMainThread && parentPort && (workerData as { role?: string } | undefined)?.role === ROLE) {
  void workerMain(parentPort, workerData as { job: ImportJob; logLevel: LogLevel });
}
