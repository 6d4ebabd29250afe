/**
 * What the actorctl commands share: node addresses given on the command line (`--addr`, `--seeds`,
 * `--endpoint`), and the options of the inspect commands with what they report on stderr.
 */
import { InvalidInputError } from '../../lib/errors.js';
import { DEFAULT_NODE_PORT, normalizeAddr, parseAddr, type InspectOptions, type NodeFailure } from '../../framework/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import type { CommandContext, OptionSpec } from '../kit/program.js';
import { CLUSTER_OPTION, TLS_OPTIONS, clusterSetting, connectFlags, seedsSetting, tlsSetting, type ConnectFlags } from './settings.js';

/** One address of a node, `host:port`; inspect also takes a bare host (port 8000) or an http:// URL (`lenient`). */
export function nodeAddress(args: ParsedArgs, long: string, { lenient = false } = {}): string | undefined {
  const text = args.text(long);
  return text === undefined ? undefined : checkedAddress(args, long, text, lenient);
}

/** A comma-separated list of node addresses (`--seeds`), each checked like `nodeAddress`. */
export function nodeAddresses(args: ParsedArgs, long: string, { lenient = false } = {}): string[] {
  const words = (args.text(long) ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  return words.map((word) => checkedAddress(args, long, word, lenient));
}

function checkedAddress(args: ParsedArgs, long: string, word: string, lenient: boolean): string {
  const addr = lenient ? normalizeAddr(word) : word;
  try {
    parseAddr(addr);
  } catch {
    throw new InvalidInputError(`${args.display(long)}: '${word}' is not host:port`);
  }
  return addr;
}

export const SEEDS_OPTION: OptionSpec = { flags: '--seeds <addrs>', description: `comma-separated node addresses (host:port; port ${DEFAULT_NODE_PORT} when omitted; default: [cluster] seeds)` };

export const INSPECT_OPTIONS: OptionSpec[] = [
  { flags: '--timeout <seconds>', description: 'request timeout', default: '10.0' },
  { flags: '--best_effort <bool>', description: 'True: list failing nodes and show the rest', default: 'False' },
  CLUSTER_OPTION,
  ...TLS_OPTIONS,
];

/** What the inspect commands read from their command line. */
export interface InspectFlags {
  seeds: string[];
  timeoutMs: number;
  bestEffort: boolean;
  connect: ConnectFlags;
}

/** `--seeds`, `--timeout`, `--best_effort`, `--cluster` and the TLS files. */
export function inspectFlags(args: ParsedArgs): InspectFlags {
  return {
    seeds: nodeAddresses(args, '--seeds', { lenient: true }),
    timeoutMs: args.seconds('--timeout', 10, 0.001),
    bestEffort: args.bool('--best_effort', false),
    connect: connectFlags(args),
  };
}

/**
 * The inspect options: the flags over the configuration (seeds, cluster, TLS); seeds are required
 * unless `seedsRequired` is false. `orElse` is another way a command takes to name its nodes, for the hint.
 */
export function inspectOptions(ctx: CommandContext, flags: InspectFlags, seedsRequired = true, orElse?: string): InspectOptions {
  const seeds = seedsSetting(ctx.settings, flags.seeds).map(normalizeAddr);
  if (seedsRequired && seeds.length === 0) {
    throw new InvalidInputError('--seeds needs at least one address (host:port)', { hint: `or set seeds in [cluster] of the configuration file${orElse ? `, or ${orElse}` : ''}` });
  }
  return {
    seeds,
    timeoutMs: flags.timeoutMs,
    bestEffort: flags.bestEffort,
    cluster: clusterSetting(ctx.settings, flags.connect.cluster),
    tls: tlsSetting(ctx.settings, flags.connect),
  };
}

/** With --best_effort, the members that did not answer are named on stderr and the rest is shown. */
export function warnFailures(ctx: CommandContext, failures: readonly NodeFailure[]): void {
  if (failures.length === 0) return;
  ctx.log.warn(`failed to query ${failures.length} node(s): ${failures.map((f) => `${f.node_id} (${f.addr}): ${f.error}`).join('; ')}`);
}
