/**
 * `--on-error skip`: a file goes in whole or not at all. Its rows are held until the file is
 * through; a file whose rows outgrow the hold is read twice, the first time only to check it, so
 * memory stays bounded. A file that fails is left out, with its reason, and the import goes on.
 */
import { ExitCode, ToolError } from '../../lib/errors.js';
import type { Logger } from '../../lib/log.js';
import type { Row } from '../dataset/parquet.js';
import type { Relation } from '../dataset/relations.js';

/** Where a file's rows go: the dataset writer, a hold, or nowhere (a pass that only checks). */
export interface RowSink {
  add(relation: Relation, rows: readonly Row[]): Promise<void>;
}

/** A file that `--on-error skip` left out, and why. */
export interface SkippedFile {
  source_path: string;
  reason: string;
  exit_code: number;
}

/** The rows of a file are held up to this much text; a bigger file is read twice. */
const HELD_FILE_BYTES = 16 * 1024 * 1024;

class TooBigToHold extends Error {}

class HoldingSink implements RowSink {
  readonly held: Array<{ relation: Relation; rows: readonly Row[] }> = [];
  private bytes = 0;

  async add(relation: Relation, rows: readonly Row[]): Promise<void> {
    for (const row of rows) for (const key in row) this.bytes += cellBytes(row[key]);
    if (this.bytes > HELD_FILE_BYTES) throw new TooBigToHold();
    this.held.push({ relation, rows });
  }
}

const cellBytes = (value: unknown): number => (typeof value === 'string' || value instanceof Uint8Array ? value.length : 8);

const DISCARD: RowSink = { add: async () => {} };

/**
 * Runs `importFile` so that the writer gets all of the file's rows or none: `counting` is false
 * for the checking pass (no progress, no diagnostics); `onTooBig` hears that the file is read
 * twice. Returns what the counted pass returned.
 */
export async function allOrNothing<R>(importFile: (sink: RowSink, counting: boolean) => Promise<R>, writer: RowSink, onTooBig: () => void): Promise<R> {
  const hold = new HoldingSink();
  try {
    const result = await importFile(hold, true);
    for (const { relation, rows } of hold.held) await writer.add(relation, rows);
    return result;
  } catch (error) {
    if (!(error instanceof TooBigToHold)) throw error;
  }
  onTooBig();
  await importFile(DISCARD, false);
  return importFile(writer, true);
}

/**
 * Whether an error is about the file itself (exit 2 or 5, or it could not be read), so that the
 * file may be left out. A signal, a writer's failure or a bug stops the import.
 */
export function isFileError(error: unknown): error is Error {
  if (error instanceof ToolError) return error.exitCode === ExitCode.InvalidInput || error.exitCode === ExitCode.ResourceLimit;
  return ['ENOENT', 'EACCES', 'EPERM', 'EISDIR', 'ELOOP', 'EIO'].includes(String((error as { code?: unknown } | undefined)?.code));
}

/** Records a skipped file and says so on stderr. */
export function skippedFile(relPath: string, error: Error, log: Logger): SkippedFile {
  const reason = error.message.startsWith(relPath) ? error.message : `${relPath}: ${error.message}`;
  // One line for each file: the logger escapes a line break in its name (or reason).
  log.warn(`skipped ${reason}`);
  return { source_path: relPath, reason, exit_code: error instanceof ToolError ? error.exitCode : ExitCode.InvalidInput };
}

/** When every file was skipped: the import failed as its first file did. */
export function nothingImported(skipped: readonly SkippedFile[]): ToolError {
  const first = skipped[0] as SkippedFile;
  return new ToolError(first.exit_code as ExitCode, `no file imported: all ${skipped.length} files were skipped (the first: ${first.reason})`);
}
