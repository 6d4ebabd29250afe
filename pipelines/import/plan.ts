/**
 * An import as a command asks for it: the source and destination arguments resolved (pins, the
 * default dataset), the format choices checked against what each supports, the source looked at,
 * then the work handed to the import thread. Planning first lets the command ask before a
 * `--mode replace` only when there is something to replace and the source is really there.
 */
import { existsSync } from 'node:fs';
import { InvalidInputError } from '../../lib/errors.js';
import type { WriteMode } from '../dataset/writer.js';
import { parseColumnFlags } from '../dataset/compact/paths.js';
import { readableRoot } from '../dataset/recover.js';
import type { InputFormat } from '../formats/registry.js';
import { loadConfig } from '../pins/config.js';
import { localPathOf, placeOf, resolveDataset, type ResolveContext } from '../pins/resolve.js';
import type { DuplicatePolicy, ErrorPolicy, ImportSummary } from './import.js';
import { largestDocumentBytes } from './memory.js';
import { statSource } from './sources.js';
import { runOnImportThread, type ImportIO } from './thread/client.js';
import type { ImportJob } from './thread/protocol.js';

export interface ImportRequest {
  /** `-`, a file or directory, or a pin (`@agentb-code`). */
  from: string;
  /** A DATASET argument: a path, a pin, or undefined for the default dataset. */
  to: string | undefined;
  inputFormat: InputFormat | 'compact-jsonl' | 'auto';
  /** Default: storyline, or compact-jsonl with `-i compact-jsonl`. */
  outputFormat: 'preserve' | 'storyline' | 'compact-jsonl' | undefined;
  mode: WriteMode;
  onDuplicate: DuplicatePolicy;
  /** `NAME=JSON_PATH` columns of a compact record store. */
  columns: string[];
  /** How long to wait for another writer of the destination (`--lock-timeout`). */
  lockTimeoutMs: number;
  /** `--on-error`: stop at the first bad file, or leave bad files out. */
  onError: ErrorPolicy;
}

export interface ImportPlan {
  job: ImportJob;
  /** The destination directory. */
  target: string;
  /** `--mode replace` of a destination that exists: what a confirmation is about. */
  replaces: boolean;
}

export async function planImport(rc: ResolveContext, request: ImportRequest): Promise<ImportPlan> {
  const from = request.from === '-' || !request.from.startsWith('@') ? request.from : localPathOf(await resolveDataset(request.from, { ...rc, purpose: 'read' }));
  const destination = await resolveDataset(request.to, { ...rc, purpose: 'write' });
  const remote = destination.kind === 's3' ? { place: placeOf(destination), env: rc.env } : undefined;
  const target = remote ? remote.place.uri : localPathOf(destination);
  const { inputFormat, mode } = request;
  const outputFormat = request.outputFormat ?? (inputFormat === 'compact-jsonl' ? 'compact-jsonl' : 'storyline');
  const compact = inputFormat === 'compact-jsonl' || outputFormat === 'compact-jsonl';
  if (compact) {
    if (inputFormat !== 'compact-jsonl' && inputFormat !== 'auto') {
      throw new InvalidInputError(`-i ${inputFormat} with -o compact-jsonl: compact-jsonl is a record store, not a trajectory conversion`, { hint: 'use -i compact-jsonl (or leave -i auto)' });
    }
    if (outputFormat !== 'compact-jsonl') throw new InvalidInputError(`-i compact-jsonl with -o ${outputFormat}: compact-jsonl is a record store, not a trajectory conversion`, { hint: 'use -o compact-jsonl' });
    if (from === '-') throw new InvalidInputError('-f -: compact-jsonl import does not read stdin', { hint: 'import a local file or directory' });
    if (mode === 'append') throw new InvalidInputError('--mode append: compact-jsonl import supports create and confirmed replace only');
    if (remote) throw new InvalidInputError(`-t ${destination.display}: compact-jsonl import writes local datasets only`, { hint: 'import it into a local directory' });
  } else if (request.columns.length > 0) {
    throw new InvalidInputError('--column applies to compact-jsonl imports only', { hint: 'add -i compact-jsonl or -o compact-jsonl' });
  }
  // A source that is not there fails now, before anything is asked or written.
  if (from !== '-') statSource(from);
  const { prices } = await loadConfig(rc.config, { env: rc.env });
  const { lockTimeoutMs, onError } = request;
  const largest = largestDocumentBytes(from);
  const job: ImportJob = compact
    ? { kind: 'compact', options: { from, to: target, mode, columns: parseColumnFlags(request.columns), lockTimeoutMs, onError, largestDocumentBytes: largest } }
    : {
        kind: 'storyline',
        options: {
          from,
          to: target,
          ...(remote ? { remote } : {}),
          inputFormat: inputFormat as InputFormat | 'auto',
          outputFormat: outputFormat as 'preserve' | 'storyline',
          mode,
          onDuplicate: request.onDuplicate,
          onError,
          prices,
          lockTimeoutMs,
          largestDocumentBytes: largest,
        },
      };
  // A replace killed part-way may have left the old dataset aside: it is what this one replaces, so asked about.
  // An existing object-store dataset is not replaced but refused (s3-writer.ts): nothing to confirm.
  return { job, target, replaces: mode === 'replace' && !remote && existsSync(readableRoot(target)) };
}

export function runImportPlan(plan: ImportPlan, io: ImportIO): Promise<ImportSummary> {
  return runOnImportThread(plan.job, io);
}
