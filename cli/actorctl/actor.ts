/** `actorctl actor <class path>`: starts one actor in an actor system node and runs until signalled. */
import { defineCommand, type OptionSpec } from '../kit/program.js';
import { InvalidInputError } from '../../lib/errors.js';
// members.js is a leaf module of constants and types; the rest of the framework is loaded by `run`.
import { TIMER_SETTING_KEYS as TIMER_KEYS, type MembershipTimers } from '../../framework/core/members.js';
import type { ActorSystem } from '../../framework/core/system.js';

const OPTIONS: OptionSpec[] = [
  { flags: '--addr <host:port>', description: 'bind address of the actor system (port 0 picks a free port)', default: '0.0.0.0:8000' },
  { flags: '--seeds <addrs>', description: 'comma-separated seed node addresses to join' },
  { flags: '--name <name>', description: 'name of the actor, resolvable cluster-wide', default: 'worker' },
  {
    flags: '-D, --define <key=value>',
    description: `actor.extra_kwargs=<JSON object> (constructor parameters), or a membership setting (milliseconds, or a count): ${[...TIMER_KEYS.keys()].join(', ')}`,
  },
];

/**
 * `actorctl actor <class> --help` lists the class's constructor parameters. The kit prints help
 * before any command runs, so the class is described here, when the module is loaded; the loader
 * itself is imported only then, so `actorctl --help` and the other commands stay cheap.
 */
async function classHelp(argv: string[]): Promise<OptionSpec[]> {
  // The command word is the first word that is not a global option or its value.
  let at = -1;
  for (let i = 0; i < argv.length && at < 0; i++) {
    if (['-c', '--config', '--log-level'].includes(argv[i]!)) i++;
    else if (!argv[i]!.startsWith('-')) at = argv[i] === 'actor' ? i : argv.length;
  }
  if (at >= argv.length) return [];
  const dash = argv.indexOf('--');
  const words = dash < 0 ? argv : argv.slice(0, dash);
  const classPath = argv[at + 1];
  if (at < 0 || !classPath || classPath.startsWith('-') || !words.some((w) => w === '--help' || w === '-h')) return [];
  const { describeParams, loadActorClass, LoadError } = await import('../../framework/core/loader.js');
  try {
    const loaded = await loadActorClass(classPath);
    return describeParams(loaded.meta.params).map((p) => ({
      flags: `-- --${p.name} <${p.type}>`,
      description: `${loaded.className} constructor parameter${p.description ? `: ${p.description}` : ''}${p.required ? ' (required)' : ''}`,
      ...(p.default === undefined ? {} : { default: JSON.stringify(p.default) }),
    }));
  } catch (error) {
    const tried = error instanceof LoadError ? ` (tried: ${error.tried.join('; ')})` : '';
    return [{ flags: '-- ...', description: `cannot list constructor parameters: ${(error as Error).message}${tried}` }];
  }
}

const helpParams = await classHelp(process.argv.slice(2));

export const actorCommand = defineCommand({
  name: 'actor <classPath>',
  description: 'start an actor of a class in an actor system node; runs until SIGINT/SIGTERM, then leaves the cluster',
  options: [...OPTIONS, ...helpParams],
  examples: [
    'actorctl actor framework.examples.Echo --addr 127.0.0.1:8000 --name echo -- --prefix "re: " --start -5',
    "actorctl actor framework.examples.Echo --addr 127.0.0.1:8001 --seeds 127.0.0.1:8000 -D 'actor.extra_kwargs={\"prefix\":\">\"}'",
  ],
  flags: (args) => args,
  async run(ctx, args) {
    const { finishParams, loadActorClass, LoadError, ParamError, parseParamJson, parseParamWords } = await import('../../framework/core/loader.js');
    const { ActorSystem } = await import('../../framework/core/system.js');
    const { parseAddr } = await import('../../framework/core/address.js');
    const classPath = args.requiredPositional(0, 'CLASS_PATH');
    let loaded;
    try {
      loaded = await loadActorClass(classPath);
    } catch (error) {
      if (!(error instanceof LoadError)) throw error;
      throw new InvalidInputError(`${error.message}`, { hint: error.tried.length ? `tried: ${error.tried.join('; ')}` : 'example: framework.examples.Echo' });
    }
    const schema = loaded.meta.params;
    const defines = args.list('--define');
    const timers: Partial<MembershipTimers> = {};
    let params: Record<string, unknown> = {};
    try {
      for (const define of defines) {
        const eq = define.indexOf('=');
        const key = eq < 0 ? define : define.slice(0, eq);
        const value = define.slice(eq + 1);
        if (eq < 0) throw new ParamError(`-D ${define}: expected key=value`);
        if (key === 'actor.extra_kwargs') params = { ...params, ...parseParamJson(value, schema) };
        else if (TIMER_KEYS.has(key)) {
          const n = Number(value);
          // Periods of 0 ms would spin; counts (indirect_probes) may be 0.
          const isPeriod = key.endsWith('_ms');
          if (value.trim() === '' || !Number.isFinite(n) || n < 0 || (isPeriod && n === 0)) {
            throw new ParamError(`-D ${key}: '${value}' is not ${isPeriod ? 'a positive number of milliseconds' : 'a non-negative number'}`);
          }
          timers[TIMER_KEYS.get(key)!] = n;
        } else throw new ParamError(`-D ${key}: unknown key (accepted: actor.extra_kwargs, ${[...TIMER_KEYS.keys()].join(', ')})`);
      }
      params = finishParams({ ...params, ...parseParamWords([...args.rest], schema) }, schema);
    } catch (error) {
      if (error instanceof ParamError) throw new InvalidInputError(error.message, { hint: `run \`actorctl actor ${classPath} --help\` for the constructor parameters` });
      throw error;
    }
    const name = args.text('--name') ?? 'worker';
    const addr = args.text('--addr') ?? '0.0.0.0:8000';
    const seeds = (args.text('--seeds') ?? '').split(',').map((s) => s.trim()).filter(Boolean);
    for (const seed of seeds) {
      try {
        parseAddr(seed);
      } catch {
        throw new InvalidInputError(`--seeds: '${seed}' is not host:port`);
      }
    }
    const out = (line: string): void => void ctx.stdout.write(`${line}\n`);
    out(`Loading actor class: ${classPath}`);
    out(`  Class: ${loaded.className}`);
    out(`  Module: ${loaded.module}`);
    out(`  Constructor parameters: ${JSON.stringify(params)}`);
    out(`  Actor name: ${name}`);
    out(`  Seeds: ${seeds.join(', ') || '(none: first node)'}`);
    out(`  Address: ${addr}`);

    let system: ActorSystem;
    try {
      system = await ActorSystem.start({
        addr,
        seeds,
        timers,
        testFaults: process.env.ACTORCTL_TEST_FAULTS === '1',
        log: (m) => ctx.log.info(m),
        warn: (m) => ctx.log.warn(m),
      });
    } catch (error) {
      const e = error as NodeJS.ErrnoException;
      if (e.code === 'EADDRINUSE' || e.code === 'EADDRNOTAVAIL' || e.code === 'EACCES') throw new InvalidInputError(`--addr ${addr}: cannot bind (${e.code})`);
      throw new InvalidInputError(`--addr ${addr}: ${e.message}`);
    }
    try {
      await system.spawn(loaded.cls, { name, params, metadata: { module: loaded.module } });
    } catch (error) {
      await system.shutdown();
      throw new InvalidInputError(`${classPath}: could not start: ${(error as Error).message}`);
    }
    out(`[${name}] Started at ${system.addr} (node ${system.nodeId})`);
    if (!ctx.signal.aborted) await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
    out(`[${name}] Stopping: leaving the cluster`);
    await system.shutdown();
    out(`[${name}] Stopped`);
  },
});
