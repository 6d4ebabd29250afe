import { ownValue } from '../../lib/own-property.js';

/** Errors of actor calls; `code` survives the trip across nodes so callers can tell them apart. */
export type ActorErrorCode =
  | 'failed' // the method threw
  | 'no-method'
  | 'not-stream'
  | 'is-stream'
  | 'not-found' // no such actor / no Alive instance
  | 'stopped'
  | 'overloaded' // mailbox full, or the node holds as many call bodies as it may
  | 'cancelled'
  | 'timeout'
  | 'unreachable' // the peer could not be reached
  | 'bad-request'
  | 'too-large' // a call body over the limit
  | 'forbidden'; // a peer of another cluster, or without the certificate it needs

export class ActorError extends Error {
  constructor(
    readonly code: ActorErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'ActorError';
  }
}

/** Whether `error` is an ActorError, also one made by another copy of this module (each bundle holds its own). */
export function isActorError(error: unknown): error is ActorError {
  return error instanceof Error && error.name === 'ActorError' && typeof (error as ActorError).code === 'string';
}

/** HTTP status for each code, used by the transport server. */
export const STATUS_OF: Record<ActorErrorCode, number> = {
  failed: 500,
  'no-method': 404,
  'not-stream': 400,
  'is-stream': 400,
  'not-found': 404,
  stopped: 410,
  overloaded: 503,
  cancelled: 499,
  timeout: 504,
  unreachable: 502,
  'bad-request': 400,
  'too-large': 413,
  forbidden: 403,
};

/**
 * `value` (a code a peer sent, or one an actor made up) when it is one of ours, else `failed`:
 * `constructor` and other inherited keys of STATUS_OF are not codes, and must not turn a failed
 * call into a status of 0 or 200.
 */
export function knownCode(value: unknown): ActorErrorCode {
  return typeof value === 'string' && ownValue(STATUS_OF, value) !== undefined ? (value as ActorErrorCode) : 'failed';
}

/** The system errors of reaching a peer, in words (Node says `connect ECONNREFUSED 127.0.0.1:8099`). */
const REACH_ERRORS: Readonly<Record<string, string>> = {
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset',
  ETIMEDOUT: 'connection timed out',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  ENOTFOUND: 'host not found',
  EAI_AGAIN: 'host not found (the name lookup failed)',
  // nghttp2's answer to bytes that are not HTTP/2 (an HTTP/1.1 server, say), which Node words 'Protocol error'.
  ERR_HTTP2_ERROR: 'protocol error: it does not speak HTTP/2 as actor nodes do',
};

/**
 * Why a peer could not be reached, in words. A session that cannot connect cancels its streams,
 * whose error says so in Node's internal wording and carries the system error as its `cause`.
 */
export function reachFailure(error: Error): string {
  const root = error.cause instanceof Error ? error.cause : error;
  const code = (root as NodeJS.ErrnoException).code;
  return (code === undefined ? undefined : REACH_ERRORS[code]) ?? errorMessage(root);
}

/**
 * The text of anything thrown. Actors may throw anything (a symbol, an object whose `message` or
 * `toString` throws), and the message must still reach the caller instead of failing the node.
 */
export function errorMessage(error: unknown): string {
  try {
    return error instanceof Error ? String(error.message) : String(error);
  } catch {
    return `an error that cannot be shown as text (${typeof error})`;
  }
}
