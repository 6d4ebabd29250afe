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

/**
 * A file of a directory target: what it writes counts in `target.written`, it stays in `pending`
 * (for the target's abort) until committed or aborted, and its errors go through `named`.
 */
export function trackedFile(writer: ObjectWriter, target: Target, pending: Set<ObjectWriter>, named: (error: unknown) => unknown = (error) => error): ObjectWriter {
  pending.add(writer);
  return {
    write: (bytes) => {
      target.written += bytes.length;
      try {
        writer.write(bytes);
      } catch (error) {
        throw named(error);
      }
    },
    get size() {
      return writer.size;
    },
    commit: async () => {
      pending.delete(writer);
      try {
        await writer.commit();
      } catch (error) {
        throw named(error);
      }
    },
    abort: () => {
      pending.delete(writer);
      writer.abort();
    },
  };
}
