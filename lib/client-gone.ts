/**
 * Telling a client that left from one that only half-closed.
 *
 * A client may half-close its connection once its request is sent (`shutdown(SHUT_WR)`: `nc -N`,
 * some curl uses, a Node socket's `end()`) and still wait for its answer. Node's HTTP server takes
 * that FIN for a client that left and ends the connection, so an answer that is not ready at once
 * is lost; `answerHalfClosedClients` keeps the connection open for it.
 *
 * But a client that closes its connection outright sends the same FIN: the two look alike until the
 * server writes to the connection, which the one that left answers with a reset. So while an answer
 * is being made for a client that half-closed, `clientGone` writes an interim `102 Processing` to it
 * every HALF_CLOSED_PROBE_MS (an HTTP/1.1 client reads and passes over 1xx answers it did not ask
 * for); the write after a reset fails, the connection closes, and the work is cancelled. An HTTP/1.0
 * client takes no interim answer: its work runs to its end (its own time limit) and the answer is sent.
 *
 * A FIN that comes once the answer has begun is a client closing its connection (Python's clients
 * do on a cancel: a plain close(), no reset), not one that half-closed after its request and waits:
 * that FIN comes with the request. It cancels at once: only a write would tell otherwise, and a quiet
 * stream (a command that prints nothing for minutes) may write nothing for long.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyInstance, FastifyReply } from 'fastify';

/** How often a half-closed client is written an interim answer: one that left is told in about this long. */
export const HALF_CLOSED_PROBE_MS = 200;

/** Keeps answering clients that half-close their connection after their request (an own property of http.Server, not among its options). */
export function answerHalfClosedClients(app: FastifyInstance): void {
  (app.server as { httpAllowHalfOpen?: boolean }).httpAllowHalfOpen = true;
}

/**
 * Aborts when the client of `reply` leaves before its answer is sent: its connection closes, or it
 * had half-closed it and no longer takes what is written to it. For work worth stopping when no one waits.
 */
export function clientGone(reply: FastifyReply): AbortSignal {
  return clientGoneFrom(reply.request.raw, reply.raw);
}

/** `clientGone` for a request answered outside fastify (sandboxd's data-plane proxy). */
export function clientGoneFrom(request: IncomingMessage, answer: ServerResponse): AbortSignal {
  const controller = new AbortController();
  const socket = answer.socket;
  const interim = request.httpVersionMajor === 1 && request.httpVersionMinor >= 1;
  let probe: NodeJS.Timeout | undefined;
  const write = (): void => {
    // Once the answer has begun, a 1xx would land inside it.
    if (answer.headersSent || answer.writableEnded) stop();
    else answer.writeProcessing();
  };
  const probing = (): void => {
    if (answer.headersSent && !answer.writableEnded) return controller.abort();
    write();
    probe ??= setInterval(write, HALF_CLOSED_PROBE_MS);
  };
  const stop = (): void => {
    clearInterval(probe);
    socket?.off('end', probing);
  };
  // Gone already: its 'close' has passed.
  if (answer.closed) {
    if (!answer.writableFinished) controller.abort();
    return controller.signal;
  }
  answer.once('close', () => {
    stop();
    if (!answer.writableFinished) controller.abort();
  });
  if (interim && socket && !socket.destroyed) {
    if (socket.readableEnded) probing();
    else socket.once('end', probing);
  }
  return controller.signal;
}
