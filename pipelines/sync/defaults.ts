/** Defaults of the sync worker (named in --help, so kept apart from its code). */
export const SYNC_DEFAULTS = {
  /** Between scans of the source tree. */
  intervalMs: 5_000,
  /** The first retry of a failed batch waits this long, and each next one twice as long... */
  retryFirstMs: 1_000,
  /** ...up to this. */
  retryMaxMs: 60_000,
} as const;
