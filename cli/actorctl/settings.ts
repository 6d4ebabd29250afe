/**
 * actorctl's configuration file (`-c FILE`, `$ACTORCTL_CONFIG`, `~/.config/actorctl/config.toml`)
 * and `-D table.key=value`: the cluster (name, seeds, membership timers), the node (address,
 * metrics address, insecure), mutual TLS (CA, certificate, key) and the node's limits. Each command
 * reads what it needs here; its own flags win over `-D`, which wins over the file.
 */
import { InvalidInputError } from '../../lib/errors.js';
import { DEFAULT_CLUSTER, LIMIT_SETTING_KEYS, TIMER_SETTING_KEYS, clusterNameProblem, parseAddr, type MembershipTimers, type ServerLimits, type TlsFiles } from '../../framework/index.js';
import type { ConfigSchema, SettingKind, Settings } from '../kit/config-file.js';
import { MAX_DURATION_MS, type ParsedArgs } from '../kit/flags.js';
import type { OptionSpec } from '../kit/program.js';

/** Counts (indirect probes, the retransmit factor) may be 0; periods may not, they would spin. */
const timerKind = (key: string): SettingKind => (key.endsWith('_ms') ? 'positive' : 'integer');

export const ACTORCTL_CONFIG: ConfigSchema = {
  cluster: {
    name: 'text',
    seeds: 'list',
    ...Object.fromEntries([...TIMER_SETTING_KEYS.keys()].map((k) => [k.slice('cluster.'.length), timerKind(k)])),
  },
  node: { addr: 'text', metrics_addr: 'text', insecure: 'boolean' },
  tls: { ca: 'path', cert: 'path', key: 'path' },
  limits: Object.fromEntries([...LIMIT_SETTING_KEYS.keys()].map((k) => [k.slice('limits.'.length), 'positive' as const])),
};

export const CLUSTER_OPTION: OptionSpec = { flags: '--cluster <name>', description: `cluster name (default: [cluster] name, else the certificate's, else ${DEFAULT_CLUSTER})` };

export const TLS_OPTIONS: OptionSpec[] = [
  { flags: '--tls-ca <file>', description: 'mutual TLS: the cluster CA certificate (default: [tls] ca)' },
  { flags: '--tls-cert <file>', description: 'mutual TLS: this certificate, signed by the CA (default: [tls] cert)' },
  { flags: '--tls-key <file>', description: 'mutual TLS: its private key (default: [tls] key)' },
];

/** What a command connecting to a cluster was given on its command line. */
export interface ConnectFlags {
  cluster: string | undefined;
  tls: Partial<TlsFiles>;
}

/** `--cluster`, checked. */
export function clusterFlag(args: ParsedArgs): string | undefined {
  const cluster = args.text('--cluster');
  const problem = cluster === undefined ? undefined : clusterNameProblem(cluster);
  if (problem) throw new InvalidInputError(`--cluster: ${problem}`);
  return cluster;
}

export function connectFlags(args: ParsedArgs): ConnectFlags {
  const cluster = clusterFlag(args);
  const tls: Partial<TlsFiles> = {};
  for (const part of ['ca', 'cert', 'key'] as const) {
    const file = args.text(`--tls-${part}`);
    if (file !== undefined) tls[part] = file;
  }
  return { cluster, tls };
}

/** The cluster's name from --cluster, else the settings; undefined lets the certificate (or the default) decide. */
export function clusterSetting(settings: Settings, flag: string | undefined): string | undefined {
  const name = flag ?? settings.get<string>('cluster.name');
  const problem = name === undefined || flag !== undefined ? undefined : clusterNameProblem(name);
  if (problem) throw new InvalidInputError(`${settings.source('cluster.name')}: ${problem}`);
  return name;
}

/** The TLS files from the flags over the settings: all three, or none (plain h2c). */
export function tlsSetting(settings: Settings, flags: ConnectFlags): TlsFiles | undefined {
  const pick = (part: keyof TlsFiles): string | undefined => flags.tls[part] ?? settings.get<string>(`tls.${part}`);
  const files = { ca: pick('ca'), cert: pick('cert'), key: pick('key') };
  const missing = (Object.keys(files) as Array<keyof TlsFiles>).filter((k) => files[k] === undefined);
  if (missing.length === 3) return undefined;
  if (missing.length) {
    throw new InvalidInputError(`mutual TLS needs a CA, a certificate and a key; ${missing.map((k) => `--tls-${k} ([tls] ${k})`).join(' and ')} missing`);
  }
  return files as TlsFiles;
}

/** Seed addresses: `--seeds` when given, else `[cluster] seeds`, each checked as host:port. */
export function seedsSetting(settings: Settings, fromFlag: string[]): string[] {
  if (fromFlag.length) return fromFlag;
  const seeds = settings.get<string[]>('cluster.seeds') ?? [];
  for (const seed of seeds) addressSetting(settings, 'cluster.seeds', seed);
  return seeds;
}

/** A host:port from the settings, or an error naming where it came from. */
export function addressSetting(settings: Settings, key: string, value: string): string {
  try {
    parseAddr(value);
  } catch {
    throw new InvalidInputError(`${settings.source(key)}: '${value}' is not host:port`);
  }
  return value;
}

/** The largest value HTTP/2 SETTINGS carry (32 bits): limits.max_streams is sent as one, and Node refuses more at each connection. */
const MAX_SETTINGS_VALUE = 2 ** 32 - 1;

/** The largest value of a numeric setting, where one applies: every `*_ms` key is a timer. */
function settingMax(key: string): number | undefined {
  if (key.endsWith('_ms')) return MAX_DURATION_MS;
  return key === 'limits.max_streams' ? MAX_SETTINGS_VALUE : undefined;
}

/** The numbers set for the keys of `keys` (`[table] key` or `-D table.key`), under the names it maps them to. */
function numberSettings<K extends string>(settings: Settings, keys: ReadonlyMap<string, K>): Partial<Record<K, number>> {
  const values: Partial<Record<K, number>> = {};
  for (const [key, name] of keys) {
    const value = settings.get<number>(key);
    if (value === undefined) continue;
    const max = settingMax(key);
    if (max !== undefined && value > max) throw new InvalidInputError(`${settings.source(key)}: ${value} is more than ${max}, the most it may be`);
    values[name] = value;
  }
  return values;
}

/** Membership timers set by `[cluster]` keys or `-D cluster.*`. */
export function timerSettings(settings: Settings): Partial<MembershipTimers> {
  return numberSettings(settings, TIMER_SETTING_KEYS);
}

/** Node limits set by `[limits]` keys or `-D limits.*`. */
export function limitSettings(settings: Settings): Partial<ServerLimits> {
  return numberSettings(settings, LIMIT_SETTING_KEYS);
}
