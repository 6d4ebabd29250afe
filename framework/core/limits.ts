/**
 * What clients may make a node hold (connections, streams, bytes of call bodies, time), with the
 * defaults and `-D limits.*` setting names. Constants and types only: the command line shows them
 * without loading the listener.
 */

/** The node's limits on what clients may make it hold. */
export interface ServerLimits {
  /** Largest body of one call (a request stream, or one record of a call channel). */
  maxCallBytes: number;
  /** Bytes of unanswered call bodies one connection may hold. */
  maxConnectionBytes: number;
  /** Bytes of unanswered call bodies all connections together may hold. */
  maxNodeBytes: number;
  /** Concurrent HTTP/2 streams per connection (SETTINGS_MAX_CONCURRENT_STREAMS), and stream calls per call channel. */
  maxStreams: number;
  /** Open connections; more are closed as they arrive. */
  maxConnections: number;
  /** A request body must arrive whole within this time. */
  bodyTimeoutMs: number;
  /**
   * Streams a connection's peer may reset (RST_STREAM) per second, with ten seconds' worth as a
   * burst; past that the connection is closed (nghttp2's guard against rapid-reset floods). An
   * external client on the per-message routes resets every call it gives up on (calls between
   * nodes ride the call channel and cancel with a record); nghttp2's own 33/s would close a busy
   * client's connection.
   */
  maxResetsPerSecond: number;
}

/** The burst of stream resets a connection may make at once, in seconds of maxResetsPerSecond. */
export const RESET_BURST_SECONDS = 10;

export const DEFAULT_LIMITS: ServerLimits = {
  maxCallBytes: 4 * 1024 * 1024,
  maxConnectionBytes: 16 * 1024 * 1024,
  maxNodeBytes: 64 * 1024 * 1024,
  maxStreams: 128,
  maxConnections: 512,
  bodyTimeoutMs: 30_000,
  maxResetsPerSecond: 1_000,
};

/** `-D limits.<name>` settings (`[limits]` keys of the configuration file) by limit: `maxCallBytes` is `limits.max_call_bytes`. */
export const LIMIT_SETTING_KEYS: ReadonlyMap<string, keyof ServerLimits> = new Map(
  (Object.keys(DEFAULT_LIMITS) as Array<keyof ServerLimits>).map((k) => [`limits.${k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)}`, k]),
);
