/**
 * The official `@alibaba-group/opensandbox` SDK, unchanged, drives the real daemon (on the test
 * supervisor, which runs the real guest services): create, a streamed command, files, pause,
 * resume, renew, list with filters, kill. The key travels in the SDK's `headers` option.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ConnectionConfig, Sandbox, SandboxApiException, SandboxManager } from '@alibaba-group/opensandbox';
import { cgroup2Mount, makeFixture, TEST_IMAGE, type Fixture } from './supervisor/fixture.js';
import type { RunningDaemon } from '../index.js';

process.env.OPENSANDBOX_DISABLE_METRICS = '1';
const mount = cgroup2Mount();
let fixture: Fixture;
let daemon: RunningDaemon;
let config: ConnectionConfig;

if ('skip' in mount) {
  test('SKIP: sandboxd SDK end to end', () => console.log(`SKIP: sandboxd-sdk: ${mount.skip}`));
} else {
  test.before(async () => {
    fixture = makeFixture(mount.path);
    daemon = await fixture.start();
    config = new ConnectionConfig({ domain: daemon.url, headers: { 'SVC-API-KEY': fixture.apiKey }, requestTimeoutSeconds: 60 });
  });

  test.after(async () => {
    await daemon?.close();
    await fixture?.cleanup();
  });

  test('the SDK drives the whole lifecycle', async () => {
    const sandbox = await Sandbox.create({ connectionConfig: config, image: TEST_IMAGE, metadata: { team: 'sdk', run: 'one' } });
    try {
      const chunks: string[] = [];
      const execution = await sandbox.commands.run('for i in 1 2 3; do echo line$i; done; echo err >&2', {}, { onStdout: (m) => void chunks.push(m.text) });
      assert.is(execution.exitCode, 0);
      assert.is(chunks.join(''), 'line1\nline2\nline3\n');
      assert.is(execution.logs.stderr.map((m) => m.text).join(''), 'err\n');

      await sandbox.files.writeFiles([{ path: `${fixture.root}/data/a.txt`, data: 'hello from the SDK' }]);
      assert.is(await sandbox.files.readFile(`${fixture.root}/data/a.txt`), 'hello from the SDK');

      const manager = SandboxManager.create({ connectionConfig: config });
      await sandbox.pause();
      assert.is((await sandbox.getInfo()).status.state, 'Paused');
      const paused = await manager.listSandboxInfos({ states: ['paused'], metadata: { team: 'sdk' } });
      assert.equal(paused.items.map((s) => s.id), [sandbox.id]);
      assert.is((await manager.listSandboxInfos({ states: ['Running'] })).items.length, 0);

      const resumed = await sandbox.resume();
      assert.is((await resumed.getInfo()).status.state, 'Running');
      assert.is((await resumed.commands.run('echo again')).logs.stdout[0]?.text, 'again\n');

      const before = (await resumed.getInfo()).expiresAt!;
      await resumed.renew(3600);
      const after = (await resumed.getInfo()).expiresAt!;
      assert.ok(after.getTime() > before.getTime(), `${after.toISOString()} extends ${before.toISOString()}`);

      const byMeta = await manager.listSandboxInfos({ metadata: { team: 'sdk', run: 'one' } });
      assert.is(byMeta.items.length, 1);
      assert.is((await manager.listSandboxInfos({ metadata: { team: 'other' } })).items.length, 0);
      await manager.close();
      await resumed.kill();
      await resumed.close();
    } finally {
      await sandbox.kill().catch(() => undefined);
      await sandbox.close();
    }
    const left = await fetch(`${daemon.url}/v1/sandboxes/${sandbox.id}`, { headers: { 'SVC-API-KEY': fixture.apiKey } });
    assert.is(left.status, 404);
  });

  test('metadata filters as the SDK encodes them (k=v joined by &, no escaping): values with %, + and spaces match', async () => {
    const metadata = { discount: '50%', lang: 'c++', title: 'a b', escaped: 'x%20y' };
    const sandbox = await Sandbox.create({ connectionConfig: config, image: TEST_IMAGE, metadata });
    const manager = SandboxManager.create({ connectionConfig: config });
    try {
      for (const [key, value] of Object.entries(metadata)) {
        const found = await manager.listSandboxInfos({ metadata: { [key]: value } });
        assert.equal(found.items.map((s) => s.id), [sandbox.id], `${key}=${value}`);
      }
      assert.equal((await manager.listSandboxInfos({ metadata })).items.map((s) => s.id), [sandbox.id]);
      assert.is((await manager.listSandboxInfos({ metadata: { discount: '50' } })).items.length, 0);
      // The protocol's own example escapes the pairs once more: that reading matches too.
      const escaped = encodeURIComponent('title=a%20b&lang=c%2B%2B&discount=50%25');
      const listed = await fetch(`${daemon.url}/v1/sandboxes?metadata=${escaped}`, { headers: { 'SVC-API-KEY': fixture.apiKey } });
      assert.equal(((await listed.json()) as { items: { id: string }[] }).items.map((s) => s.id), [sandbox.id]);
    } finally {
      await manager.close();
      await sandbox.kill();
      await sandbox.close();
    }
  });

  test('a create from a snapshot, as the SDK sends it (no image), is refused with 501 NOT_SUPPORTED', async () => {
    const refused = await Sandbox.create({ connectionConfig: config, snapshotId: 'snap-1' }).then(
      () => undefined,
      (error: unknown) => error,
    );
    if (!(refused instanceof SandboxApiException)) return assert.unreachable(`not an API refusal: ${String(refused)}`);
    assert.is(refused.statusCode, 501);
    assert.is(refused.error.code, 'NOT_SUPPORTED');
    assert.match(refused.message, 'snapshotId');
  });

  test('on an IPv6 loopback listener the endpoints name a bracketed authority the SDK can reach', async () => {
    const v6 = makeFixture(mount.path);
    const v6Daemon = await v6.start({ listen: '[::1]:0' });
    try {
      const v6Config = new ConnectionConfig({ domain: v6Daemon.url, headers: { 'SVC-API-KEY': v6.apiKey } });
      const sandbox = await Sandbox.create({ connectionConfig: v6Config, image: TEST_IMAGE });
      try {
        assert.match((await sandbox.getEndpoint(44772)).endpoint, `[::1]:${v6Daemon.port}/`);
        assert.is((await sandbox.commands.run('echo over-v6')).logs.stdout[0]?.text, 'over-v6\n');
      } finally {
        await sandbox.kill();
        await sandbox.close();
      }
    } finally {
      await v6Daemon.close();
      await v6.cleanup();
    }
  });

  test('use_server_proxy: the key instead of the sandbox token', async () => {
    const proxied = new ConnectionConfig({ domain: daemon.url, headers: { 'SVC-API-KEY': fixture.apiKey }, useServerProxy: true });
    const sandbox = await Sandbox.create({ connectionConfig: proxied, image: TEST_IMAGE, timeoutSeconds: null });
    try {
      assert.is((await sandbox.commands.run('echo via-key')).logs.stdout[0]?.text, 'via-key\n');
      assert.is((await sandbox.getInfo()).expiresAt ?? undefined, undefined);
    } finally {
      await sandbox.kill();
      await sandbox.close();
    }
  });
}

test.run();
