/** A lifecycle failure with its HTTP status and protocol error code; the API renders it as `{code, message}`. */
export class LifecycleError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'LifecycleError';
  }
}

export const invalid = (message: string): LifecycleError => new LifecycleError(400, 'INVALID_REQUEST', message);
export const notSupported = (message: string): LifecycleError => new LifecycleError(501, 'NOT_SUPPORTED', message);
export const notFound = (id: string): LifecycleError => new LifecycleError(404, 'SANDBOX_NOT_FOUND', `sandbox ${id} not found`);
export const expired = (id: string): LifecycleError => new LifecycleError(409, 'SANDBOX_EXPIRED', `sandbox ${id} has expired`);
export const badState = (id: string, state: string, wanted: string): LifecycleError =>
  new LifecycleError(409, 'INVALID_SANDBOX_STATE', `sandbox ${id} is ${state}; ${wanted}`);
export const unavailable = (message: string): LifecycleError => new LifecycleError(503, 'RUNTIME_UNAVAILABLE', message);
/** `what` could not be done for want of a file descriptor (EMFILE, ENFILE): a passing shortage, retried by the caller. */
export const outOfDescriptors = (what: string): LifecycleError =>
  new LifecycleError(503, 'RUNTIME_UNAVAILABLE', `${what}: the daemon is at its open-file limit right now; retry`);

/** A write of the state directory failed for want of space (ENOSPC, EDQUOT): durable writes are all or nothing, so nothing changed. */
export function isOutOfSpace(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | null | undefined)?.code;
  return code === 'ENOSPC' || code === 'EDQUOT';
}

/** `what` was refused because the state directory's file system is full; it can be retried once space is freed. */
export const outOfSpace = (what: string): LifecycleError =>
  new LifecycleError(507, 'INSUFFICIENT_STORAGE', `${what}: no space left in the state directory's file system; free space there and retry`);
