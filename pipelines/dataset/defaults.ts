/** Defaults of the dataset writers (named in --help, so kept apart from the writer code). */

export const WRITE_DEFAULTS = {
  /**
   * How long a writer waits for another one to finish with the same dataset before it gives up
   * (exit 4). Long enough for a queue of imports or a large one to pass; a holder that is killed
   * stops blocking at once (lock.ts), so this only bounds the wait for one that hangs.
   */
  lockTimeoutMs: 10 * 60_000,
} as const;
