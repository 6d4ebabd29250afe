/**
 * The daemon put together: options → state directory (0700) and its lock → preflight (the images
 * directory, then the runtime's) → registry → reconcile → maintenance → listen. Its constructor
 * takes the runtime's launcher and the preflight, so that tests can run the real daemon on the
 * test supervisor; `serve` always passes the VMM and the full preflight, and has no option to
 * weaken them.
 */
import { chmodSync, lstatSync, mkdirSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { InvalidInputError, UnavailableError } from '../lib/errors.js';
import { capConnections, closeWithGrace } from '../lib/http-limits.js';
import type { Logger } from '../lib/log.js';
import { buildApi } from './api/server.js';
import { parseHostPort, publicAuthority } from './listen.js';
import { checkServeOptions, type ServeOptions } from './options.js';
import { directoryProblem } from './path-input.js';
import type { Preflight } from './preflight.js';
import type { SupervisorLauncher } from './runtime/launcher.js';
import { NativeRuntime } from './runtime/native.js';
import { SandboxService } from './service/sandboxes.js';
import { Registry } from './store/registry.js';
import { lockStateDirectory } from './store/state-lock.js';

/**
 * Descriptors the daemon keeps for its own work, out of the listener's reach: Node's own, the
 * registry's writes, maintenance (8 deletions at a time), and for every sandbox admission allows,
 * what its start holds at once (the supervisor's pipes and log, the guest control listener and its
 * connection, a readiness probe).
 */
const RESERVED_DESCRIPTORS = 64;
const DESCRIPTORS_PER_SANDBOX_START = 8;
/** A client connection, and the sandbox's socket its proxied request is streamed to. */
const DESCRIPTORS_PER_CONNECTION = 2;

export interface RuntimeParts {
  launcher: SupervisorLauncher;
  preflight: Preflight;
}

export interface RunningDaemon {
  /** `http://host:port` of the listener. */
  url: string;
  port: number;
  service: SandboxService;
  /** Stops the API and maintenance; sandboxes keep running. */
  close(): Promise<void>;
}

function privateStateDir(path: string): void {
  mkdirSync(path, { recursive: true, mode: 0o700 });
  const st = lstatSync(path);
  if (st.isSymbolicLink() || !st.isDirectory()) throw new InvalidInputError(`--state ${path}: must be a directory, not a symbolic link`);
  if (st.uid !== process.getuid?.()) throw new InvalidInputError(`--state ${path}: owned by uid ${st.uid}, not by this user`);
  chmodSync(path, 0o700);
}

export async function startDaemon(options: ServeOptions, parts: RuntimeParts, log: Logger): Promise<RunningDaemon> {
  checkServeOptions(options);
  privateStateDir(options.state);
  const lock = await lockStateDirectory(options.state);
  try {
    // The images directory is every runtime's input; its problem is listed with the runtime's own.
    const images = directoryProblem(options.imagesDir);
    const problems = [...(images ? [images] : []), ...(await parts.preflight(options.cgroupRoot))];
    if (problems.length > 0) throw new UnavailableError('preflight failed:', { detail: problems.map((problem) => `  ${problem}`).join('\n') });
    const registry = Registry.open(options.state);
    const runtime = new NativeRuntime(options.state, options.cgroupRoot, parts.launcher);
    runtime.checkRunDirectory();
    const service = new SandboxService({
      registry,
      runtime,
      imagesDir: options.imagesDir.path,
      stateDir: options.state,
      capacity: { maxSandboxes: options.maxSandboxes, cpuMillis: options.cpuMillis, memoryBytes: options.memoryBytes },
      maxTimeoutSeconds: options.maxTimeoutSeconds,
      publicEndpoint: 'pending',
      log,
    });
    await service.reconcileAll();
    const app = buildApi({ service, apiKey: options.apiKey, log });
    const { host, port } = parseHostPort('--listen', options.listen);
    capConnections([{ name: 'sandboxd API', server: app.server, descriptorsPerConnection: DESCRIPTORS_PER_CONNECTION }], (message) => log.warn(message), {
      reserve: RESERVED_DESCRIPTORS + DESCRIPTORS_PER_SANDBOX_START * options.maxSandboxes,
    });
    await app.listen({ host, port });
    const bound = (app.server.address() as AddressInfo).port;
    // An IPv6 address is bracketed in an authority, or its port would read as part of it.
    const authority = `${host.includes(':') ? `[${host}]` : host}:${bound}`;
    // With port 0 the authority is only known now (the harness); otherwise it was checked above.
    service.setPublicEndpoint(options.publicEndpoint ?? (port === 0 ? authority : publicAuthority(options)));
    service.startMaintenance();
    log.info(`sandboxd listening on ${authority}, state ${options.state}`);
    return {
      url: `http://${authority}`,
      port: bound,
      service,
      close: async () => {
        service.stopMaintenance();
        // Within the grace: a client that never ends its request must not keep the state directory locked.
        await closeWithGrace(app);
        await lock.release();
      },
    };
  } catch (error) {
    await lock.release();
    throw error;
  }
}
