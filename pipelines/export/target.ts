/** Where exported bytes go (export.ts: stdout, a file, a directory; s3-target.ts: an object store). */
import type { ObjectWriter } from '../dataset/store.js';

export interface Target {
  /** Appends to the JSONL stream (stdout or a file). */
  append(bytes: Buffer | string): Promise<void>;
  /** Writes one whole file of a directory target at a relative path. */
  file(relPath: string, bytes: Buffer | string): Promise<void>;
  /** A file of a directory target written piece by piece (raw source files). */
  openFile(relPath: string): ObjectWriter;
  readonly isDirectory: boolean;
  commit(): Promise<void>;
  abort(): void;
  written: number;
}
