/**
 * The import thread: runs the import pipeline (or the compact-record import) with its logs,
 * progress and abort bridged to the command's thread (client.ts).
 */
import { isMainThread, parentPort, workerData, type MessagePort } from 'node:worker_threads';
import { InterruptedError, ToolError, pathError } from '../../../lib/errors.js';
import { Logger, LOG_LEVELS } from '../../../lib/log.js';
import type { ProgressSink } from '../../../lib/progress.js';
import { runCompactImport } from '../compact.js';
import { runImport } from '../import.js';
import { IMPORT_THREAD_ROLE, type FromImportThread, type ImportThreadData, type ToImportThread } from './protocol.js';

/** Progress is batched: one message per 100 ms, not one per record. */
const PROGRESS_INTERVAL_MS = 100;

async function work(port: MessagePort, data: ImportThreadData): Promise<void> {
  const post = (message: FromImportThread): void => port.postMessage(message);
  const log = new Logger(data.logLevel, { write: () => true });
  for (const level of LOG_LEVELS) {
    log[level] = (message: string): void => {
      if (log.enabled(level)) post({ type: 'log', level, message });
    };
  }
  const controller = new AbortController();
  port.on('message', (message: ToImportThread) => {
    if (message.type === 'abort') controller.abort(new InterruptedError(message.signal));
  });
  let records = 0;
  let bytes = 0;
  const flushProgress = (): void => {
    if (records === 0 && bytes === 0) return;
    post({ type: 'progress', records, bytes });
    records = 0;
    bytes = 0;
  };
  const timer = setInterval(flushProgress, PROGRESS_INTERVAL_MS);
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
  } catch (thrown) {
    // An fs error's code does not cross to the command's thread: it is typed here (exit 2 for a path that cannot be used).
    const error = pathError(thrown);
    const typed = error instanceof ToolError ? error : undefined;
    post({
      type: 'error',
      exitCode: typed?.exitCode,
      message: error instanceof Error ? error.message : String(error),
      hint: typed?.hint,
      stack: error instanceof Error ? error.stack : undefined,
    });
  } finally {
    clearInterval(timer);
    port.close();
  }
}

if (!isMainThread && parentPort && (workerData as Partial<ImportThreadData> | undefined)?.role === IMPORT_THREAD_ROLE) {
  void work(parentPort, workerData as ImportThreadData);
}
