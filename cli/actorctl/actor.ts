/**
 * `actorctl actor <class path>`: starts one actor in an actor system node and runs until signalled.
 * Its result, on stdout, is the one line `[name] Started at <addr> (node <id>)`: the address the
 * node bound (port 0 picks one) and its id, which scripts read to reach it. What it loaded and how
 * it stops are diagnostics, on stderr (`--log-level info`).
 */
import { InvalidInputError } from '../../lib/errors.js';
import { TIMER_SETTING_KEYS, actorParams, describeActorClass, loadActorClass, startSystem, type ActorSystem, type MembershipTimers } from '../../framework/index.js';
import { parseNumber, type ParsedArgs } from '../kit/flags.js';
import { defineCommand, type OptionSpec } from '../kit/program.js';
import { nodeAddress, nodeAddresses } from './common.js';

/** The `-D` key whose value is a JSON object of constructor parameters. */
const EXTRA_KWARGS = 'actor.extra_kwargs';

interface ActorFlags {
  classPath: string;
  name: string;
  addr: string;
  seeds: string[];
  timers: Partial<MembershipTimers>;
  /** The JSON objects of `-D actor.extra_kwargs`, in order (checked once the class is loaded). */
  paramJson: string[];
  /** `--key value` words after `--`, for the constructor. */
  paramWords: readonly string[];
}

function flags(args: ParsedArgs): ActorFlags {
  const timers: Partial<MembershipTimers> = {};
  const paramJson: string[] = [];
  for (const define of args.list('--define')) {
    const eq = define.indexOf('=');
    if (eq < 0) throw new InvalidInputError(`-D ${define}: expected key=value`);
    const key = define.slice(0, eq);
    const value = define.slice(eq + 1);
    const timer = TIMER_SETTING_KEYS.get(key);
    if (key === EXTRA_KWARGS) paramJson.push(value);
    // Periods of 0 ms would spin; counts (indirect_probes) may be 0.
    else if (timer) timers[timer] = parseNumber(`-D ${key}`, value, { min: 0, exclusive: key.endsWith('_ms') });
    else throw new InvalidInputError(`-D ${key}: unknown key (accepted: ${EXTRA_KWARGS}, ${[...TIMER_SETTING_KEYS.keys()].join(', ')})`);
  }
  return {
    classPath: args.requiredPositional(0, 'CLASS_PATH'),
    name: args.text('--name') ?? 'worker',
    addr: nodeAddress(args, '--addr') ?? '0.0.0.0:8000',
    seeds: nodeAddresses(args, '--seeds'),
    timers,
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
  description: 'start an actor of a class in an actor system node; runs until SIGINT/SIGTERM, then leaves the cluster',
  options: [
    { flags: '--addr <host:port>', description: 'bind address of the actor system (port 0 picks a free port)', default: '0.0.0.0:8000' },
    { flags: '--seeds <addrs>', description: 'comma-separated seed node addresses to join' },
    { flags: '--name <name>', description: 'name of the actor, resolvable cluster-wide', default: 'worker' },
    {
      flags: '-D, --define <key=value>',
      description: `${EXTRA_KWARGS}=<JSON object> (constructor parameters), or a membership setting (milliseconds, or a count): ${[...TIMER_SETTING_KEYS.keys()].join(', ')}`,
    },
  ],
  examples: [
    'actorctl actor framework.examples.Echo --addr 127.0.0.1:8000 --name echo -- --prefix "re: " --start -5',
    "actorctl actor framework.examples.Echo --addr 127.0.0.1:8001 --seeds 127.0.0.1:8000 -D 'actor.extra_kwargs={\"prefix\":\">\"}'",
  ],
  helpOptions: classParameters,
  flags,
  async run(ctx, f) {
    const loaded = await loadActorClass(f.classPath);
    let params: Record<string, unknown>;
    try {
      params = await actorParams(loaded.meta.params, { json: f.paramJson, words: f.paramWords });
    } catch (error) {
      if (!(error instanceof InvalidInputError)) throw error;
      throw new InvalidInputError(error.message, { hint: `run \`actorctl actor ${f.classPath} --help\` for the constructor parameters` });
    }
    ctx.log.info(`loaded actor class ${f.classPath}: ${loaded.className} from ${loaded.module}`);
    ctx.log.info(`constructor parameters: ${JSON.stringify(params)}`);
    ctx.log.info(`actor name ${f.name}, address ${f.addr}, seeds ${f.seeds.join(', ') || '(none: first node)'}`);

    let system: ActorSystem;
    try {
      system = await startSystem({
        addr: f.addr,
        seeds: f.seeds,
        timers: f.timers,
        testFaults: ctx.env.ACTORCTL_TEST_FAULTS === '1',
        log: (m) => ctx.log.info(m),
        warn: (m) => ctx.log.warn(m),
      });
    } catch (error) {
      const e = error as NodeJS.ErrnoException;
      if (e.code === 'EADDRINUSE' || e.code === 'EADDRNOTAVAIL' || e.code === 'EACCES') throw new InvalidInputError(`--addr ${f.addr}: cannot bind (${e.code})`);
      throw new InvalidInputError(`--addr ${f.addr}: ${e.message}`);
    }
    try {
      await system.spawn(loaded.cls, { name: f.name, params, metadata: { module: loaded.module } });
    } catch (error) {
      await system.shutdown();
      throw new InvalidInputError(`${f.classPath}: could not start: ${(error as Error).message}`);
    }
    ctx.stdout.write(`[${f.name}] Started at ${system.addr} (node ${system.nodeId})\n`);
    if (!ctx.signal.aborted) await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
    ctx.log.info(`[${f.name}] stopping: leaving the cluster`);
    await system.shutdown();
    ctx.log.info(`[${f.name}] stopped`);
  },
});
