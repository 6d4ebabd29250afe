/**
 * The host side of the bootstrap's control channel: the guest connects to host port 44770, which
 * the VMM maps to the Unix socket `<vsock>_44770`. We listen there before the VM starts, answer
 * the bootstrap's hello with its configuration (environment and the services' tokens: secrets
 * travel only here, never in argv or the environment), and wait for its `ready` frame.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { chmodSync } from 'node:fs';
import { encodeFrame, FrameDecoder } from '../framing.js';

export interface GuestConfig {
  env: Record<string, string>;
  execdToken: string;
  egressToken: string;
}

/** The bootstrap could not start the workload (`exited` with an `error`): the requested entrypoint is at fault. */
export class WorkloadStartError extends Error {
  override name = 'WorkloadStartError';
}

/** Why the guest will not become ready, from its `failed` or `exited` frame. */
function notReady(message: { type?: string; code?: number; message?: string; error?: string }): Error {
  if (message.type === 'failed') return new Error(`guest bootstrap failed${message.message ? `: ${message.message}` : ''}`);
  if (message.error) return new WorkloadStartError(message.error);
  return new Error(`the workload exited with code ${message.code ?? 'unknown'} before the sandbox was ready`);
}

export interface GuestControl {
  /** Resolves once the bootstrap reported ready; rejects if it failed, closed or timed out. */
  ready(timeoutMs: number): Promise<void>;
  close(): void;
}

export async function listenGuestControl(path: string, config: GuestConfig): Promise<GuestControl> {
  let settle: { resolve: () => void; reject: (e: Error) => void } | undefined;
  let outcome: Error | 'ready' | undefined;
  const finish = (result: Error | 'ready'): void => {
    if (outcome) return;
    outcome = result;
    if (settle) (result === 'ready' ? settle.resolve() : settle.reject(result));
  };
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    const decoder = new FrameDecoder();
    socket.on('error', () => undefined);
    socket.on('data', (chunk: Buffer) => {
      try {
        decoder.push(chunk);
        for (let frame = decoder.next(); frame; frame = decoder.next()) {
          const message = frame.value as { type?: string; code?: number; message?: string; error?: string };
          if (message.type === 'hello') {
            socket.write(encodeFrame({ type: 'config', version: 1, env: config.env, execd_token: config.execdToken, egress_token: config.egressToken, cwd: '/' }));
          } else if (message.type === 'ready') finish('ready');
          else if (message.type === 'failed' || message.type === 'exited') finish(notReady(message));
        }
      } catch (error) {
        finish(error as Error);
        socket.destroy();
      }
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(path, () => resolve());
  });
  chmodSync(path, 0o600);
  return {
    ready: (timeoutMs) =>
      new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => finish(new Error(`guest bootstrap not ready within ${timeoutMs} ms`)), timeoutMs);
        settle = {
          resolve: () => (clearTimeout(timer), resolve()),
          reject: (e) => (clearTimeout(timer), reject(e)),
        };
        if (outcome) (outcome === 'ready' ? settle.resolve() : settle.reject(outcome));
      }),
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}
