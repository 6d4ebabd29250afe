/**
 * A chat-completions server with programmed timing, for the load generator's tests and its
 * self-benchmark: the first token after `ttftMs`, then one token every `itlMs`, each token the
 * word "the" (one token in every supported encoding), and deterministic faults by request
 * number so that tests know exactly how many of each error to expect.
 *
 * In-process: `startSyntheticServer(config)`. As a process (for benchmarks, so that its CPU is
 * not the client's): `node dist/framework/test/helpers/synthetic-server.js '<config JSON>'` prints
 * `listening <port>` and serves until killed; `GET /stats` then returns how many replies it
 * completed and the sums of their actual first- and last-token times.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';

export type Fault =
  /** An error response; with `echo`, its message repeats the Authorization header, as some servers do. */
  | { every: number; status: number; echo?: boolean }
  /** Destroys the socket after the first token. */
  | { every: number; kind: 'reset' }
  /** Sends an event that is not JSON after the first token. */
  | { every: number; kind: 'malformed' }
  /** Sends the first token, then nothing, never ending the response. */
  | { every: number; kind: 'stall' };

export interface SyntheticConfig {
  ttftMs: number;
  itlMs: number;
  /** Tokens per reply; by default the request's max_tokens. */
  outputTokens?: number;
  /** Request n (1-based, in arrival order) gets the first fault whose `every` divides n. */
  faults?: Fault[];
}

export interface SyntheticServer {
  url: string;
  /** performance.now() at each request's arrival (body read), in arrival order. */
  arrivals: number[];
  /**
   * What the server actually did for each completed reply, in ms after the request arrived: on a
   * busy machine its timers fire late, and this is the timing the client should have seen.
   */
  served: Array<{ firstMs: number; lastMs: number }>;
  /** Authorization headers received, to check how the API key travels. */
  authorizations: Set<string>;
  close(): Promise<void>;
}

interface ChatBody {
  max_tokens?: number;
  stream?: boolean;
  stream_options?: { include_usage?: boolean };
  messages?: Array<{ content?: string }>;
}

const ID = 'chatcmpl-synthetic';

function chunk(delta: object, finish: string | null): string {
  return `data: {"id":"${ID}","object":"chat.completion.chunk","model":"synthetic","choices":[{"index":0,"delta":${JSON.stringify(delta)},"finish_reason":${finish === null ? 'null' : `"${finish}"`}}]}\n\n`;
}

/** Runs `step(i)` at start + offset(i) on an absolute timeline, so timer lateness never accumulates. */
function schedule(start: number, offset: (i: number) => number, steps: number, step: (i: number) => boolean | void): void {
  let i = 0;
  const next = (): void => {
    if (i >= steps) return;
    const wait = start + offset(i) - performance.now();
    setTimeout(() => {
      if (step(i++) === false) return;
      next();
    }, Math.max(0, wait));
  };
  next();
}

type Served = SyntheticServer['served'];

function handle(config: SyntheticConfig, n: number, body: ChatBody, req: IncomingMessage, res: ServerResponse, arrived: number, served: Served): void {
  const fault = config.faults?.find((f) => n % f.every === 0);
  if (fault && 'status' in fault) {
    res.writeHead(fault.status, { 'content-type': 'application/json' });
    const echo = fault.echo ? ` (credential ${req.headers.authorization})` : '';
    res.end(JSON.stringify({ error: { message: `programmed failure of request ${n}${echo}`, code: fault.status } }));
    return;
  }
  const tokens = config.outputTokens ?? body.max_tokens ?? 16;
  const promptTokens = (body.messages ?? []).reduce((sum, m) => sum + String(m.content ?? '').split(' ').length, 0);
  const usage = { prompt_tokens: promptTokens, completion_tokens: tokens, total_tokens: promptTokens + tokens };
  const offset = (i: number): number => config.ttftMs + i * config.itlMs;
  if (!body.stream) {
    setTimeout(
      () => {
        res.writeHead(200, { 'content-type': 'application/json' });
        const content = Array.from({ length: tokens }, () => 'the').join(' ');
        res.end(JSON.stringify({ id: ID, object: 'chat.completion', model: 'synthetic', choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'length' }], usage }));
        const at = performance.now() - arrived;
        served.push({ firstMs: at, lastMs: at });
      },
      Math.max(0, arrived + offset(tokens - 1) - performance.now()),
    );
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.write(': synthetic\n\n');
  let firstMs = 0;
  schedule(arrived, offset, tokens, (i) => {
    if (res.destroyed) return false;
    if (i === 1 && fault) {
      if (fault.kind === 'reset') {
        req.socket.destroy();
        return false;
      }
      if (fault.kind === 'malformed') {
        res.end('data: {"choices": [\n\n');
        return false;
      }
      if (fault.kind === 'stall') return false;
    }
    const last = i === tokens - 1;
    res.write(chunk({ ...(i === 0 ? { role: 'assistant' } : {}), content: i === 0 ? 'the' : ' the' }, last ? 'length' : null));
    if (i === 0) firstMs = performance.now() - arrived;
    if (last) {
      served.push({ firstMs, lastMs: performance.now() - arrived });
      if (body.stream_options?.include_usage) res.write(`data: {"id":"${ID}","object":"chat.completion.chunk","choices":[],"usage":${JSON.stringify(usage)}}\n\n`);
      res.end('data: [DONE]\n\n');
    }
    return true;
  });
}

export function startSyntheticServer(config: SyntheticConfig, port = 0): Promise<SyntheticServer> {
  const arrivals: number[] = [];
  const served: Served = [];
  const authorizations = new Set<string>();
  const server: Server = createServer({ keepAliveTimeout: 60_000, requestTimeout: 0 }, (req, res) => {
    if (req.method === 'GET' && req.url === '/stats') {
      // For a benchmark driving this server from another process: what the server actually did.
      const sum = (pick: (r: Served[number]) => number): number => served.reduce((total, r) => total + pick(r), 0);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ served: served.length, first_ms_sum: sum((r) => r.firstMs), last_ms_sum: sum((r) => r.lastMs) }));
      return;
    }
    const parts: Buffer[] = [];
    req.on('data', (part: Buffer) => parts.push(part));
    req.on('end', () => {
      const arrived = performance.now();
      arrivals.push(arrived);
      if (req.headers.authorization) authorizations.add(req.headers.authorization);
      let body: ChatBody;
      try {
        body = JSON.parse(Buffer.concat(parts).toString('utf8')) as ChatBody;
      } catch {
        res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":{"message":"body is not JSON"}}');
        return;
      }
      handle(config, arrivals.length, body, req, res, arrived, served);
    });
  });
  return new Promise((resolve) => {
    server.listen(port, '127.0.0.1', () => {
      const { port: bound } = server.address() as AddressInfo;
      resolve({
        url: `http://127.0.0.1:${bound}`,
        arrivals,
        served,
        authorizations,
        close: () =>
          new Promise<void>((done) => {
            server.closeAllConnections();
            server.close(() => done());
          }),
      });
    });
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const server = await startSyntheticServer(JSON.parse(process.argv[2] ?? '{"ttftMs":0,"itlMs":0}') as SyntheticConfig);
  process.stdout.write(`listening ${new URL(server.url).port}\n`);
}
