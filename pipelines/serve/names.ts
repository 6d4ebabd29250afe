/** Mount names with a meaning to `serve` (kept apart from the server, so the command line loads no fastify to check them). */

/** The mount a single bare DATASET gets, and the one `--control` needs. */
export const DEFAULT_SERVE_MOUNT = 'default';

/** Names the server keeps for itself: `catalog` is the directory service's (and a subcommand's). */
export const RESERVED_SERVE_NAMES: ReadonlySet<string> = new Set(['catalog']);

/** The mount of the gateway's dataset (`--gateway-dataset`), beside the positional mounts. */
export const GATEWAY_MOUNT = 'gateway';
