/** The egress service as a real host process, driven through the official SDK's egress adapter. */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { SandboxApiException } from '@alibaba-group/opensandbox';
import { egressClient, startGuestService } from './guest-process.js';

async function expectCode(fn: () => Promise<unknown>, code: string, status: number): Promise<void> {
  try {
    await fn();
  } catch (e) {
    assert.instance(e, SandboxApiException);
    const err = e as SandboxApiException;
    assert.is(err.statusCode, status);
    assert.is(err.error.code, code, err.message);
    assert.ok((err.error.message ?? '').length > 0);
    return;
  }
  assert.unreachable(`expected ${code}`);
}

test('healthz, allow-all policy, and policy changes refused as not supported', async () => {
  const svc = await startGuestService('egress');
  const sdk = egressClient(svc.addr, svc.headers);
  try {
    const health = await fetch(`http://${svc.addr}/healthz`);
    assert.is(health.status, 200);
    assert.is(await health.text(), 'ok');
    const policy = await sdk.egress.getPolicy();
    assert.is(policy.defaultAction, 'allow');
    const raw = (await (await fetch(`http://${svc.addr}/policy`, { headers: svc.headers })).json()) as { status: string; mode: string };
    assert.is(raw.status, 'ok');
    assert.is(raw.mode, 'allow_all');
    await expectCode(() => sdk.egress.patchRules([{ action: 'deny', target: 'example.com' }]), 'NOT_SUPPORTED', 501);
    await expectCode(() => sdk.egress.deleteRules(['example.com']), 'NOT_SUPPORTED', 501);
    const missing = await fetch(`http://${svc.addr}/nope`, { headers: svc.headers });
    assert.is(missing.status, 404);
    assert.is(((await missing.json()) as { code: string }).code, 'NOT_FOUND');
  } finally {
    await sdk.close();
    await svc.stop();
  }
});

test('the egress auth header is enforced; healthz stays open', async () => {
  const token = 'egress-' + 'z'.repeat(32);
  const svc = await startGuestService('egress', { token });
  const anonymous = egressClient(svc.addr);
  const right = egressClient(svc.addr, { 'OPENSANDBOX-EGRESS-AUTH': token });
  try {
    assert.is((await fetch(`http://${svc.addr}/healthz`)).status, 200);
    await expectCode(() => anonymous.egress.getPolicy(), 'UNAUTHORIZED', 401);
    assert.is((await right.egress.getPolicy()).defaultAction, 'allow');
  } finally {
    await Promise.all([anonymous.close(), right.close()]);
    await svc.stop();
  }
});

test.run();
