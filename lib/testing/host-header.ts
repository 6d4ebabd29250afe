/** Requests with a Host header of the test's choosing (fetch always sends the URL's own): how a DNS-rebound page looks to a server; and requests shaped by hand. */
import { request } from 'node:http';
import { connect } from 'node:net';

export interface HostAnswer {
  status: number;
  body: any;
}

/** Sends `method url` with `Host: host` (and a JSON body when given, and `extra` headers); the status and the parsed answer. */
export function requestWithHost(url: string, host: string, method = 'GET', body?: unknown, extra: Record<string, string> = {}): Promise<HostAnswer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { ...extra, host, ...(body === undefined ? {} : { 'content-type': 'application/json' }) };
    const req = request(url, { method, headers }, (res) => {
      let text = '';
      res.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text === '' ? undefined : JSON.parse(text) }));
    });
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

/**
 * Sends `head` (a request's text up to its blank line, CRLFs included) and `body` over a fresh
 * connection to 127.0.0.1:`port`, as no HTTP client would shape them (a target in absolute form,
 * two Host headers, a percent-encoded path); the status and the text of the answer (its head and
 * body as they came), read until the server closes the connection (ask it to, with `Connection: close`).
 * With `halfClose`, the connection is half-closed once the request is sent (as `nc -N` does). The
 * status is the final answer's, past interim 1xx ones.
 */
export function rawRequest(port: number, head: string, body = '', options: { halfClose?: boolean } = {}): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => (options.halfClose ? socket.end(head + body) : socket.write(head + body)));
    let text = '';
    socket.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
    socket.on('error', reject);
    socket.on('close', () => resolve({ status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(finalAnswer(text).head)?.[1] ?? 0), text }));
  });
}

/** The final answer of a raw exchange, past any interim 1xx ones (whose status lines are `interim`): its head and body. */
export function finalAnswer(text: string): { interim: string[]; head: string; body: string } {
  const interim: string[] = [];
  let rest = text;
  for (let m = /^HTTP\/1\.1 1\d\d [^\r]*\r\n\r\n/.exec(rest); m; m = /^HTTP\/1\.1 1\d\d [^\r]*\r\n\r\n/.exec(rest)) {
    interim.push(m[0].split('\r\n')[0]!);
    rest = rest.slice(m[0].length);
  }
  const end = rest.indexOf('\r\n\r\n');
  return end < 0 ? { interim, head: rest, body: '' } : { interim, head: rest.slice(0, end), body: rest.slice(end + 4) };
}
