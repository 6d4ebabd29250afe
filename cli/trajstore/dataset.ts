/**
 * `trajstore dataset pin|unpin|list|show|set|rename`: named pins in the user configuration.
 * Credentials are gathered by credentials.ts (never from argv alone) and never printed.
 */
import { jsonText, type Column, type Row } from '../../lib/output.js';
import { BUILTIN_DESCRIPTIONS, DEFAULT_PIN, addPin, listPins, removePin, renamePin, setPinUri, showPin, uriKind, type Pin } from '../../pipelines/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { defineCommand, type CommandContext, type CommandSpec } from '../kit/program.js';
import { FORMAT_OPTIONS, printRows, rowView } from '../kit/render.js';
import { resolveContext } from './common.js';
import { ACCESS_KEY_ENV, SECRET_KEY_ENV, readKeyPair } from './credentials.js';

/** The columns of `dataset list` and `dataset show`. Credentials appear only as `stored`. */
const PIN_COLUMNS: Column[] = ['name', 'kind', 'uri', 'endpoint', 'region', 'credentials', 'source', 'note'].map((key) => ({ key }));

function pinRow(pin: Pin): Row {
  const row: Row = { name: `@${pin.name}`, kind: pin.kind, uri: pin.kind === 'local' ? pin.path : pin.uri, endpoint: null, region: null, credentials: null };
  if (pin.kind === 's3') {
    row.endpoint = pin.endpoint ?? null;
    row.region = pin.region;
  }
  if (pin.kind !== 'local' && pin.credentials) row.credentials = 'stored';
  row.source = pin.builtin ? 'built-in' : 'config';
  row.note = pin.builtin ? BUILTIN_DESCRIPTIONS[pin.name as keyof typeof BUILTIN_DESCRIPTIONS] : pin.name === DEFAULT_PIN ? 'used when a command omits the dataset' : null;
  return row;
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

interface PinFlags {
  name: string;
  uri: string;
  ak: string | undefined;
  sk: string | undefined;
  akStdin: boolean;
  skStdin: boolean;
  endpoint: string | undefined;
  region: string | undefined;
}

function pinFlags(args: ParsedArgs): PinFlags {
  return {
    name: args.requiredPositional(0, 'NAME'),
    uri: args.requiredPositional(1, 'URI'),
    ak: args.text('--ak'),
    sk: args.text('--sk'),
    akStdin: args.has('--ak-stdin'),
    skStdin: args.has('--sk-stdin'),
    endpoint: args.text('--endpoint'),
    region: args.text('--region'),
  };
}

const pin = defineCommand({
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
  flags: pinFlags,
  async run(ctx, f) {
    const kind = await uriKind(f.uri, ctx.env);
    const keys = await readKeyPair({
      ak: f.ak,
      sk: f.sk,
      akStdin: f.akStdin,
      skStdin: f.skStdin,
      env: ctx.env,
      stdin: ctx.stdin,
      stderr: ctx.stderr.stream,
      required: kind === 'catalog',
      applicable: kind !== 'local',
      warn: (message) => ctx.log.warn(message),
    });
    const pinned = await addPin(resolveContext(ctx), {
      name: f.name,
      uri: f.uri,
      ...(f.endpoint !== undefined ? { endpoint: f.endpoint } : {}),
      ...(f.region !== undefined ? { region: f.region } : {}),
      ...keys,
    });
    ctx.stdout.write(`pinned ${describe(pinned)}\n`);
  },
});

const unpin = defineCommand({
  name: 'dataset unpin <name>',
  description: 'remove a pin (the dataset itself is not touched)',
  flags: (args) => args.requiredPositional(0, 'NAME'),
  async run(ctx, name) {
    await removePin(resolveContext(ctx), name);
    ctx.stdout.write(`unpinned @${name.replace(/^@/, '')}\n`);
  },
});

const list = defineCommand({
  name: 'dataset list',
  description: 'list the pins of the configuration and the built-in pins @agenta, @agentb, @agentb-code',
  options: FORMAT_OPTIONS,
  flags: rowView,
  async run(ctx, view) {
    const { pins, warnings } = await listPins(resolveContext(ctx));
    printWarnings(ctx, warnings);
    printRows(ctx, view, PIN_COLUMNS, pins.map(pinRow));
  },
});

const show = defineCommand({
  name: 'dataset show <name>',
  description: 'show one pin (credentials are shown only as `stored`)',
  options: FORMAT_OPTIONS,
  flags: (args) => ({ name: args.requiredPositional(0, 'NAME'), view: rowView(args) }),
  async run(ctx, { name, view }) {
    const { pin: shown, exists, warnings } = await showPin(resolveContext(ctx), name);
    printWarnings(ctx, warnings);
    const row: Row = { ...pinRow(shown), exists };
    const columns = [...PIN_COLUMNS, { key: 'exists' }];
    if (view.format === 'table') {
      // One pin reads better as field/value lines than as a one-row table.
      printRows(ctx, view, [{ key: 'field' }, { key: 'value', align: 'left' }], columns.map((c) => ({ field: c.key, value: row[c.key] ?? null })));
    } else if (view.format === 'json') {
      ctx.stdout.write(`${jsonText(Object.fromEntries(columns.map((c) => [c.key, row[c.key] ?? null])), 2)}\n`);
    } else {
      printRows(ctx, view, columns, [row]);
    }
  },
});

const set = defineCommand({
  name: 'dataset set <name> <uri>',
  description: "change a pin's uri, keeping its endpoint, region and credentials",
  flags: (args) => ({ name: args.requiredPositional(0, 'NAME'), uri: args.requiredPositional(1, 'URI') }),
  async run(ctx, { name, uri }) {
    ctx.stdout.write(`set ${describe(await setPinUri(resolveContext(ctx), name, uri))}\n`);
  },
});

const rename = defineCommand({
  name: 'dataset rename <old> <new>',
  description: 'rename a pin',
  flags: (args) => ({ from: args.requiredPositional(0, 'OLD'), to: args.requiredPositional(1, 'NEW') }),
  async run(ctx, { from, to }) {
    ctx.stdout.write(`renamed ${from} to ${describe(await renamePin(resolveContext(ctx), from, to))}\n`);
  },
});

export const datasetCommands: CommandSpec[] = [pin, unpin, list, show, set, rename];
