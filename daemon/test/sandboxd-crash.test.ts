/**
 * kill -9 of the daemon during create, during delete and during pause, then a restart on the same
 * state: the registry is consistent (no record left Pending, deletions finish), no cgroup or
 * process is orphaned, and the reservations are those of the records.
 */
import { existsSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { DIST_ROOT, runTool } from '../../lib/testing/run-tool.js';
import { cgroup2Mount, makeFixture, type Fixture } from './supervisor/fixture.js';
import { api, startDaemonProcess, stopDaemonProcess, type DaemonProcess } from './supervisor/process.js';

const mount = cgroup2Mount();
const BODY = { image: { uri: 'test' }, entrypoint: ['sleep', 'infinity'], resourceLimits: { cpu: '250m', memory: '256Mi' } };
let fixture: Fixture;
/** Every daemon process started, so that a failing test leaves none holding the state directory. */
const started = new Set<Proc>();

type Proc = DaemonProcess;

async function startProcess(overrides: Record<string, unknown> = {}): Promise<Proc> {
  const proc = await startDaemonProcess(fixture, overrides);
  started.add(proc);
  return proc;
}

async function kill9(proc: Proc): Promise<void> {
  if (proc.child.exitCode !== null || proc.child.signalCode !== null) return;
  const gone = new Promise((resolve) => proc.child.once('exit', resolve));
  proc.child.kill('SIGKILL');
  await gone;
}

/** Sends a request and kills the daemon `delayMs` later, whatever the request is doing. */
async function killDuring(proc: Proc, method: string, path: string, delayMs: number, body?: unknown): Promise<void> {
  const pending = api(proc, method, path, body).catch(() => undefined);
  await sleep(delayMs);
  await kill9(proc);
  await pending;
}

/** Creates a sandbox, kills the daemon `delayMs` into `op` on it, and starts a daemon again. */
async function crashDuring(op: (id: string) => [method: string, path: string], delayMs: number): Promise<{ proc: Proc; id: string }> {
  const first = await startProcess();
  const created = await api(first, 'POST', '/v1/sandboxes', BODY);
  assert.is(created.status, 202);
  const id = created.json!.id as string;
  await killDuring(first, ...op(id), delayMs);
  return { proc: await startProcess(), id };
}

function sandboxCgroups(): string[] {
  return readdirSync(fixture.cgroupRoot, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name);
}

async function records(proc: Proc): Promise<{ id: string; status: { state: string } }[]> {
  return (await api(proc, 'GET', '/v1/sandboxes?pageSize=200')).json!.items;
}

/** Every cgroup belongs to a record, and every listed sandbox is reconciled to a settled state. */
async function assertConsistent(proc: Proc): Promise<void> {
  const items = await records(proc);
  const ids = new Set(items.map((r) => r.id));
  for (const name of sandboxCgroups()) assert.ok(ids.has(name.replace(/^sandboxd-/, '')), `orphan cgroup ${name}`);
  for (const item of items) {
    const got = await api(proc, 'GET', `/v1/sandboxes/${item.id}`);
    assert.ok(['Running', 'Paused', 'Failed', 'Stopping'].includes(got.json!.status.state), `${item.id}: ${JSON.stringify(got.json)}`);
  }
}

/** Deletes everything and checks nothing is left: no record, no cgroup, no process. */
async function assertCleanAfterDelete(proc: Proc): Promise<void> {
  for (const item of await records(proc)) {
    let status = (await api(proc, 'DELETE', `/v1/sandboxes/${item.id}`)).status;
    for (let i = 0; i < 20 && status === 503; i++) status = (await sleep(250), await api(proc, 'DELETE', `/v1/sandboxes/${item.id}`)).status;
    assert.ok(status === 204 || status === 404, `delete ${item.id}: ${status}`);
  }
  assert.equal(await records(proc), []);
  assert.equal(sandboxCgroups(), []);
  assert.ok(readFileSync(join(fixture.cgroupRoot, 'cgroup.events'), 'utf8').includes('populated 0'), 'processes left in the scratch cgroup');
  assert.equal(existsSync(join(fixture.state, 'run')) ? readdirSync(join(fixture.state, 'run')) : [], []);
}

if ('skip' in mount) {
  test('SKIP: sandboxd crash tests', () => console.log(`SKIP: sandboxd-crash: ${mount.skip}`));
} else {
  test.before(() => {
    fixture = makeFixture(mount.path);
  });
  test.after.each(async () => {
    for (const proc of started) await kill9(proc);
    started.clear();
  });
  test.after(async () => {
    await fixture?.cleanup();
  });

  test('kill -9 during create, then restart: no Pending record, no orphan, reservations held', async () => {
    for (const delay of [20, 80, 160, 260]) {
      await killDuring(await startProcess(), 'POST', '/v1/sandboxes', delay, BODY);
    }
    let proc = await startProcess();
    await assertConsistent(proc);
    const held = (await records(proc)).length;
    await kill9(proc);
    // Reservations are the records: with the cap at what is held, one more create is refused.
    proc = await startProcess({ maxSandboxes: Math.max(held, 1) });
    if (held > 0) assert.is((await api(proc, 'POST', '/v1/sandboxes', BODY)).status, 429);
    await assertCleanAfterDelete(proc);
    await kill9(proc);
  });

  test('kill -9 during delete, then restart: the deletion intent survives and maintenance finishes it', async () => {
    for (const delay of [5, 40, 120]) {
      const { proc, id } = await crashDuring((id) => ['DELETE', `/v1/sandboxes/${id}`], delay);
      // Either the intent was durable (Stopping) and maintenance finishes it, or the kill came first
      // and the sandbox is untouched; never anything in between.
      let got = await api(proc, 'GET', `/v1/sandboxes/${id}`);
      for (let i = 0; i < 40 && got.status === 200 && got.json!.status.state === 'Stopping'; i++) {
        await sleep(100);
        got = await api(proc, 'GET', `/v1/sandboxes/${id}`);
      }
      assert.ok(got.status === 404 || got.json!.status.state === 'Running', `delay ${delay}: ${got.status} ${JSON.stringify(got.json)}`);
      await assertCleanAfterDelete(proc);
      await kill9(proc);
    }
  });

  test('kill -9 right after the sandbox directory (and its tombstone) is removed, then restart: the deletion finishes, never 503 for good', async () => {
    let proc = await startProcess();
    const id = (await api(proc, 'POST', '/v1/sandboxes', BODY)).json!.id as string;
    await kill9(proc);
    // A daemon killed at its removal of the sandbox's directory: the last step of cleanup that is not the record's own.
    const dir = join(fixture.state, 'run', id);
    const wrap = ['env', `LD_PRELOAD=${join(DIST_ROOT, 'lib', 'testing', 'killpoint.so')}`, 'KILLPOINT_CALL=rmdir', `KILLPOINT_PATH=${dir}`, 'KILLPOINT_AT=1'];
    proc = await startDaemonProcess(fixture, {}, { wrap });
    started.add(proc);
    await api(proc, 'DELETE', `/v1/sandboxes/${id}`).catch(() => undefined);
    await new Promise((resolve) => (proc.child.exitCode !== null || proc.child.signalCode !== null ? resolve(undefined) : proc.child.once('exit', resolve)));
    assert.is(proc.child.signalCode, 'SIGKILL', 'the kill point was reached');
    assert.not.ok(existsSync(dir), 'killed after the directory went');
    proc = await startProcess();
    let status = (await api(proc, 'DELETE', `/v1/sandboxes/${id}`)).status;
    for (let i = 0; i < 8 && status === 503; i++) status = (await sleep(250), await api(proc, 'DELETE', `/v1/sandboxes/${id}`)).status;
    assert.ok(status === 204 || status === 404, `delete after the restart: ${status}`);
    await assertCleanAfterDelete(proc);
    await kill9(proc);
  });

  test('kill -9 during pause, then restart: the state is the confirmed one, and the sandbox still works', async () => {
    for (const delay of [2, 15, 60]) {
      const { proc, id } = await crashDuring((id) => ['POST', `/v1/sandboxes/${id}/pause`], delay);
      const state = (await api(proc, 'GET', `/v1/sandboxes/${id}`)).json!.status.state as string;
      assert.ok(state === 'Paused' || state === 'Running', `delay ${delay}: ${state}`);
      assert.is((await api(proc, 'POST', `/v1/sandboxes/${id}/resume`)).status, 202);
      assert.is((await api(proc, 'POST', `/v1/sandboxes/${id}/pause`)).status, 202);
      assert.is((await api(proc, 'GET', `/v1/sandboxes/${id}`)).json!.status.state, 'Paused');
      await assertCleanAfterDelete(proc);
      await kill9(proc);
    }
  });

  test('expiry: nothing happens while the daemon is down; after the restart the expired sandbox is refused (409) and removed', async () => {
    let proc = await startProcess();
    const created = await api(proc, 'POST', '/v1/sandboxes', { ...BODY, timeout: 60 });
    const id = created.json!.id as string;
    await stopDaemonProcess(proc);
    // The deadline passes while the daemon is down (moved back in its record, as time would).
    const path = join(fixture.state, 'records', `${id}.json`);
    const wrapped = JSON.parse(readFileSync(path, 'utf8'));
    wrapped.record.expiresAt = new Date(Date.now() - 1000).toISOString();
    writeFileSync(path, JSON.stringify(wrapped));
    await sleep(1500);
    assert.ok(sandboxCgroups().includes(`sandboxd-${id}`), 'cleaned up while the daemon was down');
    proc = await startProcess();
    const endpoint = await api(proc, 'GET', `/v1/sandboxes/${id}/endpoints/44772`);
    assert.ok(endpoint.status === 409 || endpoint.status === 404, `endpoint after expiry: ${endpoint.status}`);
    if (endpoint.status === 409) assert.is(endpoint.json!.code, 'SANDBOX_EXPIRED');
    let got = await api(proc, 'GET', `/v1/sandboxes/${id}`);
    for (let i = 0; i < 50 && got.status !== 404; i++) got = (await sleep(100), await api(proc, 'GET', `/v1/sandboxes/${id}`));
    assert.is(got.status, 404);
    assert.equal(sandboxCgroups(), []);
    await kill9(proc);
  });

  test('a second daemon on the same state directory (any spelling of it) exits 4 naming the holder; the first keeps serving', async () => {
    const first = await startProcess();
    const created = await api(first, 'POST', '/v1/sandboxes', BODY);
    const link = join(fixture.root, 'state-link');
    symlinkSync(fixture.root, link);
    for (const state of [fixture.state, join(link, 's')]) {
      // The real command: the lock is taken before the host preflight, which this machine would fail.
      const second = await runTool('sandboxd', ['serve', '--images-dir', fixture.imagesDir, '--cgroup-root', fixture.cgroupRoot, '--state', state, '--listen', '127.0.0.1:0', '--public-endpoint', '127.0.0.1:1'], {
        env: { SVC_API_KEY: fixture.apiKey },
        timeoutMs: 30_000,
      });
      assert.is(second.code, 4, second.stderr);
      assert.match(second.stderr, `state directory busy: ${state} is locked by sandboxd process ${first.child.pid}`);
    }
    assert.is((await api(first, 'GET', `/v1/sandboxes/${created.json!.id}`)).json!.status.state, 'Running');
    await assertCleanAfterDelete(first);
    await kill9(first);
  });

  test('a normal stop leaves sandboxes running; the restart finds them Running', async () => {
    let proc = await startProcess();
    const created = await api(proc, 'POST', '/v1/sandboxes', BODY);
    await stopDaemonProcess(proc);
    proc = await startProcess();
    assert.is((await api(proc, 'GET', `/v1/sandboxes/${created.json!.id}`)).json!.status.state, 'Running');
    await assertCleanAfterDelete(proc);
    await kill9(proc);
  });
}

test.run();
