/** Defaults of the gateway named in --help (kept apart from its code, so the command line loads none of it). */

/** How long a trace stays idle before it is projected into the dataset, unless `--gateway-split-idle` says otherwise. */
export const DEFAULT_SPLIT_IDLE_MS = 30 * 60_000;
