/**
 * Runs an import on a worker thread (worker.ts) whose V8 heap is capped. An import allocates quickly and keeps
 * little, and V8 lets an uncapped heap grow lazily towards gigabytes before collecting; with the cap
 * the peak RSS of a 1 GB import stays under 300 MB (issue 3). The cap leaves room for the largest
 * document of the source (memory.ts).
 *
 * The worker reads stdin through `worker.stdin` (piped from the command's stdin), sends its log
 * lines and progress to this thread, and is told to stop when the command's signal aborts.
 */
import { setFlagsFromString } from 'node:v8';
import type { Readable } from 'node:stream';
import { Worker } from 'node:worker_threads';
import { InterruptedError, ResourceLimitError, ToolError } from '../../../lib/errors.js';
import { distPath } from '../../../lib/install.js';
import type { Logger } from '../../../lib/log.js';
import type { ProgressFactory } from '../../../lib/progress.js';
import type { ImportSummary } from '../import.js';
import { importHeapMb } from '../memory.js';
import { IMPORT_THREAD_ROLE, type FromImportThread, type ImportJob, type ImportThreadData, type ToImportThread } from './protocol.js';

const WORKER = distPath('pipelines', 'import', 'thread', 'worker.js');
const INITIAL_OLD_SPACE_MB = 96;

export interface ImportIO {
  stdin: Readable;
  log: Logger;
  signal: AbortSignal;
  progress?: ProgressFactory;
}

export function runOnImportThread(job: ImportJob, io: ImportIO): Promise<ImportSummary> {
  const heapMb = importHeapMb(job.options.largestDocumentBytes);
  const usesStdin = job.options.from === '-';
  // V8 sizes a new heap's first collection limit from what survives, and an import keeps little, so
  // with the default the import thread ran a full collection for nearly every batch (about 200 per
  // 200 MB, a third of its CPU time). Isolates read this flag when they are created (only the import
  // and storage threads are created after it here; neither can exceed its resourceLimits cap), and a
  // larger starting limit cuts those collections tenfold for a few MB of peak RSS (measured).
  setFlagsFromString(`--initial-old-space-size=${Math.min(heapMb, INITIAL_OLD_SPACE_MB)}`);
  const data: ImportThreadData = { role: IMPORT_THREAD_ROLE, job, logLevel: io.log.level };
  const worker = new Worker(WORKER, {
    workerData: data,
    stdin: usesStdin,
    resourceLimits: { maxOldGenerationSizeMb: heapMb, maxYoungGenerationSizeMb: 16 },
  });
  if (usesStdin && worker.stdin) io.stdin.pipe(worker.stdin);
  const stop = (): void => worker.postMessage({ type: 'abort', signal: io.signal.reason instanceof InterruptedError ? io.signal.reason.signal : 'SIGINT' } satisfies ToImportThread);
  const progress = io.progress?.({ label: 'import', unit: job.kind === 'compact' ? 'records' : 'runs' });
  io.signal.addEventListener('abort', stop, { once: true });
  return new Promise<ImportSummary>((resolve, reject) => {
    let settled = false;
    const finish = (error: unknown, summary?: ImportSummary): void => {
      if (settled) return;
      settled = true;
      progress?.done();
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
    worker.on('message', (message: FromImportThread) => {
      switch (message.type) {
        case 'log':
          io.log[message.level](message.message);
          break;
        case 'progress':
          progress?.add(message.records, message.bytes);
          break;
        case 'done':
          finish(undefined, message.summary);
          break;
        case 'error': {
          const error =
            message.exitCode === undefined
              ? Object.assign(new Error(message.message), { stack: message.stack })
              : new ToolError(message.exitCode, message.message, message.hint === undefined ? {} : { hint: message.hint });
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
