/**
 * The test supervisor: a stand-in for `sandbox-vmm` (test code only; never selectable from the
 * product, never bundled into dist/bin) for hosts where VMs cannot boot at native speed. It speaks
 * the VMM's exact contracts:
 *   - the start frame on stdin (the same fields), the ready frame on stdout;
 *   - `control.sock` (0600): `{op: inspect|pause|resume|terminate, id}` answered with the
 *     confirmed state;
 *   - the hybrid vsock socket: `CONNECT <port>\n` → `OK <n>\n`, and guest connections to host port
 *     P on `<vsock_socket>_P`;
 * and instead of a VM it runs the real guest bootstrap (`sandbox-guest bootstrap`, which starts the
 * real execution and egress services) as host processes in a child cgroup `guest` of the
 * sandbox's cgroup, which it joins first. Pause freezes that child cgroup (cgroup.freeze) and
 * confirms it frozen, as the VMM confirms every vCPU stopped.
 */
import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { encodeFrame, FrameDecoder } from '../../framing.js';
import { freePort } from '../../../bench/lib/free-port.js';
import { DIST_ROOT } from '../../../lib/testing/run-tool.js';

const GUEST_BIN = join(DIST_ROOT, '..', 'vmm-rs', 'target', 'debug', 'sandbox-guest');

interface StartFrame {
  cmdline: string;
  vsock_socket: string;
  state_dir: string;
  cgroup: { path: string; device: number; inode: number };
}

function reply(value: unknown): void {
  process.stdout.write(encodeFrame(value));
}

function refuse(field: string, message: string): never {
  reply({ ok: false, error: { code: 'invalid_config', field, message: `${field}: ${message}` } });
  process.exit(2);
}

async function readStartFrame(): Promise<StartFrame> {
  const decoder = new FrameDecoder();
  for await (const chunk of process.stdin) {
    decoder.push(chunk as Buffer);
    const frame = decoder.next();
    if (frame) return frame.value as StartFrame;
  }
  refuse('(start frame)', 'stdin closed before it arrived');
}

/** The guest argv from the kernel command line, minus the image's own `bootstrap --` prefix. */
function workload(cmdline: string): string[] {
  const exec = /(?:^| )sandbox\.exec=(\S+)/.exec(cmdline)?.[1];
  if (!exec) refuse('cmdline', 'no sandbox.exec=');
  const argv = JSON.parse(Buffer.from(exec, 'base64url').toString('utf8')) as string[];
  const split = argv.indexOf('--');
  return split < 0 ? argv : argv.slice(split + 1);
}

function joinCgroup(cg: StartFrame['cgroup']): string {
  const st = statSync(cg.path, { bigint: true });
  if (Number(st.dev) !== cg.device || Number(st.ino) !== cg.inode) refuse('cgroup.path', 'device/inode do not match the binding');
  writeFileSync(join(cg.path, 'cgroup.procs'), String(process.pid));
  const guest = join(cg.path, 'guest');
  mkdirSync(guest);
  return guest;
}

async function listenPrivate(path: string, onConnection: (socket: Socket) => void): Promise<Server> {
  if (existsSync(path)) refuse('state_dir', `${path} already exists`);
  const server = createServer(onConnection);
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(path, () => resolve()));
  chmodSync(path, 0o600);
  return server;
}

/** The hybrid vsock socket: `CONNECT <port>` reaches the bootstrap's bridge for that port. */
function vsockConnection(bridges: string) {
  return (socket: Socket): void => {
    socket.on('error', () => undefined);
    let line = '';
    const timer = setTimeout(() => socket.destroy(), 5_000);
    const onData = (chunk: Buffer): void => {
      const nl = chunk.indexOf(10);
      line += chunk.subarray(0, nl < 0 ? chunk.length : nl).toString('latin1');
      if (nl < 0) {
        if (line.length > 32) socket.destroy();
        return;
      }
      clearTimeout(timer);
      socket.off('data', onData);
      socket.pause();
      const port = /^CONNECT (\d+)$/.exec(line)?.[1];
      if (!port) return void socket.destroy();
      const upstream = connect(join(bridges, `${port}.sock`));
      upstream.once('error', () => socket.destroy());
      upstream.once('connect', () => {
        socket.write(`OK ${port}\n`);
        const rest = chunk.subarray(nl + 1);
        if (rest.length > 0) upstream.write(rest);
        // A clean end travels through pipe() as a half-close, after the bytes still queued, as the
        // VMM flushes before it shuts the host stream; only a side that broke takes the other down.
        // (Destroying on 'close' dropped the end of large downloads when the CPU was busy.)
        socket.pipe(upstream);
        upstream.pipe(socket);
        socket.resume();
        upstream.on('error', () => socket.destroy());
        socket.on('close', () => upstream.destroy());
        upstream.on('close', () => {
          if (!upstream.readableEnded) socket.destroy();
        });
      });
    };
    socket.on('data', onData);
  };
}

async function waitFrozen(guest: string, frozen: boolean): Promise<boolean> {
  const want = `frozen ${frozen ? 1 : 0}`;
  for (let i = 0; i < 200; i++) {
    if (readFileSync(join(guest, 'cgroup.events'), 'utf8').includes(want)) return true;
    await sleep(50);
  }
  return false;
}

async function main(): Promise<void> {
  const start = await readStartFrame();
  for (const field of ['cmdline', 'vsock_socket', 'state_dir'] as const) if (typeof start[field] !== 'string') refuse(field, 'must be a string');
  if (!start.cgroup || typeof start.cgroup.path !== 'string') refuse('cgroup', 'must be an object');
  const argv = workload(start.cmdline);
  const guest = joinCgroup(start.cgroup);
  const bridges = join(start.state_dir, 'bridges');
  mkdirSync(bridges, { mode: 0o700 });
  const [execdPort, egressPort] = [await freePort(), await freePort()];
  const vsock = await listenPrivate(start.vsock_socket, vsockConnection(bridges));
  let state: 'running' | 'paused' | 'stopped' = 'running';
  const controlPath = join(start.state_dir, 'control.sock');

  // The "guest": the bootstrap joins the child cgroup before it execs, so nothing it starts escapes.
  const bootstrap = spawn(
    '/bin/sh',
    ['-c', 'echo $$ > "$0/cgroup.procs" && exec "$@"', guest, GUEST_BIN, 'bootstrap',
      '--control', `unix:${start.vsock_socket}_44770`, '--listen', `unix:${bridges}`,
      '--execd-port', String(execdPort), '--egress-port', String(egressPort),
      '--runtime-dir', join(start.state_dir, 'guest'), '--', ...argv],
    { stdio: ['ignore', 'inherit', 'inherit'], env: { PATH: '/usr/local/bin:/usr/bin:/bin' } },
  );

  const stop = (code: number): void => {
    state = 'stopped';
    try {
      writeFileSync(join(guest, 'cgroup.kill'), '1');
    } catch {
      // already empty
    }
    rmSync(controlPath, { force: true });
    rmSync(start.vsock_socket, { force: true });
    try {
      process.stdout.write(encodeFrame({ event: 'stopped', reason: 'terminated' }));
    } catch {
      // the daemon is gone
    }
    process.exit(code);
  };
  // The guest powered off (its workload ended): the VM is gone, as the VMM's would be.
  bootstrap.once('exit', () => stop(0));
  process.stdout.on('error', () => undefined);
  for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(sig, () => stop(0));

  await listenPrivate(controlPath, (socket) => {
    const decoder = new FrameDecoder();
    socket.on('error', () => undefined);
    socket.on('data', async (chunk: Buffer) => {
      decoder.push(chunk);
      for (let frame = decoder.next(); frame; frame = decoder.next()) {
        const request = frame.value as { op?: string; id?: unknown };
        const answer = await handle(request.op);
        socket.write(encodeFrame({ ...answer, ...(request.id === undefined ? {} : { id: request.id }) }));
        if (request.op === 'terminate') return void socket.end(() => stop(0));
      }
    });
  });

  async function handle(op: string | undefined): Promise<Record<string, unknown>> {
    switch (op) {
      case 'inspect':
        return { ok: true, state, pid: process.pid, vcpus: 1 };
      case 'pause':
      case 'resume': {
        const frozen = op === 'pause';
        writeFileSync(join(guest, 'cgroup.freeze'), frozen ? '1' : '0');
        if (!(await waitFrozen(guest, frozen))) return { ok: false, state: 'unknown', error: { code: 'timeout', message: `${op} not acknowledged` } };
        state = frozen ? 'paused' : 'running';
        return { ok: true, state };
      }
      case 'terminate':
        return { ok: true, state: 'stopped', reason: 'terminated' };
      default:
        return { ok: false, state, error: { code: 'bad_request', message: `op: unknown operation ${JSON.stringify(op)}` } };
    }
  }

  reply({ ok: true, state, pid: process.pid, control_socket: controlPath, entry: 'test-supervisor' });
  void vsock;
}

await main();
