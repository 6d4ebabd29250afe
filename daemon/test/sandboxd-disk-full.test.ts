/**
 * The state directory's file system full, under a real daemon process (its state on a small tmpfs
 * of its own): create, delete, renew and pause are answered 507 saying so, the registry on disk is
 * as it was, and everything works again once space is freed.
 *
 * Mounting needs root (CAP_SYS_ADMIN); elsewhere the test says so and checks nothing.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmdirSync, rmSync, statfsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { cgroup2Mount, makeFixture, type Fixture } from './supervisor/fixture.js';
import { api, startDaemonProcess, type DaemonProcess } from './supervisor/process.js';

const mount = cgroup2Mount();
const BODY = { image: { uri: 'test' }, entrypoint: ['sleep', 'infinity'], resourceLimits: { cpu: '250m', memory: '256Mi' } };

/** The registry's files and their contents. */
function registryFiles(state: string): Record<string, string> {
  const files: Record<string, string> = {};
  for (const name of readdirSync(join(state, 'records'))) files[name] = readFileSync(join(state, 'records', name), 'utf8');
  return files;
}

let fixture: Fixture | undefined;
let daemon: DaemonProcess | undefined;
let mounted: string | undefined;

if ('skip' in mount) {
  test('SKIP: sandboxd disk-full tests', () => console.log(`SKIP: sandboxd-disk-full: ${mount.skip}`));
} else {
  test.after(async () => {
    daemon?.child.kill('SIGKILL');
    await fixture?.cleanup();
    if (mounted) {
      spawnSync('umount', [mounted]);
      rmdirSync(mounted);
    }
  });

  test('a full state directory: 507 for every change, the registry intact, and all works once space is back', async () => {
    const dir = mkdtempSync('/tmp/sbf-');
    if (spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'tmpfs', dir]).status !== 0) {
      rmdirSync(dir);
      console.log('SKIP: sandboxd-disk-full: this user may not mount a tmpfs');
      return;
    }
    mounted = dir;
    fixture = makeFixture(mount.path);
    const state = join(dir, 's');
    daemon = await startDaemonProcess(fixture, { state });
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) ids.push((await api(daemon, 'POST', '/v1/sandboxes', { ...BODY, timeout: 3600 })).json!.id as string);
    const before = registryFiles(state);

    const filler = join(dir, 'filler');
    const { bavail, bsize } = statfsSync(dir);
    writeFileSync(filler, Buffer.alloc(bavail * bsize));
    const refused = [
      await api(daemon, 'POST', '/v1/sandboxes', BODY),
      await api(daemon, 'DELETE', `/v1/sandboxes/${ids[0]}`),
      await api(daemon, 'POST', `/v1/sandboxes/${ids[1]}/renew-expiration`, { expiresAt: new Date(Date.now() + 7200_000).toISOString() }),
      await api(daemon, 'POST', `/v1/sandboxes/${ids[1]}/pause`),
    ];
    for (const answer of refused) {
      assert.is(answer.status, 507, JSON.stringify(answer.json));
      assert.is(answer.json!.code, 'INSUFFICIENT_STORAGE');
      assert.match(answer.json!.message, /no space left in the state directory/);
    }
    assert.equal(registryFiles(state), before);
    for (const id of ids) assert.is((await api(daemon, 'GET', `/v1/sandboxes/${id}`)).json!.status.state, 'Running');

    // Room for the admission's record and no more: the creation fails midway, is cleaned up, and says why.
    rmSync(filler);
    writeFileSync(filler, Buffer.alloc((statfsSync(dir).bavail - 1) * bsize));
    const midway = await api(daemon, 'POST', '/v1/sandboxes', BODY);
    assert.is(midway.status, 507, JSON.stringify(midway.json));
    assert.match(midway.json!.message, /nothing was created.*no space left in the state directory/, midway.json!.message);
    assert.equal(registryFiles(state), before);
    assert.is((await api(daemon, 'GET', '/v1/sandboxes')).json!.items.length, 2);

    rmSync(filler);
    const created = await api(daemon, 'POST', '/v1/sandboxes', BODY);
    assert.is(created.status, 202, JSON.stringify(created.json));
    for (const id of [...ids, created.json!.id as string]) assert.is((await api(daemon, 'DELETE', `/v1/sandboxes/${id}`)).status, 204);
    assert.equal(Object.keys(registryFiles(state)), ['meta.json']);
    assert.equal(readdirSync(join(state, 'run')), []);
  });
}

test.run();
