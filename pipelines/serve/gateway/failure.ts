/** Refusals of the gateway, each answered with its HTTP status and error code. */

/**
 * A refusal the gateway answers with its own status and code. Told apart by these fields, not by
 * class: the modules that throw and the routes that answer may be loaded from separate bundles.
 */
export class GatewayFailure extends Error {
  readonly gatewayFailure = true;
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export function isGatewayFailure(error: unknown): error is GatewayFailure {
  return error instanceof Error && (error as Partial<GatewayFailure>).gatewayFailure === true;
}
