/**
 * Readiness of a sandbox's guest services, checked through the vsock bridges: execd `/ping` 200,
 * `/ready` 200 with `initialized: true`, egress `/healthz` 200; bodies read up to 16 KiB.
 */
import { request } from 'node:http';
import { connectGuestPort, EGRESS_PORT, EXECD_PORT } from './vsock.js';

const BODY_LIMIT = 16 * 1024;
const PROBE_TIMEOUT_MS = 3_000;

async function probe(vsockPath: string, port: number, path: string): Promise<{ status: number; body: string }> {
  const socket = await connectGuestPort(vsockPath, port, PROBE_TIMEOUT_MS);
  return new Promise((resolve, reject) => {
    const req = request({ path, method: 'GET', headers: { host: 'sandbox', connection: 'close' }, createConnection: () => socket.resume(), timeout: PROBE_TIMEOUT_MS }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        body += chunk;
        if (body.length > BODY_LIMIT) req.destroy(new Error(`${path}: body above ${BODY_LIMIT} bytes`));
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`${path}: no answer within ${PROBE_TIMEOUT_MS} ms`)));
    req.on('error', reject);
    req.end();
  });
}

/** Resolves when all three checks pass; otherwise rejects with the first failure. */
export async function checkReadiness(vsockPath: string): Promise<void> {
  const ping = await probe(vsockPath, EXECD_PORT, '/ping');
  if (ping.status !== 200) throw new Error(`execd /ping answered ${ping.status}`);
  const ready = await probe(vsockPath, EXECD_PORT, '/ready');
  let initialized = false;
  try {
    initialized = (JSON.parse(ready.body) as { initialized?: unknown }).initialized === true;
  } catch {
    // not JSON: not initialized
  }
  if (ready.status !== 200 || !initialized) throw new Error(`execd /ready answered ${ready.status} without initialized: true`);
  const health = await probe(vsockPath, EGRESS_PORT, '/healthz');
  if (health.status !== 200) throw new Error(`egress /healthz answered ${health.status}`);
}
