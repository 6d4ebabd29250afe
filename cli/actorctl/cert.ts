/**
 * `actorctl cert ca|node|client`: the certificates of a cluster's mutual TLS. stdout gets the
 * paths written (certificate, then key), one per line.
 */
import { hostname } from 'node:os';
import { InvalidInputError } from '../../lib/errors.js';
import { DEFAULT_CLUSTER, createCa, createCertificate, type CertificateFiles, type LeafRequest } from '../../framework/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { defineCommand, type CommandContext } from '../kit/program.js';
import { CLUSTER_OPTION, clusterFlag, clusterSetting } from './settings.js';

const DIR_OPTION = { flags: '--dir <dir>', description: 'where the CA is: ca.crt and ca.key', default: '.' };
const FORCE_OPTION = { flags: '--force', description: 'replace existing files' };
const MAX_DAYS = 36_500;

/** `--days`: a whole number of days, 1 to 100 years. */
function days(args: ParsedArgs, fallback: number): number {
  const n = args.number('--days', fallback, { integer: true, min: 1 });
  if (n > MAX_DAYS) throw new InvalidInputError(`invalid --days ${n}: at most ${MAX_DAYS}`);
  return n;
}

function printFiles(ctx: CommandContext, files: CertificateFiles): void {
  for (const warning of files.warnings) ctx.log.warn(warning);
  ctx.stdout.write(`${files.cert}\n${files.key}\n`);
}

export const certCaCommand = defineCommand({
  name: 'cert ca',
  description: 'make a cluster CA: <dir>/ca.crt (give it to every node and client) and <dir>/ca.key (mode 0600; keep it where certificates are made)',
  options: [DIR_OPTION, { flags: '--days <n>', description: 'validity', default: '3650' }, FORCE_OPTION],
  examples: ['actorctl cert ca --dir certs'],
  flags: (args: ParsedArgs) => ({ dir: args.text('--dir') ?? '.', days: days(args, 3650), force: args.has('--force') }),
  async run(ctx, request) {
    printFiles(ctx, await createCa(request));
  },
});

interface LeafFlags extends Omit<LeafRequest, 'cluster'> {
  /** `--cluster`; unset: the configured cluster, else the default. */
  cluster: string | undefined;
}

function leafFlags(kind: LeafRequest['kind']): (args: ParsedArgs) => LeafFlags {
  return (args) => {
    const dir = args.text('--dir') ?? '.';
    // Only a node is reached at an address; a client certificate names none.
    const hosts = kind === 'node' ? (args.text('--host') ?? '').split(',').map((h) => h.trim()).filter(Boolean) : [];
    return {
      kind,
      name: args.requiredPositional(0, 'NAME'),
      hosts: kind === 'node' && !hosts.length ? ['localhost', '127.0.0.1', '::1', hostname()] : hosts,
      dir,
      out: args.text('--out') ?? dir,
      days: days(args, 365),
      force: args.has('--force'),
      cluster: clusterFlag(args),
    };
  };
}

async function issue(ctx: CommandContext, { cluster: flag, ...request }: LeafFlags): Promise<void> {
  const cluster = clusterSetting(ctx.settings, flag) ?? DEFAULT_CLUSTER;
  printFiles(ctx, await createCertificate({ ...request, cluster }));
}

const LEAF_OPTIONS = [
  DIR_OPTION,
  { flags: '--out <dir>', description: 'where to write <name>.crt and <name>.key (default: --dir)' },
  CLUSTER_OPTION,
  { flags: '--days <n>', description: 'validity', default: '365' },
  FORCE_OPTION,
];

export const certNodeCommand = defineCommand({
  name: 'cert node <name>',
  description: 'make a node certificate signed by the CA: it serves, calls and takes part in membership of its cluster',
  options: [...LEAF_OPTIONS, { flags: '--host <names>', description: 'comma-separated DNS names and IP addresses it is reached at (default: localhost, 127.0.0.1, ::1 and this host\'s name)' }],
  examples: ['actorctl cert node n1 --dir certs --cluster prod --host 10.0.0.5,n1.internal'],
  flags: leafFlags('node'),
  run: issue,
});

export const certClientCommand = defineCommand({
  name: 'cert client <name>',
  description: 'make a client certificate signed by the CA: it may inspect and call, never join the cluster',
  options: LEAF_OPTIONS,
  examples: ['actorctl cert client ops --dir certs --cluster prod'],
  flags: leafFlags('client'),
  run: issue,
});
