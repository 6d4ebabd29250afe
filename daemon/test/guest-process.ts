/**
 * Starts the guest services (`vmm-rs/target/debug/sandbox-guest execd|egress`) as real host
 * processes on ephemeral loopback ports and points the official OpenSandbox SDK at them.
 * Shared by the guest-*.test.ts files and bench/guest. Every service gets an access token (the
 * services refuse to start without one), handed over as the bootstrap never does and a
 * developer might: in an environment variable named by --token-env.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import {
  ConnectionConfig,
  createDefaultAdapterFactory,
  type Egress,
  type ExecdCommands,
  type ExecdHealth,
  type ExecdMetrics,
  type SandboxFiles,
} from '@alibaba-group/opensandbox';
import { DIST_ROOT } from '../../lib/testing/run-tool.js';

export const GUEST_BIN = join(DIST_ROOT, '..', 'vmm-rs', 'target', 'debug', 'sandbox-guest');

export function requireGuestBinary(): string {
  if (!existsSync(GUEST_BIN)) {
    throw new Error(
      `sandbox-guest binary not found at ${GUEST_BIN}; build it first: cd vmm-rs && cargo build -p sandbox-guest`,
    );
  }
  return GUEST_BIN;
}

/** The header each service reads its access token from. */
const TOKEN_HEADERS = { execd: 'X-EXECD-ACCESS-TOKEN', egress: 'OPENSANDBOX-EGRESS-AUTH' } as const;

export interface GuestService {
  /** host:port the service listens on (the SDK's endpoint authority). */
  addr: string;
  /** The header carrying the service's access token, for every request. */
  headers: Record<string, string>;
  child: ChildProcess;
  /** Everything the service wrote on stderr so far. */
  stderr: () => string;
  /** Peak resident memory of the service process in KiB (VmHWM). */
  peakRssKiB: () => number;
  stop: () => Promise<void>;
}

export interface StartOptions {
  /** Access token (default: a fresh random one), handed over through an environment variable named by --token-env. */
  token?: string;
  args?: string[];
  /** Another build of the binary (benchmarks); the tests use GUEST_BIN. */
  bin?: string | undefined;
}

/** Starts `sandbox-guest <kind> --port 0 --announce` and waits for its `listening <addr>` line. */
export async function startGuestService(kind: 'execd' | 'egress', options: StartOptions = {}): Promise<GuestService> {
  const bin = options.bin ?? requireGuestBinary();
  if (!existsSync(bin)) throw new Error(`sandbox-guest binary not found at ${bin}`);
  const args = [kind, '--port', '0', '--announce', ...(options.args ?? [])];
  const token = options.token ?? randomBytes(32).toString('hex');
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/', GUEST_TEST_TOKEN: token };
  args.push('--token-env', 'GUEST_TEST_TOKEN');
  const stateDir = kind === 'execd' ? mkdtempSync(join(tmpdir(), 'guest-execd-state-')) : undefined;
  if (stateDir) args.push('--state-dir', stateDir);
  const child = spawn(bin, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  // Whatever way the service ends, its state directory goes with it: no temp dirs left per test run.
  child.once('exit', () => {
    if (stateDir) rmSync(stateDir, { recursive: true, force: true });
  });
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const addr = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      // A service that never announced is not handed to the caller, so nobody else would stop it.
      child.kill('SIGKILL');
      reject(new Error(`${kind} did not announce its address within 10 s: ${stderr}`));
    }, 10_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${kind} exited with ${code} before listening: ${stderr}`));
    });
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const m = /^listening (\S+)$/.exec(line);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
  });
  return {
    addr,
    headers: { [TOKEN_HEADERS[kind]]: token },
    child,
    stderr: () => stderr,
    peakRssKiB: () => {
      const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
      return Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? NaN);
    },
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        // A service stuck in shutdown must not hang the test run: SIGKILL after a grace period.
        const force = setTimeout(() => child.kill('SIGKILL'), 5_000);
        child.once('exit', () => {
          clearTimeout(force);
          resolve();
        });
        child.kill('SIGTERM');
      }),
  };
}

function connection(addr: string): ConnectionConfig {
  return new ConnectionConfig({ domain: addr, requestTimeoutSeconds: 120 }).withTransportIfMissing();
}

export interface ExecdClient {
  commands: ExecdCommands;
  files: SandboxFiles;
  health: ExecdHealth;
  metrics: ExecdMetrics;
  close: () => Promise<void>;
}

/** The SDK's own command/file/health/metrics adapters, pointed straight at an execution service. */
export function execdClient(addr: string, endpointHeaders: Record<string, string> = {}): ExecdClient {
  const config = connection(addr);
  const stack = createDefaultAdapterFactory().createExecdStack({ connectionConfig: config, execdBaseUrl: `http://${addr}`, endpointHeaders });
  return { ...stack, close: () => config.closeTransport() };
}

export function egressClient(addr: string, endpointHeaders: Record<string, string> = {}): { egress: Egress; close: () => Promise<void> } {
  const config = connection(addr);
  const stack = createDefaultAdapterFactory().createEgressStack({ connectionConfig: config, egressBaseUrl: `http://${addr}`, endpointHeaders });
  return { ...stack, close: () => config.closeTransport() };
}
