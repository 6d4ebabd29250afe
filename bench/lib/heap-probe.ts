/**
 * A preload (`node --expose-gc --import`) that, on SIGUSR2, collects garbage and writes the
 * process's `process.memoryUsage()` to $BENCH_HEAP_FILE as JSON: a resident server's live heap,
 * measured from outside without changing it.
 */
import { writeFileSync } from 'node:fs';

const heapFile = process.env.BENCH_HEAP_FILE;
if (heapFile) {
  process.on('SIGUSR2', () => {
    (globalThis as { gc?: () => void }).gc?.();
    writeFileSync(heapFile, JSON.stringify(process.memoryUsage()));
  });
}
