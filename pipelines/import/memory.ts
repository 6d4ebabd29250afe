/**
 * The memory an import plans for. A JSON document is decoded whole (a `.json` file, a JSONL line),
 * and in the heap it takes several times its text: the parsed value, the Storyline, its rows, and
 * the copy the storage thread receives. Both threads' heaps are capped (a capped heap is collected
 * early, which keeps the RSS of big imports small), and each cap leaves room for the largest
 * document the source can hold: no larger than its largest file, and never larger than
 * MAX_DOCUMENT_BYTES, beyond which a document is refused before it is read (exit 5). So no document
 * that is let in can exhaust a heap (V8 aborts the whole process when one large allocation does not
 * fit, instead of failing the thread).
 */
import { lstatSync, statSync } from 'node:fs';
import { walkFiles } from '../../lib/walk.js';
import { contentName } from '../formats/common/documents.js';
import { MAX_DOCUMENT_BYTES } from '../formats/lines.js';

const MB = 1024 * 1024;
const IMPORT_BASE_HEAP_MB = 128;
const STORAGE_BASE_HEAP_MB = 64;
/** Heap bytes per byte of the largest document, measured with single-value and many-value documents. */
const IMPORT_HEAP_FACTOR = 6;
const STORAGE_HEAP_FACTOR = 3;

/** The largest document a source may hold: its largest file, at most MAX_DOCUMENT_BYTES (stdin: that). */
export function largestDocumentBytes(from: string): number {
  if (from === '-') return MAX_DOCUMENT_BYTES;
  const stat = statSync(from, { throwIfNoEntry: false });
  if (!stat) return 0;
  // A compressed file's content can be any size: room for the largest document.
  const sizeOf = (path: string, bytes: number): number => (contentName(path) !== path ? MAX_DOCUMENT_BYTES : bytes);
  if (!stat.isDirectory()) return Math.min(sizeOf(from, stat.size), MAX_DOCUMENT_BYTES);
  let largest = 0;
  // The files the import reads: symbolic links are not followed (a link to `..` would loop), and a
  // directory that cannot be read holds none (the import names it when it comes to it).
  walkFiles(
    from,
    (relPath, entry, path) => {
      if (entry.isFile()) largest = Math.max(largest, sizeOf(relPath, lstatSync(path, { throwIfNoEntry: false })?.size ?? 0));
    },
    () => {},
  );
  return Math.min(largest, MAX_DOCUMENT_BYTES);
}

/** The heap cap of the import thread (decoding) for documents up to `documentBytes`. */
export const importHeapMb = (documentBytes: number): number => IMPORT_BASE_HEAP_MB + Math.ceil((documentBytes * IMPORT_HEAP_FACTOR) / MB);

/** The heap cap of the storage thread (Parquet and index), which receives a document's rows. */
export const storageHeapMb = (documentBytes: number): number => STORAGE_BASE_HEAP_MB + Math.ceil((documentBytes * STORAGE_HEAP_FACTOR) / MB);
