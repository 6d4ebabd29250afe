/** What `export -o` writes: every format that encodes, and compact record stores as they were imported. */
import { OUTPUT_FORMATS } from '../formats/registry.js';

export const EXPORT_FORMATS = [...OUTPUT_FORMATS, 'compact-jsonl'] as const;
export type ExportFormat = (typeof EXPORT_FORMATS)[number];
