/**
 * Gateway memory benchmark:
 *
 *   node dist/bench/gateway/memory.js [--events N] [--traces N] [--batch N] [--rounds N] [--late N] [--keep]
 *
 * What a resident `serve --gateway` keeps as events arrive, against a real server process: each
 * round posts --events (default 200,000) more events over --traces (default 2,000) new traces in
 * batches of --batch (default 10) records, waits until every trace is projected (idle 1 s), and
 * records the server's RSS, its live heap after a collection (a preload answers SIGUSR2), and the
 * bytes of the gateway's state directory (`<dataset>/gateway`) and of its `settled.log`. Then --late
 * (default 0) rounds each post one late event to every trace so far, which projects and settles it
 * again (a line more in settled.log). Then the server is stopped and
 * started again over that state: the time until it listens, and its RSS and heap after the replay.
 * Prints a report (Markdown) to stdout; --keep leaves the scratch directory.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { positiveIntFlag } from '../lib/int-flag.js';
import { homeEnv } from '../lib/home-env.js';
import { startServeProcess, type ServeProcess } from '../lib/serve-process.js';

const perRound = positiveIntFlag('events', 200_000);
const traces = positiveIntFlag('traces', 2_000);
const batch = positiveIntFlag('batch', 10);
const rounds = positiveIntFlag('rounds', 2);
const lateRounds = positiveIntFlag('late', 0);
const keep = process.argv.includes('--keep');
const root = mkdtempSync(join(tmpdir(), 'bench-gateway-memory-'));
const dataset = join(root, 'ds');
const PROBE = pathToFileURL(join(dirname(fileURLToPath(import.meta.url)), '..', 'lib', 'heap-probe.js')).href;
const heapFile = join(root, 'heap.json');
const env = { ...homeEnv(root), NODE_OPTIONS: `--expose-gc --import=${PROBE}`, BENCH_HEAP_FILE: heapFile };
const args = ['serve', '--listen', '127.0.0.1:0', '--gateway', '127.0.0.1:0', '--gateway-dataset', dataset, '--gateway-split-idle', '1s'];

const MB = 1024 * 1024;
const mb = (bytes: number): string => (bytes / MB).toFixed(1);

function bytesUnder(path: string): number {
  if (!existsSync(path)) return 0;
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.size;
  return readdirSync(path).reduce((sum, name) => sum + bytesUnder(join(path, name)), 0);
}

/** RSS (from /proc) and the heap after a collection (the preload's answer to SIGUSR2). */
async function memoryOf(server: ServeProcess): Promise<{ rss: number; heap: number }> {
  const status = readFileSync(`/proc/${server.child.pid}/status`, 'utf8');
  const rss = Number(/^VmRSS:\s+(\d+) kB$/m.exec(status)?.[1]) * 1024;
  rmSync(heapFile, { force: true });
  server.child.kill('SIGUSR2');
  for (let i = 0; i < 200 && !existsSync(heapFile); i++) await new Promise((resolve) => setTimeout(resolve, 50));
  await new Promise((resolve) => setTimeout(resolve, 50));
  const heap = (JSON.parse(readFileSync(heapFile, 'utf8')) as { heapUsed: number }).heapUsed;
  return { rss, heap };
}

async function getJson(base: string, path: string): Promise<Record<string, any>> {
  const response = await fetch(new URL(path, base));
  return (await response.json()) as Record<string, any>;
}

const perTrace = Math.ceil(perRound / traces);
const payload = { text: 'x'.repeat(100) };

/** Posts `perRound` events over `traces` traces of round `round`, eight requests in flight. */
async function post(server: ServeProcess, round: number): Promise<void> {
  const jobs: Array<{ session: string; first: number; n: number }> = [];
  for (let first = 0; first < perTrace; first += batch) for (let t = 0; t < traces; t++) jobs.push({ session: `r${round}-t${t}`, first, n: Math.min(batch, perTrace - first) });
  await postJobs(server, jobs);
}

/** Posts late event `late` (of 1..--late) to every trace of the rounds. */
async function postLate(server: ServeProcess, late: number): Promise<void> {
  const jobs: Array<{ session: string; first: number; n: number }> = [];
  for (let round = 1; round <= rounds; round++) for (let t = 0; t < traces; t++) jobs.push({ session: `r${round}-t${t}`, first: perTrace + late - 1, n: 1 });
  await postJobs(server, jobs);
}

/** Posts records `first`.. of each job's session, eight requests in flight. */
async function postJobs(server: ServeProcess, jobs: Array<{ session: string; first: number; n: number }>): Promise<void> {
  const url = new URL('/v1/events', server.gatewayUrl).href;
  let next = 0;
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (next < jobs.length) {
        const { session, first, n } = jobs[next++]!;
        const records = Array.from({ length: n }, (_, i) => ({ seq: first + i, source: 'bench', kind: 'note', payload }));
        const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ agent_id: 'bench', session_id: session, records }) });
        await response.arrayBuffer();
        if (response.status !== 200) throw new Error(`${session}: status ${response.status}`);
      }
    }),
  );
}

/** Waits until every trace the gateway knows is projected. */
async function projected(server: ServeProcess): Promise<void> {
  for (;;) {
    const status = await getJson(server.url, '/api/gateway');
    const page = await getJson(server.url, '/api/gateway/traces?limit=1000');
    const behind = (page.traces as Array<{ events: number; projected_events: number }>).some((t) => t.projected_events < t.events);
    if (status.projection.pending === 0 && !behind) {
      // The list is newest first: every page is checked once the first one is done.
      let offset = 1000;
      let all = true;
      while (all && offset < page.total) {
        const more = await getJson(server.url, `/api/gateway/traces?limit=1000&offset=${offset}`);
        all = !(more.traces as Array<{ events: number; projected_events: number }>).some((t) => t.projected_events < t.events);
        offset += 1000;
      }
      if (all) return;
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

const rows: string[] = ['| after | events | RSS MB | heap MB | state MB | settled.log MB | posting s | then projecting s |', '|---|---:|---:|---:|---:|---:|---:|---:|'];
const since = (t: number): string => ((performance.now() - t) / 1000).toFixed(1);
const stateColumns = (): string => `${mb(bytesUnder(join(dataset, 'gateway')))} | ${mb(bytesUnder(join(dataset, 'gateway', 'events', 'settled.log')))}`;

/** Posts (`posting`), waits until every trace is projected, and adds a row `label` with the memory and state then. */
async function measured(server: ServeProcess, label: string, events: number, posting: () => Promise<void>): Promise<void> {
  const postingAt = performance.now();
  await posting();
  const posted = since(postingAt);
  const projectingAt = performance.now();
  await projected(server);
  const projectedAfter = since(projectingAt);
  // A turn for the work that follows a batch (compaction, the state files).
  await new Promise((resolve) => setTimeout(resolve, 3000));
  const m = await memoryOf(server);
  rows.push(`| ${label} | ${events} | ${mb(m.rss)} | ${mb(m.heap)} | ${stateColumns()} | ${posted} | ${projectedAfter} |`);
}

const allEvents = rounds * perRound + lateRounds * rounds * traces;
try {
  let server = await startServeProcess(args, { env, cwd: root });
  try {
    const base = await memoryOf(server);
    rows.push(`| start | 0 | ${mb(base.rss)} | ${mb(base.heap)} | ${stateColumns()} | | |`);
    for (let round = 1; round <= rounds; round++) await measured(server, `round ${round}`, round * perRound, () => post(server, round));
    for (let late = 1; late <= lateRounds; late++) await measured(server, `late event ${late}`, rounds * perRound + late * rounds * traces, () => postLate(server, late));
  } finally {
    await server.stop();
  }
  const started = performance.now();
  server = await startServeProcess(args, { env, cwd: root });
  const startMs = performance.now() - started;
  try {
    const m = await memoryOf(server);
    rows.push(`| restart (listening after ${(startMs / 1000).toFixed(2)} s) | ${allEvents} | ${mb(m.rss)} | ${mb(m.heap)} | ${stateColumns()} | | |`);
  } finally {
    await server.stop();
  }
  console.log(`# Gateway memory (${perRound} events a round over ${traces} traces, batches of ${batch}${lateRounds ? `; then ${lateRounds} late event(s) to each trace` : ''})\n\n${rows.join('\n')}`);
} finally {
  if (keep) console.error(`kept ${root}`);
  else rmSync(root, { recursive: true, force: true });
}
