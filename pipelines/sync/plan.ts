/**
 * A sync as the command asks for it, checked before the worker starts (spec/trajstore.md, sync
 * rules): the source a directory; `--to` and `--convert` local directories, distinct, and outside
 * the source (a mirror inside its source would be mirrored again); `--convert` a dataset of the
 * kind the input format makes, or nothing yet, or an empty directory, and synced from no other source
 * (state.ts); `--column` with compact-jsonl only.
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { sep } from 'node:path';
import { InvalidInputError, NotFoundError, pathError } from '../../lib/errors.js';
import { parseColumnFlags, type CompactSpec } from '../dataset/compact/paths.js';
import { readManifest } from '../dataset/layout.js';
import { canonicalPath } from '../dataset/recover.js';
import { LocalObjectStore } from '../dataset/store.js';
import type { InputFormat } from '../formats/registry.js';
import { claimDataset } from './state.js';

export interface SyncRequest {
  from: string;
  to: string;
  convert: string;
  inputFormat: InputFormat | 'auto' | 'compact-jsonl';
  columns: string[];
  intervalMs: number;
  once: boolean;
  /** How long a batch waits for another writer of the dataset, and the sync for another sync of the mirror. */
  lockTimeoutMs: number;
}

export interface SyncPlan {
  from: string;
  to: string;
  convert: string;
  inputFormat: SyncRequest['inputFormat'];
  columns: CompactSpec;
  intervalMs: number;
  once: boolean;
  lockTimeoutMs: number;
}

const within = (path: string, dir: string): boolean => path === dir || path.startsWith(dir.endsWith(sep) ? dir : `${dir}${sep}`);

/** A pin (`@name`) where sync wants a path would otherwise become a directory named `@name`. */
function refusePin(flag: string, value: string): void {
  if (value.startsWith('@')) throw new InvalidInputError(`${flag} ${value}: sync takes directory paths, not pins`, { hint: `give the directory itself (\`trajstore dataset show ${value}\` prints a pin's path), or ./${value} for a directory of that name` });
}

function localDirectory(flag: string, value: string): string {
  refusePin(flag, value);
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) throw new InvalidInputError(`${flag} ${value}: sync writes local directories only`);
  const path = canonicalPath(value);
  if (existsSync(path) && !statSync(path).isDirectory()) throw new InvalidInputError(`${flag} ${value}: not a directory`);
  return path;
}

export async function planSync(request: SyncRequest): Promise<SyncPlan> {
  refusePin('--from', request.from);
  if (!existsSync(request.from)) throw new NotFoundError(`--from ${request.from}: no such directory`);
  if (!statSync(request.from).isDirectory()) throw new InvalidInputError(`--from ${request.from}: not a directory`);
  // A source that cannot be listed at the start is refused; one that becomes so later is polled on (worker.ts).
  try {
    readdirSync(request.from);
  } catch (error) {
    throw pathError(error, `--from ${request.from}`);
  }
  const from = canonicalPath(request.from);
  const to = localDirectory('--to', request.to);
  const convert = localDirectory('--convert', request.convert);
  for (const [flag, path] of [['--to', to], ['--convert', convert]] as const) {
    if (within(path, from)) throw new InvalidInputError(`${flag} ${path}: inside the source directory ${from}; choose a directory outside it`);
    // The other way round, the source's files would be the mirror's: written over and deleted by it.
    if (within(from, path)) throw new InvalidInputError(`${flag} ${path}: holds the source directory ${from}; choose a directory outside it`);
  }
  if (within(to, convert) || within(convert, to)) throw new InvalidInputError(`--to ${to} and --convert ${convert}: must be separate directories`);
  const compact = request.inputFormat === 'compact-jsonl';
  if (!compact && request.columns.length > 0) throw new InvalidInputError('--column applies to --input-format compact-jsonl only');
  const kind = compact ? 'compact' : 'storyline';
  if (existsSync(convert)) {
    const manifest = await readManifest(new LocalObjectStore(convert)).catch(() => undefined);
    if (manifest && manifest.kind !== kind) throw new InvalidInputError(`--convert ${convert}: is a ${manifest.kind} dataset; this sync writes a ${kind} one`);
    if (!manifest && readdirSync(convert).length > 0) throw new InvalidInputError(`--convert ${convert}: exists and is not a trajstore dataset`);
    // Checked again by each batch, under the dataset's lock: two new syncs may race for it.
    if (manifest) claimDataset(convert, from, kind);
  }
  return { from, to, convert, inputFormat: request.inputFormat, columns: parseColumnFlags(request.columns), intervalMs: request.intervalMs, once: request.once, lockTimeoutMs: request.lockTimeoutMs };
}
