/**
 * A flood of held connections against a real daemon whose open-file limit is low (300): the
 * listener's cap keeps descriptors for the daemon's own work, so an expiry and a DELETE finish
 * during the flood, a proxied request still reaches its sandbox, and after the flood the daemon
 * answers as before. Without the cap the flood took every descriptor and all of these failed
 * with EMFILE until it ended.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { Agent } from 'node:http';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { holdConnections, requestOn, sampleDescriptors, underOpenFileLimit } from '../../lib/testing/descriptors.js';
import { cgroup2Mount, makeFixture, type Fixture } from './supervisor/fixture.js';
import { api, startDaemonProcess, stopDaemonProcess, type DaemonProcess } from './supervisor/process.js';

const mount = cgroup2Mount();
const NOFILE = 300;
const FLOOD = 2 * NOFILE;
/** What the second test lowers a running daemon's limit to: a little above what it holds idle. */
const LOWERED = 60;
const BODY = { image: { uri: 'test' }, entrypoint: ['sleep', 'infinity'], resourceLimits: { cpu: '250m', memory: '256Mi' }, timeout: 3600 };
let fixture: Fixture;
const started = new Set<DaemonProcess>();

async function start(nofile?: number): Promise<DaemonProcess> {
  // Few sandboxes: the descriptors the daemon reserves for starting them fit in the low limit.
  const proc = await startDaemonProcess(fixture, { maxSandboxes: 4 }, nofile === undefined ? {} : { wrap: underOpenFileLimit(nofile) });
  started.add(proc);
  return proc;
}

/** One lifecycle call over `agent`'s connection. */
function over(agent: Agent, proc: DaemonProcess, method: string, path: string): Promise<{ status: number; text: string }> {
  return requestOn(agent, `${proc.url}${path}`, method, { 'SVC-API-KEY': proc.apiKey });
}

if ('skip' in mount) {
  test('SKIP: sandboxd open-file limit', () => console.log(`SKIP: sandboxd-fd-limit: ${mount.skip}`));
} else {
  test.before(() => {
    fixture = makeFixture(mount.path);
  });
  test.after(async () => {
    for (const proc of started) if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGKILL');
    await fixture?.cleanup();
  });

  test('a flood of held connections beyond the cap: descriptors stay under the limit, an expiry and a DELETE finish, the proxy works, the daemon answers after', async () => {
    const first = await start();
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const created = await api(first, 'POST', '/v1/sandboxes', BODY);
      assert.is(created.status, 202, JSON.stringify(created.json));
      ids.push(created.json.id as string);
    }
    const [expiring, deleted, proxied] = ids as [string, string, string];
    await stopDaemonProcess(first);
    // The deadline falls during the flood (moved in its record while the daemon is down: a TTL is at least 60 s).
    const record = join(fixture.state, 'records', `${expiring}.json`);
    const wrapped = JSON.parse(readFileSync(record, 'utf8'));
    wrapped.record.expiresAt = new Date(Date.now() + 2500).toISOString();
    writeFileSync(record, JSON.stringify(wrapped));

    const proc = await start(NOFILE);
    const port = Number(new URL(proc.url).port);
    // Connections a client (a reverse proxy) had open before the flood began.
    const agents = [0, 1, 2].map(() => new Agent({ keepAlive: true, maxSockets: 1 }));
    for (const agent of agents) assert.is((await over(agent, proc, 'GET', '/v1/sandboxes')).status, 200);
    const [deleting, proxying, polling] = agents as [Agent, Agent, Agent];

    const held = holdConnections(port, FLOOD);
    const descriptors = sampleDescriptors(proc.child.pid!);
    try {
      await sleep(1000);
      const del = await over(deleting, proc, 'DELETE', `/v1/sandboxes/${deleted}`);
      assert.is(del.status, 204, `DELETE during the flood: ${del.status} ${del.text}`);
      const ping = await over(proxying, proc, 'GET', `/v1/sandboxes/${proxied}/proxy/44772/ping`);
      assert.is(ping.status, 200, `proxied request during the flood: ${ping.status} ${ping.text}`);
      let got = await over(polling, proc, 'GET', `/v1/sandboxes/${expiring}`);
      for (let i = 0; i < 60 && got.status !== 404; i++) got = (await sleep(100), await over(polling, proc, 'GET', `/v1/sandboxes/${expiring}`));
      assert.is(got.status, 404, `the expired sandbox during the flood: ${got.status} ${got.text}`);
      const most = descriptors.stop();
      assert.ok(most < NOFILE, `the daemon held ${most} descriptors of its ${NOFILE}`);
    } finally {
      descriptors.stop();
      held.release();
      for (const agent of agents) agent.destroy();
    }
    for (const id of [expiring, deleted]) {
      assert.not.ok(existsSync(join(fixture.state, 'records', `${id}.json`)), `${id}: record left`);
      assert.not.ok(existsSync(join(fixture.cgroupRoot, `sandboxd-${id}`)), `${id}: cgroup left`);
    }
    // After the flood: new connections are served again.
    await sleep(200);
    const list = await api(proc, 'GET', '/v1/sandboxes');
    assert.is(list.status, 200);
    assert.equal(list.json.items.map((s: { id: string }) => s.id), [proxied]);
    assert.is((await api(proc, 'DELETE', `/v1/sandboxes/${proxied}`)).status, 204);
    // Told once, not once per connection closed.
    assert.is(proc.stderr().match(/at its cap of \d+ connections/g)?.length, 1, proc.stderr());
    await stopDaemonProcess(proc);
  });

  test('descriptors used up anyway (the limit lowered under a running daemon): requests fail with a 503 that says so, nothing half-done, and succeed once descriptors are free', async () => {
    const proc = await start();
    const created = await api(proc, 'POST', '/v1/sandboxes', BODY);
    assert.is(created.status, 202, JSON.stringify(created.json));
    const id = created.json.id as string;
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    assert.is((await over(agent, proc, 'GET', '/v1/sandboxes')).status, 200);
    // Its cap was set for the limit it started with; the flood then takes what is left of the new one.
    const lowered = spawnSync('prlimit', ['--pid', String(proc.child.pid), `--nofile=${LOWERED}:${LOWERED}`], { encoding: 'utf8' });
    assert.is(lowered.status, 0, `prlimit: ${lowered.stderr}`);
    const held = holdConnections(Number(new URL(proc.url).port), 2 * LOWERED);
    try {
      await sleep(500);
      for (const [method, path] of [['DELETE', `/v1/sandboxes/${id}`], ['GET', `/v1/sandboxes/${id}`], ['GET', `/v1/sandboxes/${id}/proxy/44772/ping`]] as const) {
        const answer = await over(agent, proc, method, path);
        assert.is(answer.status, 503, `${method} ${path}: ${answer.status} ${answer.text}`);
        assert.match(answer.text, /open-file limit/);
      }
    } finally {
      held.release();
      agent.destroy();
    }
    await sleep(200);
    const got = await api(proc, 'GET', `/v1/sandboxes/${id}`);
    assert.is(got.json.status.state, 'Running', 'the refused DELETE changed the sandbox');
    assert.is((await api(proc, 'DELETE', `/v1/sandboxes/${id}`)).status, 204);
    assert.not.ok(existsSync(join(fixture.cgroupRoot, `sandboxd-${id}`)));
    assert.not.match(proc.stderr(), /INTERNAL|error: sandboxd/);
    await stopDaemonProcess(proc);
  });
}

test.run();
