/**
 * `actorctl actor <class path>`: starts one actor in an actor system node and runs until signalled.
 * Its result, on stdout, is the one line `[name] Started at <addr> (node <id>)`: the address the
 * node bound (port 0 picks one) and its id, which scripts read to reach it. What it loaded and how
 * it stops are diagnostics, on stderr (`--log-level info`).
 */
import { InvalidInputError, ToolError, listenFailure } from '../../lib/errors.js';
import { actorParams, describeActorClass, loadActorClass, prepareSystem, startSystem, type ActorSystem } from '../../framework/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { defineCommand, type OptionSpec } from '../kit/program.js';
import { nodeAddress, nodeAddresses } from './common.js';
import { CLUSTER_OPTION, TLS_OPTIONS, addressSetting, clusterSetting, connectFlags, limitSettings, seedsSetting, timerSettings, tlsSetting, type ConnectFlags } from './settings.js';

/** The `-D` key whose value is a JSON object of constructor parameters. */
const EXTRA_KWARGS = 'actor.extra_kwargs';

/** Why an address cannot be bound, other than being in use, in words (Node gives only the code). */

/** Where a node listens unless told otherwise: only this machine can reach it. */
const DEFAULT_ADDR = '127.0.0.1:8000';

interface ActorFlags {
  classPath: string;
  name: string;
  addr: string | undefined;
  metricsAddr: string | undefined;
  seeds: string[];
  insecure: boolean;
  connect: ConnectFlags;
  /** `-D key=value` settings other than the constructor parameters. */
  defines: string[];
  /** The JSON objects of `-D actor.extra_kwargs`, in order (checked once the class is loaded). */
  paramJson: string[];
  /** `--key value` words after `--`, for the constructor. */
  paramWords: readonly string[];
}

function flags(args: ParsedArgs): ActorFlags {
  const paramJson: string[] = [];
  const defines: string[] = [];
  for (const define of args.list('--define')) {
    if (define.startsWith(`${EXTRA_KWARGS}=`)) paramJson.push(define.slice(EXTRA_KWARGS.length + 1));
    else defines.push(define);
  }
  return {
    classPath: args.requiredPositional(0, 'CLASS_PATH'),
    name: args.text('--name') ?? 'worker',
    addr: nodeAddress(args, '--addr'),
    metricsAddr: nodeAddress(args, '--metrics-addr'),
    seeds: nodeAddresses(args, '--seeds'),
    insecure: args.has('--insecure'),
    connect: connectFlags(args),
    defines,
    paramJson,
    paramWords: args.rest,
  };
}

/** `actor CLASS --help` lists the class's constructor parameters, or why it cannot. */
async function classParameters(words: readonly string[]): Promise<OptionSpec[]> {
  const classPath = words[0];
  if (classPath === undefined || classPath.startsWith('-')) return [];
  try {
    const { className, params } = await describeActorClass(classPath);
    return params.map((p) => ({
      flags: `-- --${p.name} <${p.type}>`,
      description: `${className} constructor parameter${p.description ? `: ${p.description}` : ''}${p.required ? ' (required)' : ''}`,
      ...(p.default === undefined ? {} : { default: JSON.stringify(p.default) }),
    }));
  } catch (error) {
    const hint = error instanceof InvalidInputError && error.hint ? ` (${error.hint})` : '';
    return [{ flags: '-- ...', description: `cannot list constructor parameters: ${(error as Error).message}${hint}` }];
  }
}

export const actorCommand = defineCommand({
  name: 'actor <classPath>',
  takesRest: true,
  description: 'start an actor of a class in an actor system node; runs until SIGINT/SIGTERM, then leaves the cluster',
  options: [
    { flags: '--addr <host:port>', description: `bind address of the node; port 0 picks a free port (default: [node] addr, else ${DEFAULT_ADDR}); other than loopback needs TLS or --insecure` },
    { flags: '--seeds <addrs>', description: 'comma-separated seed node addresses to join (default: [cluster] seeds)' },
    { flags: '--name <name>', description: 'name of the actor, resolvable cluster-wide', default: 'worker' },
    CLUSTER_OPTION,
    ...TLS_OPTIONS,
    { flags: '--insecure', description: 'allow an address other than loopback without TLS (the node\'s, or --metrics-addr, which is plain HTTP even with TLS): anyone who reaches it can join and call, or read the observers (default: [node] insecure)' },
    { flags: '--metrics-addr <host:port>', description: 'also serve /metrics and the other observers over plain HTTP/1.1 here; other than loopback needs --insecure (default: [node] metrics_addr)' },
    {
      flags: '-D, --define <key=value>',
      description: `${EXTRA_KWARGS}=<JSON object> (constructor parameters), or any key of the configuration file as table.key, e.g. cluster.probe_interval_ms=200, limits.max_call_bytes=1048576`,
    },
  ],
  examples: [
    'actorctl actor framework.examples.Echo --addr 127.0.0.1:8000 --name echo -- --prefix "re: " --start -5',
    "actorctl actor framework.examples.Echo --addr 127.0.0.1:8001 --seeds 127.0.0.1:8000 -D 'actor.extra_kwargs={\"prefix\":\">\"}'",
    'actorctl actor framework.examples.Echo --addr 10.0.0.5:8000 --tls-ca certs/ca.crt --tls-cert certs/n1.crt --tls-key certs/n1.key',
  ],
  helpOptions: classParameters,
  flags,
  async run(ctx, f) {
    const settings = ctx.settings.withDefines(f.defines);
    prepareSystem();
    const loaded = await loadActorClass(f.classPath);
    let params: Record<string, unknown>;
    try {
      params = await actorParams(loaded.meta.params, { json: f.paramJson, words: f.paramWords });
    } catch (error) {
      if (!(error instanceof InvalidInputError)) throw error;
      throw new InvalidInputError(error.message, { hint: `run \`actorctl actor ${f.classPath} --help\` for the constructor parameters` });
    }
    const configured = (key: string): string | undefined => {
      const value = settings.get<string>(key);
      return value === undefined ? undefined : addressSetting(settings, key, value);
    };
    const addr = f.addr ?? configured('node.addr') ?? DEFAULT_ADDR;
    const metricsAddr = f.metricsAddr ?? configured('node.metrics_addr');
    const seeds = seedsSetting(settings, f.seeds);
    const cluster = clusterSetting(settings, f.connect.cluster);
    const tls = tlsSetting(settings, f.connect);
    ctx.log.info(`loaded actor class ${f.classPath}: ${loaded.className} from ${loaded.module}`);
    ctx.log.info(`constructor parameters: ${JSON.stringify(params)}`);
    ctx.log.info(`actor name ${f.name}, address ${addr}, seeds ${seeds.join(', ') || '(none: first node)'}${tls ? ', mutual TLS' : ''}`);

    let system: ActorSystem;
    try {
      system = await startSystem({
        addr,
        seeds,
        ...(cluster === undefined ? {} : { cluster }),
        ...(tls === undefined ? {} : { tls }),
        ...(metricsAddr === undefined ? {} : { metricsAddr }),
        insecure: f.insecure || settings.get<boolean>('node.insecure') === true,
        timers: timerSettings(settings),
        limits: limitSettings(settings),
        testFaults: ctx.env.ACTORCTL_TEST_FAULTS === '1',
        log: (m) => ctx.log.info(m),
        warn: (m) => ctx.log.warn(m),
      });
    } catch (error) {
      if (error instanceof ToolError) throw error;
      const e = error as NodeJS.ErrnoException & { port?: number };
      // Which of the two listeners failed: the metrics one when its port is the one named.
      const [flag, value] = metricsAddr !== undefined && e.port !== undefined && metricsAddr.endsWith(`:${e.port}`) ? ['--metrics-addr', metricsAddr] : ['--addr', addr];
      throw listenFailure(`${flag} ${value}`, e);
    }
    try {
      await system.spawn(loaded.cls, { name: f.name, params, metadata: { module: loaded.module } });
    } catch (error) {
      await system.shutdown();
      const message = `${f.classPath}: could not start: ${(error as Error).message}`;
      // A typed error keeps its exit code: the Router's port in use is a conflict, as the node's is.
      throw error instanceof ToolError ? new ToolError(error.exitCode, message, { hint: error.hint, cause: error }) : new InvalidInputError(message, { cause: error });
    }
    if (system.metricsAddress) ctx.log.info(`observers over HTTP/1.1 at http://${system.metricsAddress}/metrics`);
    ctx.stdout.write(`[${f.name}] Started at ${system.addr} (node ${system.nodeId})\n`);
    if (!ctx.signal.aborted) await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
    ctx.log.info(`[${f.name}] stopping: leaving the cluster`);
    await system.shutdown();
    ctx.log.info(`[${f.name}] stopped`);
  },
});
