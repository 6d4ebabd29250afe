/**
 * A call to another node, as its client sees it: the body it sends and the reply it decodes (a
 * value, or the ActorError the callee answered with), shared by the call channel (channel.ts) and
 * clients that call from outside a cluster (`actorctl call`); and, for those clients, a streamed
 * reply on the call's own HTTP/2 stream, read frame by frame.
 */
import http2 from 'node:http2';
import { FLAG_END, FLAG_ERROR, FrameDecoder, frameValue, toJson } from './codec.js';
import { ActorError, knownCode, reachFailure } from './errors.js';
import { MAX_REPLY_BYTES, readBody, type Transport } from './transport.js';

const { NGHTTP2_CANCEL } = http2.constants;
/** How long a stream may stay open after its END frame before it is reset. */
const END_GRACE_MS = 1_000;

/** The body of a call to another node; arguments JSON cannot carry are the caller's bad request. */
export function callJson(method: string, args: unknown[]): string {
  return toJson({ method, args }, `the arguments of ${method}`, 'bad-request');
}

/**
 * The body of a call whose arguments are JSON text already (of an array: the caller checks it),
 * in pieces around that text, which is sent as it is: a large document given as text is neither
 * parsed, encoded nor copied again to go out.
 */
export function callBodyOf(method: string, argsJson: Buffer): Buffer[] {
  return [Buffer.from(`{"method":${JSON.stringify(method)},"args":`), argsJson, Buffer.from('}')];
}

/**
 * Turns a call reply into its value or the ActorError it carries. The reply comes from a peer: a
 * body that is not `{result}` or `{error: {code, message}}` with string fields is a failure naming
 * what came, never a TypeError later in whoever reads the error.
 */
export function decodeReply(status: number, body: Buffer, addr: string): unknown {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    throw new ActorError('failed', `${addr} answered ${status} with a body that is not JSON`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new ActorError('failed', `${addr} answered ${status} with ${jsonKind(parsed)} where a JSON object belongs`);
  const reply = parsed as { result?: unknown; error?: unknown };
  if (status === 200) return reply.result;
  if (status === 202) return undefined;
  if (reply.error === undefined) throw new ActorError('failed', `${addr} answered ${status}`);
  const error = reply.error as { code?: unknown; message?: unknown } | null;
  const optionalString = (value: unknown): boolean => value === undefined || typeof value === 'string';
  if (typeof error !== 'object' || error === null || !optionalString(error.message) || !optionalString(error.code)) {
    throw new ActorError('failed', `${addr} answered ${status} with a malformed error (not {code, message} strings)`);
  }
  throw new ActorError(knownCode(error.code), (error.message as string | undefined) ?? `${addr} answered ${status}`);
}

/** What a JSON value is, in words. */
function jsonKind(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  return `a ${typeof value}`;
}

/**
 * The items of a streamed reply from `addr` (`POST path` with `x-message-mode: stream`). The
 * timeout bounds the wait for the reply to start, not the length of the stream; `signal`, or
 * leaving the loop, resets the stream.
 */
export async function* remoteStream(transport: Transport, addr: string, path: string, body: Buffer | string | readonly Buffer[], timeoutMs: number, signal: AbortSignal | undefined): AsyncGenerator<unknown> {
  const request = transport.open(addr, path, { headers: { 'x-message-mode': 'stream' }, body });
  const cancel = (): void => {
    if (!request.closed) request.close(NGHTTP2_CANCEL);
  };
  signal?.addEventListener('abort', cancel, { once: true });
  let timer = setTimeout(cancel, timeoutMs);
  try {
    const headers = await new Promise<http2.IncomingHttpHeaders>((resolve, reject) => {
      const closed = (): void => reject(new ActorError(signal?.aborted ? 'cancelled' : 'unreachable', `${addr}: stream closed before a reply`));
      const failed = (e: Error): void => reject(new ActorError('unreachable', `${addr}: ${reachFailure(e)}`));
      // Once the reply has begun, its end is the loop's to read: no error is built for every stream that closes.
      request.once('response', (h) => {
        request.off('close', closed);
        request.off('error', failed);
        resolve(h);
      });
      request.once('close', closed);
      request.once('error', failed);
    });
    clearTimeout(timer);
    const status = Number(headers[':status']);
    if (status !== 200 || headers['x-response-type'] !== 'stream') {
      decodeReply(status, await readBody(request, { maxBytes: MAX_REPLY_BYTES, limitName: 'largest reply' }), addr);
      throw new ActorError('failed', `${addr} did not answer with a stream`);
    }
    const decoder = new FrameDecoder();
    let ended = false;
    try {
      for await (const chunk of request as AsyncIterable<Buffer>) {
        if (ended) throw new ActorError('failed', `${addr} sent data after the END frame of a stream`);
        for (const frame of decoder.push(chunk)) {
          if (ended) throw new ActorError('failed', `${addr} sent a frame after the END frame of a stream`);
          if (frame.flags & FLAG_ERROR) throw new ActorError('failed', frame.error ?? 'stream failed');
          if (frame.flags & FLAG_END) ended = true;
          else yield frameValue(frame);
        }
        // The callee ends the HTTP/2 stream with its END frame: reading on takes that end, so the
        // stream closes cleanly. Leaving the loop here would reset it instead, and a server takes
        // ~1,000 resets (then 33/s) before it closes the whole session (nghttp2's rapid-reset guard).
        if (ended) timer = setTimeout(cancel, END_GRACE_MS);
      }
    } catch (error) {
      // After the END frame only a stream that never closed (reset after the grace) lands here.
      if (!ended || error instanceof ActorError) throw error;
    }
    if (ended) return;
    throw new ActorError(signal?.aborted ? 'cancelled' : 'unreachable', `${addr}: stream ended without an END frame`);
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', cancel);
    cancel();
  }
}
