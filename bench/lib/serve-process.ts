/**
 * `trajstore serve` as a child process for the serve benchmark and tests: started as a user starts it, with
 * the addresses it prints on stdout, its stderr kept, and stopped with SIGTERM.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { toolScript } from './tools.js';

export interface ServeProcess {
  url: string;
  controlUrl: string | undefined;
  /** With --gateway: the event gateway's listener. */
  gatewayUrl: string | undefined;
  /** With --gateway-config: the capture gateway's proxy and admin listeners. */
  captureUrl: string | undefined;
  captureAdminUrl: string | undefined;
  child: ChildProcess;
  stderr(): string;
  /** SIGTERM, then the exit code. */
  stop(): Promise<number | null>;
}

/** `wrap`: a command it runs under (which execs it, so that the child's pid is serve's), e.g. one that lowers its limits. */
export function startServeProcess(args: string[], options: { env?: NodeJS.ProcessEnv; cwd?: string; timeoutMs?: number; wrap?: string[] } = {}): Promise<ServeProcess> {
  const [command, ...rest] = [...(options.wrap ?? []), process.execPath, toolScript('trajstore'), ...args];
  const child = spawn(command!, rest, { cwd: options.cwd, env: { ...process.env, ...options.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString('utf8')));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`serve did not print its address within ${options.timeoutMs ?? 60_000} ms; stderr: ${err}`));
    }, options.timeoutMs ?? 60_000);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`serve exited (${code}) before listening; stderr: ${err}`));
    });
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString('utf8');
      const line = (name: string): string | undefined => new RegExp(`^${name} (\\S+)$`, 'm').exec(out)?.[1];
      const url = line('serving');
      const controlUrl = line('control');
      const gatewayUrl = line('gateway');
      const captureUrl = line('capture');
      const captureAdminUrl = line('capture-admin');
      if (!url || (args.includes('--control') && !controlUrl) || (args.includes('--gateway') && !gatewayUrl) || (args.includes('--gateway-config') && (!captureUrl || !captureAdminUrl))) return;
      clearTimeout(timer);
      resolve({
        url,
        controlUrl,
        gatewayUrl,
        captureUrl,
        captureAdminUrl,
        child,
        stderr: () => err,
        stop: async () => {
          child.kill('SIGTERM');
          return exited;
        },
      });
    });
  });
}
