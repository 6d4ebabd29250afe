/**
 * `trajstore serve catalog ...`: manages the directory service's ACL file. These commands rewrite
 * the file (atomically, mode 0600, created when missing) and never start a server; `serve
 * --catalog-config FILE` reads it when it starts, so restart it to apply a change.
 *
 *   serve catalog dataset add    --catalog-config FILE NAME --uri URI [--endpoint URL] [--region R] [--access-key K --secret-key K]
 *   serve catalog dataset remove --catalog-config FILE NAME...
 *   serve catalog dataset list   --catalog-config FILE [--format table|json]
 *   serve catalog issue          --catalog-config FILE NAME [--rotate]
 *   serve catalog grant|revoke   --catalog-config FILE NAME DATASET...
 */
import { InvalidInputError } from '../../lib/errors.js';
import { readBounded } from '../../lib/streams.js';
import {
  addCatalogDataset,
  changeCatalogGrants,
  issueCatalogUser,
  listCatalogDatasets,
  removeCatalogDatasets,
  type LibraryRequest,
} from '../../pipelines/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { defineCommand, type CommandContext } from '../kit/program.js';
import { FORMAT_OPTIONS, printRows, rowView, type RowView } from '../kit/render.js';
import { closest } from '../kit/suggest.js';
import { SECRET_KEY_ENV } from './credentials.js';

const ACTIONS = ['dataset add', 'dataset remove', 'dataset list', 'issue', 'grant', 'revoke'] as const;
type Action = (typeof ACTIONS)[number];

interface CatalogFlags {
  action: Action;
  /** The words after the action: names of users and datasets. */
  names: string[];
  file: string;
  library: Omit<LibraryRequest, 'name' | 'secretKey'> & { secretKeyFrom?: 'argv' | 'stdin' | 'env'; secretKey?: string };
  rotate: boolean;
  view: RowView;
}

function actionOf(words: readonly string[]): { action: Action; names: string[] } {
  const [first, second] = words;
  if (first === undefined) throw new InvalidInputError('`serve catalog` needs a subcommand', { hint: `one of: ${ACTIONS.join(', ')}` });
  const two = `${first} ${second ?? ''}`;
  if (first === 'dataset') {
    if ((ACTIONS as readonly string[]).includes(two)) return { action: two as Action, names: words.slice(2) };
    throw new InvalidInputError(second === undefined ? '`serve catalog dataset` needs add, remove or list' : `unknown command \`serve catalog dataset ${second}\``, { hint: 'one of: dataset add, dataset remove, dataset list' });
  }
  if ((ACTIONS as readonly string[]).includes(first)) return { action: first as Action, names: words.slice(1) };
  const guess = closest(first, [...ACTIONS.map((a) => a.split(' ')[0] as string)]);
  throw new InvalidInputError(`unknown command \`serve catalog ${first}\``, { hint: guess ? `did you mean \`serve catalog ${guess}\`?` : `one of: ${ACTIONS.join(', ')}` });
}

/** Options only some actions take: given to another, they are a mistake worth saying. */
const ONLY_FOR: Record<string, Action> = { '--uri': 'dataset add', '--endpoint': 'dataset add', '--region': 'dataset add', '--access-key': 'dataset add', '--secret-key': 'dataset add', '--secret-key-stdin': 'dataset add', '--rotate': 'issue' };

function flags(args: ParsedArgs): CatalogFlags {
  const { action, names } = actionOf(args.variadic(0));
  for (const [flag, owner] of Object.entries(ONLY_FOR)) if (owner !== action && args.given(flag)) throw new InvalidInputError(`${flag} applies to \`serve catalog ${owner}\` only`);
  const file = args.required('--catalog-config', 'the directory ACL file (created when missing)');
  const arity = (min: number, max: number, what: string): void => {
    if (names.length < min || names.length > max) throw new InvalidInputError(`\`serve catalog ${action}\` takes ${what}; got ${names.length === 0 ? 'none' : names.map((n) => JSON.stringify(n)).join(' ')}`);
  };
  if (action === 'dataset add' || action === 'issue') arity(1, 1, 'one NAME');
  if (action === 'dataset remove') arity(1, Infinity, 'NAME...');
  if (action === 'dataset list') arity(0, 0, 'no names');
  if (action === 'grant' || action === 'revoke') arity(2, Infinity, 'NAME DATASET...');
  const secretArgv = args.text('--secret-key');
  if (secretArgv !== undefined && args.has('--secret-key-stdin')) throw new InvalidInputError('give --secret-key or --secret-key-stdin, not both');
  const library: CatalogFlags['library'] = { uri: action === 'dataset add' ? args.required('--uri', 'a local path or s3://bucket/prefix') : '' };
  for (const [flag, key] of [['--endpoint', 'endpoint'], ['--region', 'region'], ['--access-key', 'accessKey']] as const) {
    const value = args.text(flag);
    if (value === '') throw new InvalidInputError(`${flag} is empty`);
    if (value !== undefined) library[key] = value;
  }
  if (secretArgv === '') throw new InvalidInputError('--secret-key is empty');
  if (secretArgv !== undefined) Object.assign(library, { secretKey: secretArgv, secretKeyFrom: 'argv' });
  else if (args.has('--secret-key-stdin')) library.secretKeyFrom = 'stdin';
  return { action, names, file, library, rotate: args.has('--rotate'), view: rowView(args) };
}

/** The library's secret key: from argv (warned about), stdin, or $TRAJSTORE_SECRET_KEY when an access key is given. */
async function secretKeyOf(ctx: CommandContext, library: CatalogFlags['library']): Promise<string | undefined> {
  if (library.secretKeyFrom === 'argv') {
    ctx.log.warn(`--secret-key on the command line is visible to other users (ps, shell history); prefer ${SECRET_KEY_ENV} or --secret-key-stdin`);
    return library.secretKey;
  }
  if (library.secretKeyFrom === 'stdin') {
    const line = (await readBounded(ctx.stdin, 64 * 1024))?.toString('utf8').split(/\r?\n/)[0] ?? '';
    if (line === '') throw new InvalidInputError('--secret-key-stdin: stdin gave no key (one line is read)');
    return line;
  }
  return library.accessKey !== undefined ? ctx.env[SECRET_KEY_ENV] || undefined : undefined;
}

function restartNotice(ctx: CommandContext, file: string): void {
  ctx.stderr.write(`trajstore: ${file} changed; restart \`trajstore serve --catalog-config ${file}\` to apply\n`);
}

export const catalogCommand = defineCommand({
  name: 'serve catalog [...words]',
  description: 'manage the directory service ACL file (datasets, users and their keys, grants); never starts a server',
  options: [
    { flags: '--catalog-config <file>', description: 'the directory ACL file (created when missing, mode 0600)' },
    { flags: '--uri <uri>', description: 'dataset add: a local path or s3://bucket/prefix (registered only: no data is created or deleted)' },
    { flags: '--endpoint <url>', description: 'dataset add: object-store endpoint of an s3:// library' },
    { flags: '--region <region>', description: 'dataset add: region of an s3:// library (default us-west-2)' },
    { flags: '--access-key <key>', description: 'dataset add: access key of an s3:// library' },
    { flags: '--secret-key <key>', description: `dataset add: its secret key (visible in ps: prefer --secret-key-stdin or $${SECRET_KEY_ENV})` },
    { flags: '--secret-key-stdin', description: 'dataset add: read the secret key from the first line of stdin' },
    { flags: '--rotate', description: 'issue: replace an existing user\'s keys' },
    ...FORMAT_OPTIONS,
  ],
  examples: [
    'trajstore serve catalog dataset add --catalog-config acl.toml prod --uri /data/prod',
    'trajstore serve catalog dataset add --catalog-config acl.toml lake --uri s3://bucket/lake --endpoint http://127.0.0.1:9000 --access-key AK --secret-key-stdin',
    'trajstore serve catalog issue --catalog-config acl.toml alice',
    'trajstore serve catalog grant --catalog-config acl.toml alice prod lake',
    'trajstore serve catalog revoke --catalog-config acl.toml alice lake',
    'trajstore serve catalog dataset list --catalog-config acl.toml --format json',
  ],
  flags,
  async run(ctx, f) {
    switch (f.action) {
      case 'dataset add': {
        const secretKey = await secretKeyOf(ctx, f.library);
        const { secretKeyFrom: _from, secretKey: _argv, ...library } = f.library;
        const added = await addCatalogDataset(f.file, { ...library, name: f.names[0] as string, ...(secretKey !== undefined ? { secretKey } : {}) });
        ctx.stdout.write(`registered dataset ${added.name} (${added.uri}) in ${f.file}\n`);
        restartNotice(ctx, f.file);
        return;
      }
      case 'dataset remove': {
        const removed = await removeCatalogDatasets(f.file, f.names);
        ctx.stdout.write(`removed dataset${removed.length === 1 ? '' : 's'} ${removed.join(', ')} from ${f.file} (their data is untouched)\n`);
        restartNotice(ctx, f.file);
        return;
      }
      case 'dataset list': {
        const rows = (await listCatalogDatasets(f.file)).map((l) => ({ ...l, users: f.view.format === 'json' ? l.users : l.users.join(',') }));
        printRows(ctx, f.view, [{ key: 'name' }, { key: 'kind' }, { key: 'uri' }, { key: 'endpoint' }, { key: 'region' }, { key: 'credentials' }, { key: 'users' }], rows, 'no datasets');
        return;
      }
      case 'issue': {
        const issued = await issueCatalogUser(f.file, f.names[0] as string, f.rotate);
        if (f.view.format === 'json') ctx.stdout.write(`${JSON.stringify({ user: issued.name, access_key: issued.access_key, secret_key: issued.secret_key }, null, 2)}\n`);
        else ctx.stdout.write(`user        ${issued.name}\naccess_key  ${issued.access_key}\nsecret_key  ${issued.secret_key}\n`);
        ctx.stderr.write('trajstore: the secret key is shown only this once: the file keeps a salted hash of it. Hand both keys to the user; they pin the service with\n');
        ctx.stderr.write(`trajstore:   trajstore dataset pin team catalog://127.0.0.1:PORT --ak ${issued.access_key} --sk-stdin\n`);
        restartNotice(ctx, f.file);
        return;
      }
      case 'grant':
      case 'revoke': {
        const [user, ...datasets] = f.names as [string, ...string[]];
        const after = await changeCatalogGrants(f.file, user, datasets, f.action);
        ctx.stdout.write(`${f.action === 'grant' ? 'granted' : 'revoked'} ${datasets.join(', ')} ${f.action === 'grant' ? 'to' : 'from'} ${user}; ${user} now has: ${after.length > 0 ? after.join(', ') : '(nothing)'}\n`);
        restartNotice(ctx, f.file);
        return;
      }
    }
  },
});
