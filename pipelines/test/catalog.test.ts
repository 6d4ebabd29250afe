/**
 * The directory service end to end: the ACL file managed through the real CLI (`serve catalog
 * ...`), the service's fastify plugin on a real loopback listener, and two users whose
 * `catalog://` pins open datasets through tickets: issue, grant, ticket, open (list, find, show),
 * revoke, denied. Then the HTTP contract itself (401/403/400, what a ticket carries, expiry) and
 * every bad management input with its exit code.
 */
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import Fastify, { type FastifyInstance } from 'fastify';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { join } from 'node:path';
import { S3TestServer, TEST_ACCESS_KEY, TEST_SECRET_KEY, s3ServerInstalled } from '../../bench/lib/s3-server.js';
import { openCatalog } from '../catalog/index.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { runTool } from '../../lib/testing/run-tool.js';
import { sandbox } from './helpers/sandbox.js';
import { SAMPLE_RUNS, writeSampleDataset } from './helpers/search-dataset.js';

const s = sandbox('catalog-test-');
const acl = s.path('team', 'acl.toml');
const keys: Record<string, { access: string; secret: string }> = {};
let server: FastifyInstance | undefined;
let port = 0;

const catalog = (...args: string[]) => s.run(['serve', 'catalog', ...args.slice(0, 1), ...(args[0] === 'dataset' ? [args[1] as string] : []), '--catalog-config', acl, ...args.slice(args[0] === 'dataset' ? 2 : 1)]);
/** trajstore as one of the users: their own configuration file with their pin. */
const as = (user: string, ...args: string[]) => s.run(['-c', s.path(`${user}.toml`), ...args]);

async function startService(options: { ticketLifetimeMs?: number } = {}): Promise<void> {
  await server?.close();
  const opened = openCatalog(acl, options);
  server = Fastify();
  await server.register(opened.plugin, opened.pluginOptions);
  await server.listen({ host: '127.0.0.1', port: 0 });
  port = (server.server.address() as { port: number }).port;
  for (const user of Object.keys(keys)) {
    const r = await as(user, 'dataset', 'set', 'team', `catalog://127.0.0.1:${port}`);
    assert.is(r.code, 0, r.stderr);
  }
}

function basic(user: string, secret = keys[user]?.secret): string {
  return `Basic ${Buffer.from(`${keys[user]?.access}:${secret}`).toString('base64')}`;
}

test.after(async () => {
  await server?.close();
});

test('management: register two datasets, issue two users, grant each one; the file is 0600 and holds no secret', async () => {
  const prod = await writeSampleDataset();
  const lab = await writeSampleDataset([SAMPLE_RUNS[1]!]);
  let r = await catalog('dataset', 'add', 'prod', '--uri', prod);
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stderr, /restart `trajstore serve --catalog-config/);
  r = await catalog('dataset', 'add', 'lab', '--uri', lab);
  assert.is(r.code, 0, r.stderr);
  for (const user of ['alice', 'bob']) {
    r = await catalog('issue', user);
    assert.is(r.code, 0, r.stderr);
    const access = /access_key +(\S+)/.exec(r.stdout)?.[1] as string;
    const secret = /secret_key +(\S+)/.exec(r.stdout)?.[1] as string;
    assert.ok(access && secret, r.stdout);
    keys[user] = { access, secret };
    assert.match(r.stderr, /shown only this once/);
    assert.not.ok(r.stderr.includes(secret), 'the secret is printed once, on stdout');
    const pin = await s.run(['-c', s.path(`${user}.toml`), 'dataset', 'pin', 'team', 'catalog://127.0.0.1:9', '--ak', access, '--sk-stdin'], `${secret}\n`);
    assert.is(pin.code, 0, pin.stderr);
  }
  assert.is((await catalog('grant', 'alice', 'prod')).code, 0);
  r = await catalog('grant', 'bob', 'lab');
  assert.is(r.stdout, 'granted lab to bob; bob now has: lab\n');
  assert.is(statSync(acl).mode & 0o777, 0o600);
  const text = readFileSync(acl, 'utf8');
  for (const { access, secret } of Object.values(keys)) {
    assert.ok(text.includes(access));
    assert.not.ok(text.includes(secret), 'only a hash of the secret is stored');
  }
  assert.match(text, /secret_hash = "scrypt\$16384\$8\$1\$/);
  const list = await catalog('dataset', 'list', '--format', 'json');
  assert.equal(
    (JSON.parse(list.stdout) as Array<{ name: string; users: string[] }>).map((d) => [d.name, d.users]),
    [['lab', ['bob']], ['prod', ['alice']]],
  );
});

test('open through tickets: @team lists the grants, @team/<name> opens the dataset (list, find, show); another user\'s dataset is denied like a missing one', async () => {
  await startService();
  let r = await as('alice', 'list', '@team', '--format', 'json');
  assert.is(r.code, 0, r.stderr);
  assert.equal(JSON.parse(r.stdout), [{ name: 'prod', dataset: '@team/prod' }]);
  r = await as('bob', 'list', '@team', '--format', 'csv');
  assert.is(r.stdout, 'name,dataset\nlab,@team/lab\n');

  r = await as('alice', 'find', '@team/prod', '--match', 'disk', '--format', 'json');
  assert.is(r.code, 0, r.stderr);
  assert.equal([...new Set((JSON.parse(r.stdout) as { matches: Array<{ document_id: string }> }).matches.map((m) => m.document_id))], ['doc-a']);
  r = await as('alice', 'show', '@team/prod', '--document-id', 'doc-b');
  assert.is(r.code, 0, r.stderr);
  assert.ok(r.stdout.includes('请帮我检查服务器日志'));
  r = await as('alice', 'list', '@team/prod', '--format', 'csv');
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /^source_path,format,runs/);

  const denied = await as('alice', 'find', '@team/lab', '--match', 'x');
  const missing = await as('alice', 'find', '@team/nothing', '--match', 'x');
  assert.is(denied.code, 3, denied.stderr);
  assert.is(missing.code, 3, missing.stderr);
  assert.match(denied.stderr, /@team\/lab: dataset "lab" is not granted to this access key/);
  assert.is(denied.stderr.replaceAll('lab', 'X'), missing.stderr.replaceAll('nothing', 'X'), 'a missing dataset and one granted to someone else look the same');
  r = await as('alice', 'find', '@team', '--match', 'x');
  assert.is(r.code, 2);
  assert.match(r.stderr, /@team is a directory service: name one of its datasets as @team\/NAME/);
  r = await as('alice', 'import', '-f', s.path('nothing.jsonl'), '-t', '@team/prod');
  assert.is(r.code, 2);
});

test('revoke (and restart): the dataset is denied and no longer listed; the other user is unaffected', async () => {
  const r = await catalog('revoke', 'alice', 'prod');
  assert.is(r.stdout, 'revoked prod from alice; alice now has: (nothing)\n');
  await startService();
  const list = await as('alice', 'list', '@team');
  assert.is(list.stdout, 'NAME  DATASET\n(no datasets granted)\n');
  const find = await as('alice', 'find', '@team/prod', '--match', 'disk');
  assert.is(find.code, 3);
  const bob = await as('bob', 'find', '@team/lab', '--match', '日志', '--format', 'json');
  assert.is(bob.code, 0, bob.stderr);
  await catalog('grant', 'alice', 'prod');
  await startService();
});

test('HTTP: 401 without or with wrong keys (before the body is looked at), 403 tells nothing, a ticket carries only the uri and its lifetime', async () => {
  const base = `http://127.0.0.1:${port}/catalog/v1`;
  let response = await fetch(`${base}/datasets`);
  assert.is(response.status, 401);
  assert.match(response.headers.get('www-authenticate') ?? '', /^Basic realm=/);
  assert.equal(((await response.json()) as { error: { code: string } }).error.code, 'unauthorized');
  response = await fetch(`${base}/datasets`, { headers: { authorization: basic('alice', `${keys.alice?.secret}x`) } });
  assert.is(response.status, 401);
  response = await fetch(`${base}/tickets`, { method: 'POST', headers: { authorization: 'Basic bm9ib2R5Om5vdGhpbmc=', 'content-type': 'application/json' }, body: '{"bad json' });
  assert.is(response.status, 401);

  response = await fetch(`${base}/tickets`, { method: 'POST', headers: { authorization: basic('bob'), 'content-type': 'application/json' }, body: JSON.stringify({ dataset: 'prod' }) });
  assert.is(response.status, 403);
  const forbidden = await response.text();
  assert.not.ok(forbidden.includes('lab') || forbidden.includes('alice') || forbidden.includes('/'), forbidden);

  response = await fetch(`${base}/tickets`, { method: 'POST', headers: { authorization: basic('alice'), 'content-type': 'application/json' }, body: JSON.stringify({ dataset: 'prod', extra: 1 }) });
  assert.is(response.status, 400);
  response = await fetch(`${base}/tickets`, { method: 'POST', headers: { authorization: basic('alice'), 'content-type': 'application/json' }, body: JSON.stringify({ dataset: 'prod' }) });
  assert.is(response.status, 200);
  assert.is(response.headers.get('cache-control'), 'no-store');
  const { ticket } = (await response.json()) as { ticket: Record<string, string> };
  assert.equal(Object.keys(ticket).sort(), ['dataset', 'expires_at', 'issued_at', 'uri']);
  assert.is(Date.parse(ticket.expires_at as string) - Date.parse(ticket.issued_at as string), 15 * 60_000);
});

test('HTTP: a failure inside the service goes to the host server\'s error handler (serve logs it there), not to fastify\'s switched-off request log', async () => {
  const opened = openCatalog(acl);
  // A library entry the file could never hold (it is checked when read): making its ticket throws.
  opened.pluginOptions.acl.datasets.set('prod', { uri: undefined as unknown as string });
  const host = Fastify({ logger: false });
  const seen: string[] = [];
  host.setErrorHandler((error: Error, _request, reply) => {
    seen.push(error.message);
    return reply.code(500).send({ host: true });
  });
  await host.register(opened.plugin, opened.pluginOptions);
  try {
    const response = await host.inject({ method: 'POST', url: '/catalog/v1/tickets', headers: { authorization: basic('alice') }, payload: { dataset: 'prod' } });
    assert.is(response.statusCode, 500);
    assert.equal(response.json(), { host: true });
    assert.is(seen.length, 1);
    // A client's mistake is still answered by the service itself.
    const bad = await host.inject({ method: 'POST', url: '/catalog/v1/tickets', headers: { authorization: basic('alice') }, payload: { dataset: 'prod', extra: 1 } });
    assert.is(bad.statusCode, 400);
    assert.is((bad.json() as { error: { code: string } }).error.code, 'bad_request');
    assert.is(seen.length, 1);
  } finally {
    await host.close();
  }
});

test('an expired ticket is refused by the client (exit 6)', async () => {
  await startService({ ticketLifetimeMs: 1 });
  const r = await as('alice', 'find', '@team/prod', '--match', 'disk');
  assert.is(r.code, 6, r.stderr);
  assert.match(r.stderr, /sent a ticket that expired at/);
  await startService();
});

test('a service that is not running: exit 6 naming the locator', async () => {
  await server?.close();
  server = undefined;
  const r = await as('alice', 'list', '@team');
  assert.is(r.code, 6);
  assert.match(r.stderr, /the directory service at catalog:\/\/127\.0\.0\.1:\d+ did not answer/);
  assert.not.ok(r.stderr.includes(keys.alice?.secret as string));
});

test('management: s3 libraries are registered without touching the store; credentials never listed; --rotate replaces keys', async () => {
  // Nothing listens on port 9: registering succeeds because it never contacts the store.
  const r = await s.run(['serve', 'catalog', 'dataset', 'add', '--catalog-config', acl, 'lake', '--uri', 's3://bucket/lake', '--endpoint', 'http://127.0.0.1:9', '--access-key', 'AKLAKE', '--secret-key-stdin'], 'SKLAKE-secret\n');
  assert.is(r.code, 0, r.stderr);
  const list = await catalog('dataset', 'list');
  assert.match(list.stdout, /lake +s3 +s3:\/\/bucket\/lake +http:\/\/127\.0\.0\.1:9 +us-west-2 +true/);
  assert.not.ok(list.stdout.includes('SKLAKE'));
  const rotated = await catalog('issue', 'bob', '--rotate');
  assert.is(rotated.code, 0, rotated.stderr);
  assert.not.ok(rotated.stdout.includes(keys.bob?.secret as string));
  // The s3 library's ticket carries its endpoint, region and keys (and only those).
  await catalog('grant', 'alice', 'lake');
  await startService();
  const response = await fetch(`http://127.0.0.1:${port}/catalog/v1/tickets`, { method: 'POST', headers: { authorization: basic('alice'), 'content-type': 'application/json' }, body: '{"dataset":"lake"}' });
  const { ticket } = (await response.json()) as { ticket: Record<string, string> };
  assert.equal({ ...ticket, issued_at: '', expires_at: '' }, { dataset: 'lake', uri: 's3://bucket/lake', endpoint: 'http://127.0.0.1:9', region: 'us-west-2', access_key: 'AKLAKE', secret_key: 'SKLAKE-secret', issued_at: '', expires_at: '' });
  // bob's old secret stopped working with the restart.
  const old = await fetch(`http://127.0.0.1:${port}/catalog/v1/datasets`, { headers: { authorization: basic('bob') } });
  assert.is(old.status, 401);
});

test('an s3:// library opens with the keys its ticket carries (the user has none of their own)', async () => {
  if (!s3ServerInstalled()) return console.log('  (skipped: the S3 test server is not installed; run scripts/setup.sh)');
  const store = await S3TestServer.start();
  try {
    await store.createBucket('teamlake');
    const imported = await runTool('trajstore', ['import', '-f', join(SHARED_FIXTURES, 'persisting', 'atif'), '-t', 's3://teamlake/ds'], { env: { ...s.env, ...store.env }, cwd: s.home });
    assert.is(imported.code, 0, imported.stderr);
    const added = await s.run(['serve', 'catalog', 'dataset', 'add', '--catalog-config', acl, 'shared', '--uri', 's3://teamlake/ds', '--endpoint', store.endpoint, '--access-key', TEST_ACCESS_KEY, '--secret-key-stdin'], `${TEST_SECRET_KEY}\n`);
    assert.is(added.code, 0, added.stderr);
    assert.is((await catalog('grant', 'alice', 'shared')).code, 0);
    await startService();
    const r = await as('alice', 'find', '@team/shared', '--match', '中文', '--format', 'json');
    assert.is(r.code, 0, r.stderr);
    const doc = JSON.parse(r.stdout) as { dataset_uri: string; matches: Array<{ document_id: string }> };
    assert.is(doc.dataset_uri, 's3://teamlake/ds');
    assert.equal([...new Set(doc.matches.map((m) => m.document_id))], ['run-unicode_zh_15']);
    assert.not.ok(r.stderr.includes(TEST_SECRET_KEY) || r.stdout.includes(TEST_SECRET_KEY));
    // bob's keys were rotated (an earlier test) and his pin still holds the old ones: refused, exit 2.
    const bob = await as('bob', 'find', '@team/shared', '--match', '中文');
    assert.is(bob.code, 2);
    assert.match(bob.stderr, /the directory service refused the pin's keys/);
  } finally {
    await store.stop();
  }
});

test('management: concurrent changes both land (the file is locked around each rewrite)', async () => {
  await Promise.all([catalog('grant', 'bob', 'prod'), catalog('grant', 'bob', 'lake'), catalog('dataset', 'add', 'more', '--uri', s.path('more'))]);
  const list = await catalog('dataset', 'list', '--format', 'json');
  const rows = JSON.parse(list.stdout) as Array<{ name: string; users: string[] }>;
  assert.equal(rows.map((d) => d.name).filter((n) => n !== 'shared'), ['lab', 'lake', 'more', 'prod']);
  assert.ok(rows.find((d) => d.name === 'prod')?.users.includes('bob'));
  assert.ok(rows.find((d) => d.name === 'lake')?.users.includes('bob'));
});

test('management: every bad input exits with its code and leaves the file as it was', async () => {
  const before = readFileSync(acl, 'utf8');
  const cases: Array<[string[], number, RegExp]> = [
    [['serve', 'catalog', 'dataset', 'add', '--catalog-config', acl, 'prod', '--uri', '/x'], 4, /dataset "prod" is already registered/],
    [['serve', 'catalog', 'dataset', 'add', '--catalog-config', acl, 'Bad Name', '--uri', '/x'], 2, /invalid dataset name "Bad Name"/],
    [['serve', 'catalog', 'dataset', 'add', '--catalog-config', acl, 'n'], 2, /--uri is required/],
    [['serve', 'catalog', 'dataset', 'add', '--catalog-config', acl, 'n', '--uri', 'catalog://127.0.0.1:5'], 2, /not a directory-service locator/],
    [['serve', 'catalog', 'dataset', 'add', '--catalog-config', acl, 'n', '--uri', '/x', '--region', 'r'], 2, /region applies to s3:\/\/ pins only/],
    [['serve', 'catalog', 'dataset', 'add', '--catalog-config', acl, 'n', '--uri', 's3://bucket/x', '--access-key', 'A'], 2, /access_key and secret_key must be given together/],
    [['serve', 'catalog', 'dataset', 'add', '--catalog-config', acl, 'n', '--uri', 'ftp://x'], 2, /unsupported uri scheme/],
    [['serve', 'catalog', 'dataset', 'add', '--catalog-config', acl, 'n', 'm', '--uri', '/x'], 2, /takes one NAME/],
    [['serve', 'catalog', 'dataset', 'remove', '--catalog-config', acl, 'prod', 'ghost'], 3, /no dataset "ghost"/],
    [['serve', 'catalog', 'dataset', 'remove', '--catalog-config', acl], 2, /takes NAME\.\.\./],
    [['serve', 'catalog', 'dataset', 'drop', '--catalog-config', acl], 2, /unknown command `serve catalog dataset drop`/],
    [['serve', 'catalog', 'issue', '--catalog-config', acl, 'alice'], 4, /user "alice" already has keys/],
    [['serve', 'catalog', 'issue', '--catalog-config', acl, 'carol', '--rotate'], 3, /no user "carol" .* to rotate/],
    [['serve', 'catalog', 'issue', '--catalog-config', acl], 2, /takes one NAME; got none/],
    [['serve', 'catalog', 'issue', '--catalog-config', acl, 'carol', '--uri', '/x'], 2, /--uri applies to `serve catalog dataset add` only/],
    [['serve', 'catalog', 'grant', '--catalog-config', acl, 'carol', 'prod'], 3, /no user "carol"/],
    [['serve', 'catalog', 'grant', '--catalog-config', acl, 'alice', 'prod', 'ghost'], 3, /no dataset "ghost"/],
    [['serve', 'catalog', 'revoke', '--catalog-config', acl, 'alice'], 2, /takes NAME DATASET\.\.\./],
    [['serve', 'catalog', 'grnat', '--catalog-config', acl, 'alice', 'prod'], 2, /did you mean `serve catalog grant`/],
    [['serve', 'catalog', 'grant', 'alice', 'prod'], 2, /--catalog-config is required/],
    // With no subcommand, `catalog` is serve's DATASET (a directory of that name), as the spec says.
    [['serve', 'catalog', '--catalog-config', acl], 2, /cannot be combined with DATASET mounts/],
    [['serve', 'catalog', '--listen', '127.0.0.1:0'], 3, /catalog: no such dataset/],
  ];
  for (const [args, code, message] of cases) {
    const r = await s.run(args);
    assert.is(r.code, code, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message);
  }
  assert.is(readFileSync(acl, 'utf8'), before);
  // A file someone edited badly is refused, naming the key.
  const broken = s.path('broken.toml');
  writeFileSync(broken, '[users.eve]\naccess_key = "A"\nsecret_hash = "plain"\nissued_at = "x"\n');
  let r = await s.run(['serve', 'catalog', 'dataset', 'list', '--catalog-config', broken]);
  assert.is(r.code, 2);
  assert.match(r.stderr, /users\.eve\.secret_hash: is not a hash this tool wrote/);
  writeFileSync(broken, '[grants]\nmallory = ["prod"]\n');
  r = await s.run(['serve', 'catalog', 'dataset', 'list', '--catalog-config', broken]);
  assert.match(r.stderr, /grants\.mallory: names no user of \[users\]/);
  writeFileSync(broken, '[datasets.x]\nuri = "/x"\npassword = "y"\n');
  r = await s.run(['serve', 'catalog', 'dataset', 'list', '--catalog-config', broken]);
  assert.match(r.stderr, /datasets\.x\.password: unknown key/);
});

test.run();
