/** Defaults of the dataset writers (named in --help, so kept apart from the writer code). */

export const WRITE_DEFAULTS = {
  /**
   * How long a writer waits for another one to finish with the same dataset before it gives up
   * (exit 4). Long enough for a queue of imports or a large one to pass; a holder that is killed
   * stops blocking at once (lock.ts), so this only bounds the wait for one that hangs.
   */
  lockTimeoutMs: 10 * 60_000,
} as const;

/** When sync's dataset is compacted, and how long what it supersedes stays readable (compaction.ts). */
export const COMPACTION_DEFAULTS = {
  /** A part below this size is small: sync batches write parts of a few KiB each. */
  smallPartBytes: 16 * 1024 * 1024,
  /** A relation is compacted once it has this many small parts in a row. */
  minSmallParts: 8,
  /** A part whose retired list grows past this many keys is rewritten whatever its size (the snapshot descriptor stays small). */
  maxRetiredKeys: 1000,
  /**
   * How long a superseded snapshot and its parts stay readable: longer than any read of a dataset
   * takes (an export of a large one runs minutes). `TRAJSTORE_RECLAIM_GRACE` (a duration) overrides it.
   */
  graceMs: 60 * 60_000,
} as const;
