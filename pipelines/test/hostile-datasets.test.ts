/**
 * Datasets and inputs as an attacker (or an accident) leaves them, through the real CLI: snapshot
 * descriptors edited to name files outside the dataset, damaged parts, an export aimed into the
 * dataset it reads, `__proto__` keys that must round-trip, a NUL search term, and SQL parameters
 * that nothing binds. Each gets a clear refusal (exit 2 naming the input) or the right answer, and
 * nothing outside the dataset is read or written.
 */
import { chmodSync, cpSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { restoreUnknown } from '../formats/common/unknown.js';
import type { Snapshot } from '../dataset/layout.js';
import { PROJECT_TESTDATA } from './helpers/fixtures.js';
import { filesUnder, sandbox, unprivilegedSandbox } from './helpers/sandbox.js';

const s = sandbox('hostile-datasets-');
const base = s.path('base');

test.before(async () => {
  const r = await s.run(['import', '-f', join(PROJECT_TESTDATA, 'samples'), '-t', base]);
  assert.is(r.code, 0, r.stderr);
});

/** A copy of the base dataset without its index (so that readers rebuild it from the parts), and its snapshot descriptor's path. */
function copyOfBase(name: string): { dir: string; descriptor: string } {
  const dir = s.path(name);
  rmSync(dir, { recursive: true, force: true });
  cpSync(base, dir, { recursive: true });
  rmSync(join(dir, 'index.sqlite'), { force: true });
  const [file] = readdirSync(join(dir, 'snapshots'));
  return { dir, descriptor: join(dir, 'snapshots', file!) };
}

function editSnapshot(descriptor: string, edit: (snapshot: Snapshot) => void): void {
  const snapshot = JSON.parse(readFileSync(descriptor, 'utf8')) as Snapshot;
  edit(snapshot);
  writeFileSync(descriptor, JSON.stringify(snapshot));
}

test('a part key that leaves the dataset is refused, and the file it names is never read', async () => {
  const { dir, descriptor } = copyOfBase('climb');
  const outside = s.path('elsewhere');
  mkdirSync(outside, { recursive: true });
  const [runsPart] = readdirSync(join(dir, 'parts', 'runs'));
  renameSync(join(dir, 'parts', 'runs', runsPart!), join(outside, 'secret.parquet'));
  editSnapshot(descriptor, (snapshot) => {
    snapshot.relations.runs = [{ ...snapshot.relations.runs![0]!, key: '../elsewhere/secret.parquet' }];
  });
  for (const args of [['query', dir, '--sql', 'SELECT count(*) FROM runs'], ['list', dir], ['export', '-f', dir, '-t', '-', '-o', 'atif']]) {
    const r = await s.run(args);
    assert.is(r.code, 2, `${args[0]}: ${r.stderr}`);
    assert.match(r.stderr, /not a valid snapshot descriptor: relations\.runs lists "\.\.\/elsewhere\/secret\.parquet"/);
  }
});

test('descriptors of the wrong shape are invalid input naming the descriptor, never an internal error', async () => {
  const cases: Array<[string, (snapshot: Snapshot) => void, RegExp]> = [
    ['a key listed twice', (sn) => void sn.relations.runs!.push(sn.relations.runs![0]!), /is listed twice/],
    ['a key of another relation', (sn) => void (sn.relations.steps = sn.relations.runs), /relations\.steps lists "parts\/runs\//],
    ['relations not an object', (sn) => void ((sn as { relations: unknown }).relations = null), /relations is not an object/],
    ['a relation not a list', (sn) => void ((sn.relations as Record<string, unknown>).runs = 'parts/runs/x.parquet'), /relations\.runs is not a list/],
    ['an id that is not its name', (sn) => void (sn.id = 'ffffffffffffffffffff'), /its id "ffffffffffffffffffff" is not/],
  ];
  for (const [what, edit, message] of cases) {
    const { dir, descriptor } = copyOfBase('shape');
    editSnapshot(descriptor, edit);
    const r = await s.run(['list', dir]);
    assert.is(r.code, 2, `${what}: ${r.stderr}`);
    assert.match(r.stderr, message, what);
    assert.match(r.stderr, /snapshots\/[0-9a-f]{20}\.json/, `${what}: names the descriptor`);
  }
  const { dir, descriptor } = copyOfBase('torn');
  writeFileSync(descriptor, '{"id": "');
  const torn = await s.run(['list', dir]);
  assert.is(torn.code, 2, torn.stderr);
  assert.match(torn.stderr, /snapshots\/[0-9a-f]{20}\.json: not a snapshot descriptor/);
});

test('a truncated or missing part is a damaged dataset (exit 2) naming the part', async () => {
  const { dir } = copyOfBase('damaged');
  const [runsPart] = readdirSync(join(dir, 'parts', 'runs'));
  truncateSync(join(dir, 'parts', 'runs', runsPart!), 100);
  const truncated = await s.run(['export', '-f', dir, '-t', '-', '-o', 'atif']);
  assert.is(truncated.code, 2, truncated.stderr);
  assert.match(truncated.stderr, new RegExp(`part parts/runs/${runsPart!.replace(/\./g, '\\.')} is not a readable Parquet file .*the dataset is damaged`));
  rmSync(join(dir, 'parts', 'runs', runsPart!));
  const missing = await s.run(['query', dir, '--sql', 'SELECT count(*) FROM runs']);
  assert.is(missing.code, 2, missing.stderr);
  assert.match(missing.stderr, /part parts\/runs\/.* is missing \(the snapshot lists it: the dataset is damaged\)/);
});

test('an export aimed into the dataset it reads is refused before anything is written', async () => {
  const { dir } = copyOfBase('self');
  const before = filesUnder(dir);
  const manifest = readFileSync(join(dir, 'trajstore.json'));
  symlinkSync(dir, s.path('link-to-self'));
  for (const target of [join(dir, 'trajstore.json'), `${dir}/`, `${join(dir, 'parts', 'new-dir')}/`, join(s.path('link-to-self'), 'x.jsonl')]) {
    const r = await s.run(['export', '-f', dir, '-t', target, '-o', 'storyline', '--overwrite']);
    assert.is(r.code, 2, `${target}: ${r.stderr}`);
    assert.match(r.stderr, /inside the dataset being exported/);
  }
  assert.equal(filesUnder(dir), before);
  assert.equal(readFileSync(join(dir, 'trajstore.json')), manifest);
  assert.is((await s.run(['drop', dir, '--yes'])).code, 0, 'the dataset holds nothing foreign');
});

test('__proto__ keys a source holds are kept and exported back, and restoring them never touches Object.prototype', async () => {
  const atif = s.path('proto.atif.json');
  writeFileSync(
    atif,
    JSON.stringify({ schema_version: 'ATIF-v1.6', session_id: 'proto', agent: { name: 'n', version: '1' }, steps: [{ step_id: 1, source: 'user', message: 'hi' }] })
      .replace('"session_id"', '"__proto__":{"root":1},"session_id"')
      .replace('"message":"hi"', '"message":"hi","__proto__":{"step":2}'),
  );
  const chat = s.path('proto-chat.jsonl');
  writeFileSync(chat, '{"messages":[{"role":"user","content":"hi","__proto__":{"m":3}},{"role":"assistant","content":"hello"}]}\n');
  for (const [file, format, expected] of [[atif, 'atif', ['{"root":1}', '{"step":2}']], [chat, 'chat-messages', ['{"m":3}']]] as const) {
    const ds = s.path(`proto-${format}`);
    assert.is((await s.run(['import', '-f', file, '-t', ds])).code, 0);
    const out = await s.run(['export', '-f', ds, '-t', '-', '-o', format]);
    assert.is(out.code, 0, out.stderr);
    for (const value of expected) assert.ok(out.stdout.includes(`"__proto__":${value}`), `${format}: ${value} in ${out.stdout}`);
  }
  const target: Record<string, unknown> = {};
  restoreUnknown(target, { '/__proto__/polluted': 'yes', '/__proto__/x': 1 });
  assert.is(({} as Record<string, unknown>).polluted, undefined, 'Object.prototype is untouched');
  assert.is(JSON.stringify(target), '{"__proto__":{"polluted":"yes","x":1}}');
  assert.ok(Object.hasOwn(target, '__proto__'));
});

test('a NUL in a search term matches only text that holds one', async () => {
  const nul = s.path('nul.atif.json');
  writeFileSync(nul, JSON.stringify({ schema_version: 'ATIF-v1.6', session_id: 'nul', agent: { name: 'n', version: '1' }, steps: [{ step_id: 1, source: 'user', message: 'a\u0000b' }, { step_id: 2, source: 'user', message: 'ab' }] }));
  const ds = s.path('nul-ds');
  assert.is((await s.run(['import', '-f', nul, '-t', ds])).code, 0);
  const found = await s.run(['find', ds, '--match', '"\\u0000"', '--format', 'json']);
  assert.is(found.code, 0, found.stderr);
  const matches = (JSON.parse(found.stdout) as { matches: Array<{ step_index?: number; step_id?: string }> }).matches;
  assert.is(matches.length, 1, found.stdout);
  const none = await s.run(['find', base, '--match', '"\\u0000"', '--format', 'json']);
  assert.is((JSON.parse(none.stdout) as { matches: unknown[] }).matches.length, 0);
});

test('SQL parameters have no values to take: query and --where refuse them as input errors', async () => {
  for (const sql of ['SELECT ?', 'SELECT :x', 'SELECT @x', 'SELECT $x']) {
    const r = await s.run(['query', base, '--sql', sql]);
    assert.is(r.code, 2, `${sql}: ${r.stderr}`);
    assert.match(r.stderr, /can take no parameters/);
  }
  for (const where of ['document_id = ?', 'document_id = :x', "agent_name = 'a' OR run_id = $id"]) {
    const r = await s.run(['export', '-f', base, '-t', '-', '-o', 'atif', '--where', where, '--document-id', 'x']);
    assert.is(r.code, 2, `${where}: ${r.stderr}`);
    assert.match(r.stderr, /is a parameter, and --where has no values to bind/);
  }
  // `$` inside a name, and parameter-like text inside strings, are not parameters.
  const ok = await s.run(['export', '-f', base, '-t', '-', '-o', 'atif', '--where', "document_id != '?:x' AND \"run_id\" IS NOT 'a$b'"]);
  assert.is(ok.code, 0, ok.stderr);
});

test('import -f of a URI says import reads local sources, without the credentials the URI holds', async () => {
  const r = await s.run(['import', '-f', 's3://key:secret@lake/ds', '-t', s.path('from-uri')]);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, /-f s3:\/\/\*\*\*@lake\/ds: import reads local files, directories or stdin, not a URI/);
  assert.not.match(r.stderr, /secret/);
});

test('--overwrite replaces regular files only: a FIFO or a symbolic link stays what it is (exit 2)', async () => {
  const fifo = s.path('out.fifo');
  spawnSync('mkfifo', [fifo]);
  const kept = s.path('kept.txt');
  writeFileSync(kept, 'keep me');
  const link = s.path('out-link');
  symlinkSync(kept, link);
  for (const args of [['query', base, '--sql', 'SELECT 1', '--output', fifo, '--overwrite'], ['export', '-f', base, '-t', link, '-o', 'atif', '--overwrite'], ['query', base, '--sql', 'SELECT 1', '--output', link, '--overwrite']]) {
    const r = await s.run(args);
    assert.is(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /not a regular file \(a device, FIFO, socket or symbolic link\)/);
  }
  assert.ok(lstatSync(fifo).isFIFO());
  assert.ok(lstatSync(link).isSymbolicLink());
  assert.is(readFileSync(kept, 'utf8'), 'keep me');
});

test('a drop that could not delete the files is refused before the dataset leaves its path', async () => {
  const u = unprivilegedSandbox('hostile-drop-');
  const ds = u.path('ro');
  assert.is((await u.run(['import', '-f', join(PROJECT_TESTDATA, 'samples', 'atif'), '-t', ds])).code, 0);
  chmodSync(ds, 0o555);
  // Run as uid 65534 when the suite runs as root (root may delete anything): the mode binds it.
  const r = await u.run(['drop', ds, '--yes']);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, /permission denied: its files cannot be deleted, so nothing was dropped/);
  assert.ok(existsSync(join(ds, 'trajstore.json')), 'the dataset is still at its path');
  assert.equal(readdirSync(u.home).filter((name) => name.startsWith('.ro')), [], 'nothing put aside');
  chmodSync(ds, 0o755);
});

test('a whole number past 2^53 is no number for a flag', async () => {
  const r = await s.run(['find', base, '--match', 'x', '--max-results', '99999999999999999999']);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, /invalid --max-results "99999999999999999999": expected a whole number/);
});

test.run();
