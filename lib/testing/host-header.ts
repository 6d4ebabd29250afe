/** Requests with a Host header of the test's choosing (fetch always sends the URL's own): how a DNS-rebound page looks to a server. */
import { request } from 'node:http';

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
