/** Default limits of `find` and `query` (named in --help, so kept apart from the search code). */

export const FIND_DEFAULTS = {
  maxResults: 100,
  maxPreviewBytes: 4096,
  maxTotalBytes: 8 * 1024 * 1024,
  timeoutMs: 30_000,
} as const;

export const QUERY_DEFAULTS = {
  maxOutputRows: 10_000,
  maxOutputBytes: 64 * 1024 * 1024,
  timeoutMs: 30_000,
} as const;

/** The mount name of a dataset given without a name. */
export const DEFAULT_MOUNT = 'dataset';
