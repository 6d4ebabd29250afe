/** Slow tier: a 1 GiB download through the SDK with bounded memory on both ends. */
import { createHash } from 'node:crypto';
import { closeSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execdClient, startGuestService } from './guest-process.js';

test('a 1 GiB file streams out with bounded service and client memory', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'guest-large-'));
  const path = join(dir, 'one-gib.bin');
  const chunk = Buffer.alloc(1 << 20);
  for (let i = 0; i < chunk.length; i++) chunk[i] = (i * 131 + 17) & 0xff;
  const expected = createHash('sha256');
  const fd = openSync(path, 'w');
  for (let i = 0; i < 1024; i++) {
    chunk[0] = i & 0xff; // every MiB differs, so a repeated or skipped chunk changes the hash
    writeSync(fd, chunk);
    expected.update(chunk);
  }
  closeSync(fd);
  const svc = await startGuestService('execd');
  const sdk = execdClient(svc.addr, svc.headers);
  try {
    const got = createHash('sha256');
    let total = 0;
    let clientPeak = 0;
    for await (const part of sdk.files.readBytesStream(path)) {
      got.update(part);
      total += part.length;
      if ((total & ((64 << 20) - 1)) < part.length) clientPeak = Math.max(clientPeak, process.memoryUsage().rss);
    }
    assert.is(total, 1 << 30);
    assert.is(got.digest('hex'), expected.digest('hex'));
    assert.ok(svc.peakRssKiB() < 64 * 1024, `execd peak RSS ${svc.peakRssKiB()} KiB`);
    assert.ok(clientPeak < 512 * 1024 * 1024, `client RSS ${clientPeak}`);
  } finally {
    await sdk.close();
    await svc.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
