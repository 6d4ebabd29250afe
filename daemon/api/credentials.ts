/**
 * What a request without a usable lifecycle key is told. The OpenSandbox SDKs send the key they
 * are given (`api_key`, `$OPEN_SANDBOX_API_KEY`) as OPEN-SANDBOX-API-KEY, which this daemon does
 * not read (its key header is SVC-API-KEY, and that header is stripped before the guest): a client
 * that sent it learns why its key was not taken and how to send it.
 */
import type { IncomingHttpHeaders } from 'node:http';

/** The header the SDKs send their key in (lower case, as Node has header names). */
export const SDK_KEY_HEADER = 'open-sandbox-api-key';

/** `message`, and when the request carries the SDKs' own key header, how to send the key instead. */
export function keyMissing(message: string, headers: IncomingHttpHeaders): string {
  if (headers[SDK_KEY_HEADER] === undefined) return message;
  return `${message}; this request has OPEN-SANDBOX-API-KEY, which is not read here: send the key as SVC-API-KEY (the SDKs' ConnectionConfig headers)`;
}
