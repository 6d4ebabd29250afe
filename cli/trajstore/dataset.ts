/**
 * `trajstore dataset pin|unpin|list|show|set|rename`: named pins in the user configuration.
 * The work is in pipelines/pins/manage.ts; credentials are gathered by pipelines/pins/credentials.ts
 * and never printed.
 */
import type { CommandContext, CommandSpec } from '../kit/program.js';
import type { Row } from '../kit/output.js';
// The credentials module is light (no TOML, no I/O at load) and names the variables for --help.
import { ACCESS_KEY_ENV, SECRET_KEY_ENV, readKeyPair } from '../../pipelines/pins/credentials.js';
import type { Pin } from '../../pipelines/pins/pins.js';

const FORMAT_OPTION = { flags: '--format <format>', description: 'table|json|jsonl|csv', default: 'table' };

function text(value: unknown, what: string): string {
  // Positionals arrive as strings; a flag value may not (cac turns `--region 1` into a number).
  if (typeof value === 'string') return value;
  if (typeof value === 'number') return String(value);
  throw new Error(`${what} missing`);
}

function optionalText(value: unknown): string | undefined {
  return value === undefined ? undefined : text(value, 'value');
}

function describe(pin: Pin): string {
  const target = pin.kind === 'local' ? pin.path : pin.uri;
  const details: string[] = [];
  if (pin.kind === 's3') {
    if (pin.endpoint) details.push(`endpoint ${pin.endpoint}`);
    details.push(`region ${pin.region}${pin.regionDefaulted ? ' (default)' : ''}`);
  }
  if (pin.kind !== 'local' && pin.credentials) details.push('credentials stored');
  return `@${pin.name} -> ${target}${details.length ? ` (${details.join(', ')})` : ''}`;
}

function printWarnings(ctx: CommandContext, warnings: string[]): void {
  for (const warning of warnings) ctx.log.warn(warning);
}

const pin: CommandSpec = {
  name: 'dataset pin <name> <uri>',
  description: 'name a dataset: a local path, s3://bucket/prefix or catalog://127.0.0.1:<port>',
  options: [
    { flags: '--ak <key>', description: `access key (or $${ACCESS_KEY_ENV}, or --ak-stdin)` },
    { flags: '--sk <key>', description: `secret key; visible in argv, so prefer $${SECRET_KEY_ENV}, --sk-stdin or the prompt on a terminal` },
    { flags: '--ak-stdin', description: 'read the access key from the first line of stdin' },
    { flags: '--sk-stdin', description: 'read the secret key from the next line of stdin' },
    { flags: '--endpoint <url>', description: 'object-store endpoint (http:// endpoints use plain HTTP); s3:// pins only' },
    { flags: '--region <region>', description: 'object-store region (default us-west-2); s3:// pins only' },
  ],
  examples: [
    'trajstore dataset pin work ~/datasets/work',
    `${ACCESS_KEY_ENV}=AK ${SECRET_KEY_ENV}=SK trajstore dataset pin lake s3://bucket/traces --endpoint http://127.0.0.1:9000`,
    'trajstore dataset pin default ~/datasets/main',
  ],
  async run(ctx, { positional, options }) {
    const { addPin, uriKind } = await import('../../pipelines/pins/manage.js');
    const env = process.env;
    const uri = text(positional[1], 'URI');
    const kind = uriKind(uri, env);
    const keys = await readKeyPair({
      ak: options.ak,
      sk: options.sk,
      akStdin: options.akStdin === true,
      skStdin: options.skStdin === true,
      env,
      stdin: ctx.stdin,
      stderr: ctx.stderr,
      required: kind === 'catalog',
      applicable: kind !== 'local',
      warn: (message) => ctx.log.warn(message),
    });
    const endpoint = optionalText(options.endpoint);
    const region = optionalText(options.region);
    const pinned = await addPin(ctx.config, env, {
      name: text(positional[0], 'NAME'),
      uri,
      ...(endpoint !== undefined ? { endpoint } : {}),
      ...(region !== undefined ? { region } : {}),
      ...keys,
    });
    ctx.stdout.write(`pinned ${describe(pinned)}\n`);
  },
};

const unpin: CommandSpec = {
  name: 'dataset unpin <name>',
  description: 'remove a pin (the dataset itself is not touched)',
  async run(ctx, { positional }) {
    const { removePin } = await import('../../pipelines/pins/manage.js');
    const name = text(positional[0], 'NAME');
    await removePin(ctx.config, process.env, name);
    ctx.stdout.write(`unpinned @${name.replace(/^@/, '')}\n`);
  },
};

const list: CommandSpec = {
  name: 'dataset list',
  description: 'list the pins of the configuration and the built-in pins @agenta, @agentb, @agentb-code',
  options: [FORMAT_OPTION],
  async run(ctx, { options }) {
    const { listPins, PIN_COLUMNS } = await import('../../pipelines/pins/manage.js');
    const { createRowWriter, parseOutputFormat } = await import('../kit/output.js');
    const format = parseOutputFormat(options.format);
    const { rows, warnings } = await listPins(ctx.config, process.env);
    printWarnings(ctx, warnings);
    const writer = createRowWriter(format, PIN_COLUMNS, ctx.stdout);
    for (const row of rows) writer.write(row);
    writer.end();
  },
};

const show: CommandSpec = {
  name: 'dataset show <name>',
  description: 'show one pin (credentials are shown only as `stored`)',
  options: [FORMAT_OPTION],
  async run(ctx, { positional, options }) {
    const { PIN_COLUMNS, showPin } = await import('../../pipelines/pins/manage.js');
    const { parseOutputFormat, renderRows } = await import('../kit/output.js');
    const format = parseOutputFormat(options.format);
    const { rows, warnings } = await showPin(ctx.config, process.env, text(positional[0], 'NAME'));
    printWarnings(ctx, warnings);
    const row = rows[0] as Row;
    const columns = [...PIN_COLUMNS, { key: 'exists' }];
    if (format === 'table') {
      // One pin reads better as field/value lines than as a one-row table.
      const fields: Row[] = columns.map((c) => ({ field: c.key, value: row[c.key] ?? null }));
      ctx.stdout.write(renderRows(fields, [{ key: 'field' }, { key: 'value', align: 'left' }], 'table'));
    } else if (format === 'json') {
      ctx.stdout.write(`${JSON.stringify(Object.fromEntries(columns.map((c) => [c.key, row[c.key] ?? null])), null, 2)}\n`);
    } else {
      ctx.stdout.write(renderRows([row], columns, format));
    }
  },
};

const set: CommandSpec = {
  name: 'dataset set <name> <uri>',
  description: "change a pin's uri, keeping its endpoint, region and credentials",
  async run(ctx, { positional }) {
    const { setPinUri } = await import('../../pipelines/pins/manage.js');
    const changed = await setPinUri(ctx.config, process.env, text(positional[0], 'NAME'), text(positional[1], 'URI'));
    ctx.stdout.write(`set ${describe(changed)}\n`);
  },
};

const rename: CommandSpec = {
  name: 'dataset rename <old> <new>',
  description: 'rename a pin',
  async run(ctx, { positional }) {
    const { renamePin } = await import('../../pipelines/pins/manage.js');
    const renamed = await renamePin(ctx.config, process.env, text(positional[0], 'OLD'), text(positional[1], 'NEW'));
    ctx.stdout.write(`renamed ${String(positional[0])} to ${describe(renamed)}\n`);
  },
};

export const datasetCommands: CommandSpec[] = [pin, unpin, list, show, set, rename];
