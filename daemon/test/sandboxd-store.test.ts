/** The registry (version 2, migration, owner rules, budget) and the state directory's lock. */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ConflictError, ResourceLimitError } from '../../lib/errors.js';
import { scratchDir } from '../../lib/testing/scratch.js';
import { LOGICAL_BUDGET_BYTES, Registry, RegistryRejectedError } from '../store/registry.js';
import { MAX_MESSAGE_CHARS, type SandboxRecord } from '../store/record.js';
import { lockName, lockStateDirectory } from '../store/state-lock.js';

function record(id: string, extra: Partial<SandboxRecord> = {}): SandboxRecord {
  const now = new Date().toISOString();
  return { id, state: 'Running', lastTransitionAt: now, createdAt: now, image: 'test', entrypoint: ['sleep'], env: {}, metadata: {}, cpuMillis: 1000, memoryBytes: 1 << 30, token: 't', execdToken: 'e', egressToken: 'g', ...extra };
}
const ID = 'sb-00000000-0000-4000-8000-000000000001';

test('a fresh registry: owner marker, version-2 header, private records', () => {
  const dir = scratchDir('registry');
  const registry = Registry.open(dir);
  registry.put(record(ID));
  assert.is(JSON.parse(readFileSync(join(dir, 'owner.json'), 'utf8')), registry.owner);
  assert.equal(JSON.parse(readFileSync(join(dir, 'sandboxes.json'), 'utf8')), { version: 2, owner: registry.owner, sandboxes: {} });
  assert.equal(JSON.parse(readFileSync(join(dir, 'records', 'meta.json'), 'utf8')), { version: 2, owner: registry.owner });
  assert.is(statSync(join(dir, 'records', `${ID}.json`)).mode & 0o777, 0o600);
  assert.is(statSync(join(dir, 'records')).mode & 0o777, 0o700);
  const again = Registry.open(dir);
  assert.is(again.owner, registry.owner);
  assert.is(again.get(ID)?.state, 'Running');
  again.remove(ID);
  assert.not.ok(existsSync(join(dir, 'records', `${ID}.json`)));
  assert.is(Registry.open(dir).size, 0);
});

test('a removal whose file went but whose directory sync failed is finished by the next attempt, not refused for good', () => {
  const dir = scratchDir('registry-retry');
  const registry = Registry.open(dir);
  registry.put(record(ID));
  // What an earlier remove() left when its unlink took effect and the fsync of the directory then
  // failed (EMFILE, EIO): the file gone, the record still in memory, the caller told it failed.
  unlinkSync(join(dir, 'records', `${ID}.json`));
  registry.remove(ID);
  assert.is(registry.get(ID), undefined);
  assert.is(registry.size, 0);
  assert.is(Registry.open(dir).size, 0);
});

test('owner.json rules: version 2 without it and occupied version 1 without it are refused, never fabricated', () => {
  const v2 = scratchDir('registry');
  Registry.open(v2);
  unlinkSync(join(v2, 'owner.json'));
  assert.throws(() => Registry.open(v2), (e: Error) => e instanceof RegistryRejectedError && /version-2 registry without owner\.json/.test(e.message));
  assert.not.ok(existsSync(join(v2, 'owner.json')), 'owner.json was fabricated');

  const v1 = scratchDir('registry');
  writeFileSync(join(v1, 'sandboxes.json'), JSON.stringify({ version: 1, owner: 'o-1', sandboxes: { [ID]: record(ID) } }));
  assert.throws(() => Registry.open(v1), (e: Error) => e instanceof RegistryRejectedError && /occupied version-1 registry without owner\.json/.test(e.message));
  assert.not.ok(existsSync(join(v1, 'owner.json')));
  assert.is(JSON.parse(readFileSync(join(v1, 'sandboxes.json'), 'utf8')).version, 1, 'the refused registry was changed');
});

test('version 1 migrates: records move into records/, the header becomes version 2', () => {
  const dir = scratchDir('registry');
  writeFileSync(join(dir, 'owner.json'), JSON.stringify('o-1'));
  writeFileSync(join(dir, 'sandboxes.json'), JSON.stringify({ version: 1, owner: 'o-1', sandboxes: { [ID]: record(ID, { metadata: { a: 'b' } }) } }));
  const registry = Registry.open(dir);
  assert.is(registry.get(ID)?.metadata.a, 'b');
  assert.equal(JSON.parse(readFileSync(join(dir, 'sandboxes.json'), 'utf8')), { version: 2, owner: 'o-1', sandboxes: {} });
  assert.is(Registry.open(dir).get(ID)?.id, ID);

  const empty = scratchDir('registry');
  writeFileSync(join(empty, 'sandboxes.json'), JSON.stringify({ version: 1, owner: 'o-2', sandboxes: {} }));
  assert.is(Registry.open(empty).owner, 'o-2');
  assert.is(JSON.parse(readFileSync(join(empty, 'owner.json'), 'utf8')), 'o-2');
});

test('the 16 MiB logical budget refuses a write before anything changes', () => {
  const dir = scratchDir('registry');
  const registry = Registry.open(dir);
  const big = record(ID, { metadata: { blob: 'x'.repeat(LOGICAL_BUDGET_BYTES) } });
  assert.throws(() => registry.put(big), (e: Error) => e instanceof ResourceLimitError);
  assert.is(registry.size, 0);
  assert.not.ok(existsSync(join(dir, 'records', `${ID}.json`)));
});

test('a registry filled to its budget still takes every change its records have left: the deletion intent above all', () => {
  const dir = scratchDir('registry');
  const registry = Registry.open(dir);
  const id = (i: number): string => `sb-00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
  const blob = (bytes: number): SandboxRecord['metadata'] => ({ blob: 'x'.repeat(bytes) });
  let n = 0;
  for (; ; n++) {
    try {
      registry.put(record(id(n), { state: 'Pending', metadata: blob(1 << 20) }));
    } catch {
      break;
    }
  }
  // The last record as large as admission takes, as a client can tune its metadata to be.
  let [low, high] = [0, 1 << 20];
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    try {
      registry.put(record(id(n), { state: 'Pending', metadata: blob(mid) }));
      registry.remove(id(n));
      low = mid;
    } catch {
      high = mid - 1;
    }
  }
  registry.put(record(id(n), { state: 'Pending', metadata: blob(low) }));
  // What the lifecycle adds to each record afterwards: its cgroup binding, a message, the deletion intent.
  for (let i = 0; i <= n; i++) {
    const grown = structuredClone(registry.get(id(i))!);
    grown.cgroup = { path: `/sys/fs/cgroup/${'c'.repeat(4000)}`, device: '4294967295', inode: '18446744073709551615', bootId: randomUUID() };
    grown.message = '\u0000'.repeat(MAX_MESSAGE_CHARS);
    Object.assign(grown, { state: 'Terminated', deleting: true });
    registry.put(grown);
  }
  assert.ok(registry.get(id(n))!.deleting);
});

test('the state lock: a second holder is refused busy; a holder killed with -9 releases it', async () => {
  const dir = scratchDir('state');
  const lock = await lockStateDirectory(dir);
  try {
    await lockStateDirectory(dir);
    assert.unreachable('a second lock was granted');
  } catch (error) {
    assert.instance(error, ConflictError);
    assert.match((error as Error).message, 'state directory busy');
  }
  await lock.release();
  const child = spawn(process.execPath, ['-e', `require('net').createServer().listen(${JSON.stringify(lockName(dir))}, () => console.log('held'))`], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise((resolve) => child.stdout.once('data', resolve));
  await lockStateDirectory(dir).then(() => assert.unreachable('granted while the child holds it'), () => undefined);
  child.kill('SIGKILL');
  await new Promise((resolve) => child.once('exit', resolve));
  const retaken = await lockStateDirectory(dir);
  await retaken.release();
});

test.run();
