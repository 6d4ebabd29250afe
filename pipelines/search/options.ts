/**
 * Option values shared by the read commands (find, query, stats, list): counts, byte sizes,
 * durations, and opening the DATASET argument.
 */
import type { CommandContext } from '../../cli/kit/program.js';
import { InvalidInputError } from '../../cli/kit/errors.js';
import { single } from '../../cli/kit/flags.js';
import { openDataset, type OpenDataset } from '../dataset/open.js';
import { resolveDataset } from '../pins/resolve.js';

export function positiveInt(value: unknown, flag: string, fallback: number): number {
  const text = single(value, flag);
  if (text === undefined) return fallback;
  if (!/^\d+$/.test(text) || Number(text) < 1 || !Number.isSafeInteger(Number(text))) {
    throw new InvalidInputError(`invalid ${flag} ${JSON.stringify(text)}: expected a whole number of at least 1`);
  }
  return Number(text);
}

const SIZE_UNITS: Readonly<Record<string, number>> = { '': 1, b: 1, k: 1024, kb: 1024, kib: 1024, m: 1024 ** 2, mb: 1024 ** 2, mib: 1024 ** 2, g: 1024 ** 3, gb: 1024 ** 3, gib: 1024 ** 3 };

/** A byte count: `4096`, `64k`, `8MiB` (units are powers of 1024). */
export function byteSize(value: unknown, flag: string, fallback: number): number {
  const text = single(value, flag);
  if (text === undefined) return fallback;
  const m = /^(\d+(?:\.\d+)?)\s*([a-z]*)$/i.exec(text.trim());
  const unit = m ? SIZE_UNITS[(m[2] ?? '').toLowerCase()] : undefined;
  const bytes = m && unit ? Math.floor(Number(m[1]) * unit) : NaN;
  if (!Number.isSafeInteger(bytes) || bytes < 1) {
    throw new InvalidInputError(`invalid ${flag} ${JSON.stringify(text)}: expected a size such as 4096, 64KiB or 8MiB`);
  }
  return bytes;
}

const DURATION_UNITS: Readonly<Record<string, number>> = { ms: 1, s: 1000, '': 1000, m: 60_000, min: 60_000, h: 3_600_000 };

/** A duration in milliseconds: `30` (seconds), `30s`, `500ms`, `2m`. */
export function duration(value: unknown, flag: string, fallbackMs: number): number {
  const text = single(value, flag);
  if (text === undefined) return fallbackMs;
  const m = /^(\d+(?:\.\d+)?)\s*([a-z]*)$/i.exec(text.trim());
  const unit = m ? DURATION_UNITS[(m[2] ?? '').toLowerCase()] : undefined;
  const ms = m && unit ? Math.round(Number(m[1]) * unit) : NaN;
  if (!Number.isFinite(ms) || ms < 1 || ms > 24 * 3_600_000) {
    throw new InvalidInputError(`invalid ${flag} ${JSON.stringify(text)}: expected a duration such as 30s, 500ms or 2m (at most 24h)`);
  }
  return ms;
}

/** Resolves a DATASET argument (pin, path, default) and opens it for reading. */
export async function openDatasetArg(ctx: CommandContext, arg: string | undefined): Promise<OpenDataset> {
  const location = await resolveDataset(arg, { config: ctx.config, env: process.env, purpose: 'read' });
  return openDataset(location, process.env);
}
