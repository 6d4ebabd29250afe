/** Errors of actor calls; `code` survives the trip across nodes so callers can tell them apart. */
export type ActorErrorCode =
  | 'failed' // the method threw
  | 'no-method'
  | 'not-stream'
  | 'is-stream'
  | 'not-found' // no such actor / no Alive instance
  | 'stopped'
  | 'overloaded' // mailbox full
  | 'cancelled'
  | 'timeout'
  | 'unreachable' // the peer could not be reached
  | 'bad-request';

export class ActorError extends Error {
  constructor(
    readonly code: ActorErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'ActorError';
  }
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
};
