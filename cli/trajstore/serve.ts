/**
 * `trajstore serve`: the read-only API and web interface over mounted datasets, with the event
 * gateway (`--gateway`) and the LLM capture gateway (`--gateway-config`) writing into
 * `--gateway-dataset`, until SIGINT or SIGTERM. The address of each listener goes to stdout (one
 * line each: `serving URL`, `control URL`, `gateway URL`, `capture URL`, `capture-admin URL`), so a script can read them.
 */
import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { InvalidInputError } from '../../lib/errors.js';
import { distPath } from '../../lib/install.js';
import { DEFAULT_SERVE_MOUNT, DEFAULT_SPLIT_IDLE_MS, GATEWAY_MOUNT, RESERVED_SERVE_NAMES, catalogServing, parseListenAddress, startServer, type GatewayServeOptions, type MountSpec } from '../../pipelines/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { defineCommand, type CommandContext } from '../kit/program.js';
import { resolveContext } from './common.js';

const DEFAULT_LISTEN = '127.0.0.1:8765';

interface ServeFlags {
  /** Positional mounts; none with --catalog-config, whose file names them. */
  mounts: MountSpec[];
  catalogConfig: string | undefined;
  listen: string;
  control: string | undefined;
  open: boolean;
  gateway: GatewayServeOptions | undefined;
}

/** The gateway flags: which need which, checked before anything is opened (exit 2). */
function gatewayFlags(args: ParsedArgs): GatewayServeOptions | undefined {
  const listen = args.text('--gateway');
  const config = args.text('--gateway-config');
  const dataset = args.text('--gateway-dataset');
  const needsGateway = ['--gateway-dataset', '--gateway-state', '--gateway-split', '--gateway-split-idle', '--gateway-stream-markdown', '--gateway-debug'].filter((flag) => args.given(flag));
  if (listen === undefined && config === undefined) {
    if (needsGateway.length > 0) throw new InvalidInputError(`${needsGateway[0]} needs --gateway ADDRESS or --gateway-config FILE`);
    return undefined;
  }
  if (dataset === undefined || dataset === '') throw new InvalidInputError(`${listen !== undefined ? '--gateway' : '--gateway-config'} needs --gateway-dataset DATASET (where the events go)`);
  for (const flag of ['--gateway-stream-markdown', '--gateway-debug']) if (args.given(flag) && config === undefined) throw new InvalidInputError(`${flag} needs --gateway-config FILE (it is about the capture gateway)`);
  if (listen !== undefined) parseListenAddress(listen, '--gateway');
  // The split template is checked by the engine before anything is opened or bound.
  const split = args.text('--gateway-split');
  const state = args.text('--gateway-state');
  return {
    ...(listen !== undefined ? { listen } : {}),
    dataset,
    ...(state !== undefined ? { state } : {}),
    ...(split !== undefined ? { split } : {}),
    idleMs: args.duration('--gateway-split-idle', DEFAULT_SPLIT_IDLE_MS),
    ...(config !== undefined ? { config } : {}),
    streamMarkdown: args.has('--gateway-stream-markdown'),
    debug: args.has('--gateway-debug'),
  };
}

/**
 * The positional mounts: one bare DATASET is `default`; several must each be NAME=DATASET. A bare
 * `catalog` is a path (`./catalog`), never the directory service's name. None: the default dataset.
 */
function mountsOf(args: readonly string[]): MountSpec[] {
  const bare = (arg: string): string => (RESERVED_SERVE_NAMES.has(arg) ? `./${arg}` : arg);
  if (args.length === 0) return [{ name: DEFAULT_SERVE_MOUNT, dataset: undefined }];
  if (args.length === 1 && !/^[A-Za-z_][A-Za-z0-9_]*=/.test(args[0] as string)) return [{ name: DEFAULT_SERVE_MOUNT, dataset: bare(args[0] as string) }];
  return args.map((arg) => {
    const eq = arg.indexOf('=');
    if (eq <= 0 || eq === arg.length - 1) {
      throw new InvalidInputError(`several datasets need NAME=DATASET each; ${JSON.stringify(arg)} has no name`, { hint: `e.g. trajstore serve ${DEFAULT_SERVE_MOUNT}=./prod staging=./staging` });
    }
    return { name: arg.slice(0, eq), dataset: arg.slice(eq + 1) };
  });
}

function flags(args: ParsedArgs): ServeFlags {
  const positionals = args.variadic(0);
  const catalogConfig = args.text('--catalog-config');
  if (catalogConfig !== undefined && positionals.length > 0) {
    throw new InvalidInputError('--catalog-config mounts the directory file\'s libraries; it cannot be combined with DATASET mounts');
  }
  const listen = args.text('--listen') ?? DEFAULT_LISTEN;
  const control = args.text('--control');
  // Checked here too, so that a bad address exits 2 before any dataset is opened.
  parseListenAddress(listen, '--listen');
  if (control !== undefined) parseListenAddress(control, '--control');
  const gateway = gatewayFlags(args);
  // With a gateway and no DATASET, only the gateway's dataset is mounted (not the default dataset).
  const mounts = catalogConfig !== undefined || (gateway && positionals.length === 0) ? [] : mountsOf(positionals);
  return { mounts, catalogConfig, listen, control, open: args.has('--open'), gateway };
}

/** A browser opener on PATH, when there is a display to open it on. */
function browserOpener(env: NodeJS.ProcessEnv): string | undefined {
  if (!env.DISPLAY && !env.WAYLAND_DISPLAY && process.platform === 'linux') return undefined;
  const name = process.platform === 'darwin' ? 'open' : 'xdg-open';
  return (env.PATH ?? '').split(delimiter).some((dir) => dir && existsSync(join(dir, name))) ? name : undefined;
}

async function openBrowser(ctx: CommandContext, url: string): Promise<void> {
  const opener = browserOpener(ctx.env);
  if (!opener) {
    ctx.stderr.write(`no browser to open here; open ${url}\n`);
    return;
  }
  // Loaded here: at start-up every command would pay for child_process.
  const { spawn } = await import('node:child_process');
  spawn(opener, [url], { stdio: 'ignore', detached: true }).on('error', () => ctx.stderr.write(`could not start ${opener}; open ${url}\n`)).unref();
}

export const serveCommand = defineCommand({
  name: 'serve [...datasets]',
  description: 'read-only HTTP API and web interface over datasets, on loopback',
  options: [
    { flags: '--listen <addr>', description: `loopback HOST:PORT of the API and web interface (default ${DEFAULT_LISTEN}; port 0 picks a free one)` },
    { flags: '--control <addr>', description: `loopback HOST:PORT of the control listener (status and reload of mounts); needs a mount named ${DEFAULT_SERVE_MOUNT}` },
    { flags: '--open', description: 'open the web interface in a browser when one is available (else print its URL)' },
    { flags: '--catalog-config <file>', description: 'mount the libraries of a directory file (not combined with DATASET mounts)' },
    { flags: '--gateway <addr>', description: 'loopback HOST:PORT of the event gateway (POST /v1/events, OTLP/HTTP JSON POST /v1/traces); needs --gateway-dataset' },
    { flags: '--gateway-dataset <dataset>', description: `where the gateways write: a path, s3:// uri or pin (created when missing; mounted as ${GATEWAY_MOUNT})` },
    { flags: '--gateway-split <template>', description: 'partition traces by {user} (header x-trajstore-user-id), {date}, {hour} (UTC), e.g. {user}/{date}' },
    { flags: '--gateway-split-idle <duration>', description: `project a trace into the dataset once it has been idle this long (default ${DEFAULT_SPLIT_IDLE_MS / 60_000}m)` },
    { flags: '--gateway-config <file>', description: 'TOML file of the LLM capture gateway (listen, routes to upstreams, capture level); needs --gateway-dataset' },
    { flags: '--gateway-state <dir>', description: 'the gateways\' local state (event log, session index, debug log, Markdown); default: the dataset directory; required for s3:// datasets' },
    { flags: '--gateway-stream-markdown', description: 'keep a live Markdown rendering of each captured session in the state directory' },
    { flags: '--gateway-debug', description: 'write a debug log of captured calls (bounded bodies, no credentials) in the state directory' },
  ],
  examples: [
    'trajstore serve ./ds',
    'trajstore serve prod=./prod staging=@staging --listen 127.0.0.1:9000',
    'trajstore --log-level info serve ./ds --control 127.0.0.1:9001',
    'trajstore serve --gateway 127.0.0.1:4318 --gateway-dataset ./live --gateway-split {user}/{date}',
    'trajstore serve --gateway-config capture.toml --gateway-dataset ./captured',
  ],
  flags,
  async run(ctx, f) {
    const catalog = f.catalogConfig === undefined ? undefined : await catalogServing(f.catalogConfig);
    for (const { name, reason } of catalog?.unmounted ?? []) ctx.log.warn(`library ${JSON.stringify(name)} is not mounted: ${reason}`);
    const server = await startServer(resolveContext(ctx), {
      mounts: catalog?.mounts ?? f.mounts,
      ...(catalog ? { extend: catalog.extend } : {}),
      listen: f.listen,
      ...(f.control !== undefined ? { control: f.control } : {}),
      webRoot: distPath('bin', 'web'),
      log: ctx.log,
      ...(f.gateway ? { gateway: f.gateway } : {}),
    });
    ctx.stdout.write(`serving ${server.url}\n`);
    if (server.controlUrl) ctx.stdout.write(`control ${server.controlUrl}\n`);
    if (server.gatewayUrl) ctx.stdout.write(`gateway ${server.gatewayUrl}\n`);
    if (server.captureUrl) ctx.stdout.write(`capture ${server.captureUrl}\n`);
    if (server.captureAdminUrl) ctx.stdout.write(`capture-admin ${server.captureAdminUrl}\n`);
    if (f.open) await openBrowser(ctx, server.url);
    await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
    await server.close();
  },
});
