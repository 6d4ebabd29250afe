/**
 * Gateway benchmark:
 *
 *   node dist/bench/gateway/run.js [--seconds N] [--clients N] [--calls N] [--ttft-ms N] [--itl-ms N] [--tokens N] [--keep]
 *
 * Measures, in one run, against `trajstore serve` processes started as a user starts them:
 * - event gateway: accepted events per second with durable acknowledgement (every 200 means the
 *   events were fsynced), batches of 1 and of 256 records, by a closed loop of one client and of
 *   --clients (default 16) for --seconds (default 5) each; each client sends its own session with
 *   increasing seqs. Latency of an acknowledgement p50/p99;
 * - capture gateway: the latency it adds to a streamed chat completion: --calls (default 100)
 *   streamed completions of --tokens (default 32) tokens from the project's synthetic
 *   chat-completions server (framework/test/helpers/synthetic-server.ts, its own process; first
 *   token after --ttft-ms, default 20, then one every --itl-ms, default 2), taking turns between
 *   calling it directly and through the gateway (capture level dialogue); time to the first content
 *   byte and to the end, p50/p99 each, and the ratio gateway/direct.
 * Prints a report (Markdown) to stdout; --keep leaves the scratch directory.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { closedLoop, type LoopResult } from '../lib/closed-loop.js';
import { positiveIntFlag } from '../lib/int-flag.js';
import { percentile } from '../lib/percentile.js';
import { homeEnv } from '../lib/home-env.js';
import { startServeProcess } from '../lib/serve-process.js';
import { DIST } from '../lib/tools.js';

const seconds = positiveIntFlag('seconds', 5);
const clients = positiveIntFlag('clients', 16);
const calls = positiveIntFlag('calls', 100);
const ttftMs = positiveIntFlag('ttft-ms', 20);
const itlMs = positiveIntFlag('itl-ms', 2);
const tokens = positiveIntFlag('tokens', 32);
const keep = process.argv.includes('--keep');
const root = mkdtempSync(join(tmpdir(), 'bench-gateway-'));
const env = homeEnv(root);

async function events(): Promise<string[]> {
  const server = await startServeProcess(['serve', '--listen', '127.0.0.1:0', '--gateway', '127.0.0.1:0', '--gateway-dataset', join(root, 'events'), '--gateway-split-idle', '1h'], { env, cwd: root });
  const url = new URL('/v1/events', server.gatewayUrl).href;
  const rows: string[] = [];
  try {
    let session = 0;
    const run = async (batch: number, inFlight: number): Promise<LoopResult> => {
      const loops = Array.from({ length: inFlight }, () => ({ session: `bench-${session++}`, seq: 0 }));
      let turn = 0;
      const payload = { text: 'x'.repeat(200) };
      return closedLoop(
        inFlight,
        async () => {
          const loop = loops[turn++ % inFlight] as { session: string; seq: number };
          const records = Array.from({ length: batch }, () => ({ seq: loop.seq++, source: 'bench', kind: 'note', payload }));
          const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ agent_id: 'bench', session_id: loop.session, records }) });
          await response.arrayBuffer();
          if (response.status !== 200) throw new Error(`status ${response.status}`);
        },
        seconds,
      );
    };
    for (const [batch, inFlight] of [
      [1, 1],
      [1, clients],
      [256, 1],
      [256, clients],
    ] as const) {
      const r = await run(batch, inFlight);
      rows.push(`| ${batch} | ${inFlight} | ${Math.round(r.perSecond * batch).toLocaleString('en')} | ${Math.round(r.perSecond).toLocaleString('en')} | ${r.p50Ms.toFixed(1)} | ${r.p99Ms.toFixed(1)} |`);
    }
  } finally {
    await server.stop();
  }
  return rows;
}

/** The synthetic upstream as its own process, so that its CPU is not the client's. */
async function startUpstream(): Promise<{ url: string; stop: () => void }> {
  const child = spawn(process.execPath, [join(DIST, 'framework', 'test', 'helpers', 'synthetic-server.js'), JSON.stringify({ ttftMs, itlMs })], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString();
      const m = /listening (\d+)/.exec(out);
      if (m) resolve(m[1] as string);
    });
    child.once('exit', (code) => reject(new Error(`the synthetic server exited (${code})`)));
  });
  return { url: `http://127.0.0.1:${port}`, stop: () => child.kill('SIGTERM') };
}

/** One streamed completion: ms to the first content byte and to the end. */
async function streamed(base: string): Promise<{ ttft: number; total: number }> {
  const started = performance.now();
  const response = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer client-key', 'x-trajstore-session-id': 'bench' },
    body: JSON.stringify({ model: 'synthetic', stream: true, max_tokens: tokens, messages: [{ role: 'user', content: 'the the the' }] }),
  });
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let ttft = NaN;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (Number.isNaN(ttft) && decoder.decode(value, { stream: true }).includes('"content"')) ttft = performance.now() - started;
  }
  return { ttft, total: performance.now() - started };
}

async function capture(): Promise<string[]> {
  const upstream = await startUpstream();
  const config = join(root, 'capture.toml');
  writeFileSync(config, `listen = "127.0.0.1:0"\nadmin_listen = "127.0.0.1:0"\ncapture_level = "dialogue"\n\n[[models]]\nname = "*"\nupstream = "${upstream.url}/v1"\napi_key_env = "BENCH_ROUTE_KEY"\n`);
  const server = await startServeProcess(['serve', '--listen', '127.0.0.1:0', '--gateway-config', config, '--gateway-dataset', join(root, 'captured'), '--gateway-split-idle', '1h'], { env: { ...env, BENCH_ROUTE_KEY: 'route-key' }, cwd: root });
  const gateway = (server.captureUrl as string).replace(/\/$/, '');
  const direct: Array<{ ttft: number; total: number }> = [];
  const through: Array<{ ttft: number; total: number }> = [];
  try {
    // Warm both paths (connections, compiled code), then take turns.
    for (let i = 0; i < 5; i++) {
      await streamed(upstream.url);
      await streamed(gateway);
    }
    for (let i = 0; i < calls; i++) {
      direct.push(await streamed(upstream.url));
      through.push(await streamed(gateway));
    }
  } finally {
    await server.stop();
    upstream.stop();
  }
  const row = (what: string, pick: (s: { ttft: number; total: number }) => number): string => {
    const d50 = percentile(direct.map(pick), 50);
    const g50 = percentile(through.map(pick), 50);
    const d99 = percentile(direct.map(pick), 99);
    const g99 = percentile(through.map(pick), 99);
    return `| ${what} | ${d50.toFixed(1)} | ${g50.toFixed(1)} | ${(g50 / d50).toFixed(2)}x (+${(g50 - d50).toFixed(1)} ms) | ${d99.toFixed(1)} | ${g99.toFixed(1)} | ${(g99 / d99).toFixed(2)}x |`;
  };
  return [row('time to first token', (s) => s.ttft), row('total', (s) => s.total)];
}

try {
  const eventRows = await events();
  const captureRows = await capture();
  const out = [
    `# gateway benchmark (${availableParallelism()} cores, load average ${loadavg()[0]?.toFixed(1)} at the end)`,
    '',
    `## event gateway: accepted events/s with durable acknowledgement (${seconds} s each, closed loop)`,
    '',
    '| records per batch | clients | events/s | requests/s | p50 ms | p99 ms |',
    '|---|---|---|---|---|---|',
    ...eventRows,
    '',
    `## capture gateway: a streamed completion (${tokens} tokens, first after ${ttftMs} ms, then every ${itlMs} ms), ${calls} calls each way, in turns`,
    '',
    '| | direct p50 ms | gateway p50 ms | gateway/direct p50 | direct p99 ms | gateway p99 ms | gateway/direct p99 |',
    '|---|---|---|---|---|---|---|',
    ...captureRows,
    '',
  ];
  process.stdout.write(`${out.join('\n')}\n`);
} finally {
  if (keep) process.stderr.write(`kept ${root}\n`);
  else rmSync(root, { recursive: true, force: true });
}
