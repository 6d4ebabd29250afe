/** `sandboxd serve`: the lifecycle daemon. The secret comes from SVC_API_KEY only, never a flag. */
import { defaultStateDir, productRuntime, publicAuthority, SERVE_DEFAULTS, startDaemon, type ServeOptions } from '../../daemon/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { defineCommand } from '../kit/program.js';
import { imagesDirSetting } from './settings.js';

/** `imagesDir` unset: the configuration's `images_dir`. */
function flags(args: ParsedArgs): Omit<ServeOptions, 'apiKey' | 'imagesDir'> & { imagesDir: string | undefined } {
  const publicEndpoint = args.text('--public-endpoint');
  const options = {
    imagesDir: args.text('--images-dir'),
    cgroupRoot: args.required('--cgroup-root'),
    listen: args.text('--listen') ?? SERVE_DEFAULTS.listen,
    state: args.text('--state') ?? defaultStateDir(),
    maxSandboxes: args.positiveInt('--max-sandboxes', SERVE_DEFAULTS.maxSandboxes),
    cpuMillis: args.positiveInt('--cpu-millis', SERVE_DEFAULTS.cpuMillis),
    memoryBytes: args.positiveInt('--memory-bytes', SERVE_DEFAULTS.memoryBytes),
    maxTimeoutSeconds: args.positiveInt('--max-timeout-seconds', SERVE_DEFAULTS.maxTimeoutSeconds),
    ...(publicEndpoint === undefined ? {} : { publicEndpoint }),
  };
  // serve names its authority before binding: a wildcard or port-0 listener needs --public-endpoint.
  publicAuthority(options);
  return options;
}

export const serveCommand = defineCommand({
  name: 'serve',
  description: 'run the sandbox lifecycle daemon (OpenSandbox-compatible API under /v1); the key comes from SVC_API_KEY',
  options: [
    { flags: '--images-dir <dir>', description: 'directory of prepared image manifests (required here or as images_dir in the configuration)' },
    { flags: '--cgroup-root <dir>', description: 'delegated cgroup v2 directory with cpu, memory and pids enabled (required)' },
    { flags: '--listen <host:port>', description: `listen address (default ${SERVE_DEFAULTS.listen})` },
    { flags: '--state <dir>', description: `private state directory, a short absolute path (default ${defaultStateDir()})` },
    { flags: '--max-sandboxes <n>', description: `admission cap on sandboxes (default ${SERVE_DEFAULTS.maxSandboxes})` },
    { flags: '--cpu-millis <n>', description: `CPU capacity in thousandths of a CPU (default ${SERVE_DEFAULTS.cpuMillis})` },
    { flags: '--memory-bytes <n>', description: `memory capacity in bytes (default ${SERVE_DEFAULTS.memoryBytes})` },
    { flags: '--public-endpoint <host:port>', description: 'authority endpoints name; required with a wildcard or port-0 listener' },
    { flags: '--max-timeout-seconds <n>', description: `largest sandbox TTL, 60 to 31536000 (default ${SERVE_DEFAULTS.maxTimeoutSeconds})` },
  ],
  examples: ['SVC_API_KEY=$(openssl rand -hex 32) sandboxd serve --images-dir /srv/images --cgroup-root /sys/fs/cgroup/sandboxd'],
  flags,
  async run(ctx, options) {
    const imagesDir = imagesDirSetting(options.imagesDir, ctx.settings);
    const daemon = await startDaemon({ ...options, imagesDir, apiKey: ctx.env.SVC_API_KEY ?? '' }, await productRuntime(), ctx.log);
    ctx.stderr.write(`sandboxd listening on ${daemon.url}\n`);
    if (!ctx.signal.aborted) await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
    // A normal stop leaves sandboxes running; maintenance resumes on the next start.
    await daemon.close();
  },
});
