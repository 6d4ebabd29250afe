/**
 * sandboxd benchmark, on the test supervisor (real daemon, real guest services as host
 * processes), each figure beside a baseline measured in the same run:
 *
 *   node dist/bench/sandboxd/run.js [--creates 20] [--list 1000] [--size-mb 1024] [--streams 100]
 *
 * - create: POST /v1/sandboxes to its 202 (Running, services ready) versus starting the same
 *   supervisor and guest through the runtime alone (no API, registry or admission): what the
 *   daemon adds, p50/p99;
 * - list: all N sandboxes, 200 a page, versus GET of one sandbox;
 * - download: a file of --size-mb through the data-plane proxy versus the same execution service
 *   over the sandbox's vsock socket directly (throughput ratio), with the daemon's peak RSS;
 * - streams: --streams concurrent streamed commands through the proxy versus directly.
 */
import { randomUUID } from 'node:crypto';
import { closeSync, ftruncateSync, mkdirSync, openSync, readFileSync, rmSync } from 'node:fs';
import { request, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { Logger } from '../../lib/log.js';
import { NativeRuntime } from '../../daemon/runtime/native.js';
import { connectGuestPort } from '../../daemon/runtime/vsock.js';
import { Registry } from '../../daemon/store/registry.js';
import type { SandboxRecord } from '../../daemon/store/record.js';
import { cgroup2Mount, makeFixture, type Fixture } from '../../daemon/test/supervisor/fixture.js';
import { testSupervisorLauncher } from '../../daemon/test/supervisor/launcher.js';
import { api, startDaemonProcess as startFixtureDaemon, stopDaemonProcess as stopFixtureDaemon, type DaemonProcess } from '../../daemon/test/supervisor/process.js';
import { positiveIntFlag as flag } from '../lib/int-flag.js';
import { percentile } from '../lib/percentile.js';

const creates = flag('creates', 20);
const listSize = flag('list', 1000);
const sizeMb = flag('size-mb', 1024);
const streams = flag('streams', 100);
const BODY = { image: { uri: 'test' }, entrypoint: ['sleep', 'infinity'], resourceLimits: { cpu: '100m', memory: '64Mi' } };

const mount = cgroup2Mount();
if ('skip' in mount) {
  console.error(`sandboxd bench: ${mount.skip}`);
  process.exit(6);
}
const fixture: Fixture = makeFixture(mount.path, new Logger('error'));

type Daemon = DaemonProcess;
/** Daemons still running: a benchmark that fails part-way must not leave them behind. */
const running = new Set<Daemon>();
const startDaemonProcess = async (overrides: Record<string, unknown> = {}): Promise<Daemon> => {
  const d = await startFixtureDaemon(fixture, overrides);
  running.add(d);
  return d;
};
const stopDaemon = async (d: Daemon): Promise<void> => {
  running.delete(d);
  await stopFixtureDaemon(d);
};

const ms = (start: bigint): number => Number(process.hrtime.bigint() - start) / 1e6;
const fmt = (n: number, digits = 1): string => n.toFixed(digits);

/** Baseline: the runtime alone starts the same supervisor and guest, with no API, registry or admission. */
async function directStart(runtime: NativeRuntime): Promise<number> {
  const record: SandboxRecord = {
    id: `sb-${randomUUID()}`, state: 'Pending', lastTransitionAt: '', createdAt: '', image: 'test', entrypoint: ['sleep', 'infinity'],
    env: {}, metadata: {}, cpuMillis: 100, memoryBytes: 64 << 20, token: 't', execdToken: 'e'.repeat(64), egressToken: 'g'.repeat(64),
  };
  const image = JSON.parse(readFileSync(join(fixture.imagesDir, 'test.json'), 'utf8'));
  const start = process.hrtime.bigint();
  record.cgroup = runtime.prepare(record);
  await runtime.start(record, image);
  const took = ms(start);
  await runtime.destroy(record);
  return took;
}

async function benchCreate(d: Daemon): Promise<void> {
  const runtime = new NativeRuntime(join(fixture.root, 'direct'), fixture.cgroupRoot, testSupervisorLauncher);
  const viaApi: number[] = [];
  const direct: number[] = [];
  for (let i = 0; i < creates; i++) {
    direct.push(await directStart(runtime));
    const start = process.hrtime.bigint();
    const created = await api(d, 'POST', '/v1/sandboxes', BODY);
    viaApi.push(ms(start));
    if (created.status !== 202) throw new Error(`create: ${created.status} ${JSON.stringify(created.json)}`);
    await api(d, 'DELETE', `/v1/sandboxes/${created.json.id}`);
  }
  // What the daemon adds: each create through the API less the runtime-alone start measured just before it.
  const added = viaApi.map((took, i) => took - direct[i]!);
  console.log(`create (${creates}x): via the daemon p50 ${fmt(percentile(viaApi, 50))} ms p99 ${fmt(percentile(viaApi, 99))} ms; runtime alone p50 ${fmt(percentile(direct, 50))} ms p99 ${fmt(percentile(direct, 99))} ms; added by the daemon (pairwise) p50 ${fmt(percentile(added, 50))} ms p99 ${fmt(percentile(added, 99))} ms`);
}

async function benchList(): Promise<void> {
  // Records written straight into a registry the daemon then opens: 1000 real sandboxes would be
  // 3000 guest processes on a 2-core machine, and listing reads only the registry anyway.
  const state = join(fixture.root, 'l');
  mkdirSync(state, { mode: 0o700 });
  const registry = Registry.open(state);
  const now = Date.now();
  for (let i = 0; i < listSize; i++) {
    const at = new Date(now - i * 1000).toISOString();
    registry.put({ id: `sb-${randomUUID()}`, state: 'Failed', lastTransitionAt: at, createdAt: at, image: 'test', entrypoint: ['sleep', 'infinity'], env: {}, metadata: { team: `t${i % 10}` }, cpuMillis: 1, memoryBytes: 1, token: 't', execdToken: 'e', egressToken: 'g' });
  }
  const d = await startDaemonProcess({ state, maxSandboxes: listSize + 1 });
  const one = registry.all()[0]!.id;
  const rounds = 20;
  const full: number[] = [];
  const single: number[] = [];
  for (let r = 0; r < rounds; r++) {
    let start = process.hrtime.bigint();
    let seen = 0;
    for (let page = 1; ; page++) {
      const got = await api(d, 'GET', `/v1/sandboxes?pageSize=200&page=${page}`);
      seen += got.json.items.length;
      if (!got.json.pagination.hasNextPage) break;
    }
    full.push(ms(start));
    if (seen !== listSize) throw new Error(`listed ${seen} of ${listSize}`);
    start = process.hrtime.bigint();
    await api(d, 'GET', `/v1/sandboxes/${one}`);
    single.push(ms(start));
  }
  const filtered = process.hrtime.bigint();
  const got = await api(d, 'GET', `/v1/sandboxes?pageSize=200&state=failed&metadata=${encodeURIComponent('team=t3')}`);
  const filteredMs = ms(filtered);
  console.log(`list ${listSize} (5 pages of 200, ${rounds} rounds): p50 ${fmt(percentile(full, 50))} ms p99 ${fmt(percentile(full, 99))} ms; GET of one sandbox p50 ${fmt(percentile(single, 50))} ms (ratio ${fmt(percentile(full, 50) / percentile(single, 50))}x); filtered by state and metadata: ${got.json.pagination.totalItems} items in ${fmt(filteredMs)} ms`);
  await stopDaemon(d);
}

/** An HTTP exchange over a socket made by `connect` (the daemon's listener, or the vsock socket). */
function exchange(connect: () => Promise<Socket> | undefined, url: string, method: string, headers: Record<string, string>, body?: string): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const socketPromise = connect();
    const req = request(url, {
      method,
      headers,
      ...(socketPromise
        ? { createConnection: (_o: unknown, cb: (e: Error | null, s?: Socket) => void) => void socketPromise.then((s) => cb(null, s.resume()), (e: Error) => cb(e)) }
        : {}),
    } as never, resolve);
    req.on('error', reject);
    req.end(body);
  });
}

async function drain(res: IncomingMessage): Promise<number> {
  let n = 0;
  for await (const chunk of res) n += (chunk as Buffer).length;
  return n;
}

async function peakRssKiB(pid: number): Promise<number> {
  return Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN);
}

async function benchDataPlane(d: Daemon): Promise<void> {
  const created = await api(d, 'POST', '/v1/sandboxes', BODY);
  const id = created.json.id as string;
  const endpoint = (await api(d, 'GET', `/v1/sandboxes/${id}/endpoints/44772`)).json;
  const headers = endpoint.headers as Record<string, string>;
  const vsock = join(fixture.state, 'run', id, 'vsock.sock');
  const viaProxy = (path: string) => `${d.url}/v1/sandboxes/${id}/proxy/44772${path}`;
  const direct = () => connectGuestPort(vsock, 44772);

  // A sparse file: the guest service reads it at memory speed, so the transport is what is timed.
  const file = join(fixture.root, 'big.bin');
  const fd = openSync(file, 'w');
  ftruncateSync(fd, sizeMb * 1024 * 1024);
  closeSync(fd);
  const path = `/files/download?path=${encodeURIComponent(file)}`;
  const rssBefore = await peakRssKiB(d.child.pid!);
  const timed = async (label: string, go: () => Promise<IncomingMessage>): Promise<number> => {
    const start = process.hrtime.bigint();
    const res = await go();
    const bytes = await drain(res).catch((error: Error) => {
      throw new Error(`${label} download: ${error.message} after ${fmt(ms(start))} ms`);
    });
    if (res.statusCode !== 200 || bytes !== sizeMb * 1024 * 1024) throw new Error(`download: ${res.statusCode}, ${bytes} bytes`);
    return (bytes / 1024 / 1024) / (ms(start) / 1000);
  };
  // Alternated, best of two each: the first transfer of a run also warms up the guest service.
  const directRuns: number[] = [];
  const proxiedRuns: number[] = [];
  for (let round = 0; round < 2; round++) {
    directRuns.push(await timed('direct', () => exchange(direct, `http://sandbox${path}`, 'GET', headers)));
    proxiedRuns.push(await timed('proxied', () => exchange(() => undefined, viaProxy(path), 'GET', headers)));
  }
  const directMBs = Math.max(...directRuns);
  const proxiedMBs = Math.max(...proxiedRuns);
  const rssAfter = await peakRssKiB(d.child.pid!);
  rmSync(file);
  console.log(`download ${sizeMb} MiB (best of 2): proxied ${fmt(proxiedMBs)} MiB/s, direct over vsock ${fmt(directMBs)} MiB/s, ratio ${fmt(proxiedMBs / directMBs, 2)} (target >= 0.8); daemon peak RSS ${fmt(rssBefore / 1024)} MiB before, ${fmt(rssAfter / 1024)} MiB after`);

  const command = JSON.stringify({ command: 'for i in 1 2 3 4 5; do echo line$i; sleep 0.05; done' });
  const commandHeaders = { ...headers, 'content-type': 'application/json', accept: 'text/event-stream' };
  const run = async (go: () => Promise<IncomingMessage>): Promise<void> => {
    const res = await go();
    let text = '';
    for await (const chunk of res) text += chunk;
    if (res.statusCode !== 200 || !text.includes('line5')) throw new Error(`command: ${res.statusCode} ${text.slice(0, 200)}`);
  };
  const concurrent = async (go: () => Promise<IncomingMessage>): Promise<number> => {
    const start = process.hrtime.bigint();
    await Promise.all(Array.from({ length: streams }, () => run(go)));
    return ms(start);
  };
  const directMs = await concurrent(() => exchange(direct, 'http://sandbox/command', 'POST', commandHeaders, command));
  const proxiedMs = await concurrent(() => exchange(() => undefined, viaProxy('/command'), 'POST', commandHeaders, command));
  const single = process.hrtime.bigint();
  await run(() => exchange(() => undefined, viaProxy('/command'), 'POST', commandHeaders, command));
  console.log(`${streams} concurrent streamed commands (5 lines, 250 ms each): proxied ${fmt(proxiedMs)} ms, direct over vsock ${fmt(directMs)} ms (ratio ${fmt(proxiedMs / directMs, 2)}); one command alone ${fmt(ms(single))} ms`);
  await api(d, 'DELETE', `/v1/sandboxes/${id}`);
}

try {
  const d = await startDaemonProcess();
  await benchCreate(d);
  await benchDataPlane(d);
  await stopDaemon(d);
  await benchList();
} finally {
  for (const d of running) d.child.kill('SIGKILL');
  await fixture.cleanup();
}
