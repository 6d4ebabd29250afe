import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Progress, formatBytes, formatDuration } from '../progress.js';

function sink(isTTY: boolean) {
  const writes: string[] = [];
  return { isTTY, columns: 120, writes, write: (chunk: string) => writes.push(chunk) };
}

test('progress shows counts, bytes, rate and ETA', () => {
  let now = 0;
  const stream = sink(false);
  const progress = new Progress({ label: 'import', totalBytes: 4 * 1024 * 1024, stream, now: () => now });
  progress.add(1000, 1024 * 1024);
  now = 2000;
  assert.is(progress.line(), 'import: 1,000 records · 1.0 MiB / 4.0 MiB (25%) · 512.0 KiB/s · ETA 6s');
  progress.done();
});

test('progress with a known number of records shows the share done and the ETA', () => {
  let now = 0;
  const progress = new Progress({ label: 'index', unit: 'rows', totalRecords: 4000, stream: sink(false), now: () => now });
  progress.add(1000);
  now = 2000;
  assert.is(progress.line(), 'index: 1,000 / 4,000 rows (25%) · 500/s · ETA 6s');
  progress.add(3000);
  assert.is(progress.line(), 'index: 4,000 / 4,000 rows (100%) · 2,000/s · ETA 0s');
});

test('progress without bytes shows the record rate', () => {
  let now = 0;
  const progress = new Progress({ label: 'scan', unit: 'files', stream: sink(false), now: () => now });
  progress.add(50);
  now = 10_000;
  assert.is(progress.line(), 'scan: 50 files · 5/s');
});

test('progress draws nothing when stderr is not a terminal, and clears its line when it is', async () => {
  const pipe = sink(false);
  const quiet = new Progress({ label: 'x', stream: pipe, redrawMs: 5 });
  quiet.add(1);
  await new Promise((r) => setTimeout(r, 30));
  quiet.done();
  assert.equal(pipe.writes, []);

  const tty = sink(true);
  const loud = new Progress({ label: 'x', stream: tty, redrawMs: 5 });
  loud.add(1);
  await new Promise((r) => setTimeout(r, 30));
  loud.done();
  assert.ok(tty.writes.length >= 2);
  assert.match(tty.writes[0] ?? '', 'x: 1 records');
  assert.is(tty.writes.at(-1), '\r\x1b[2K');
});

test('byte and duration formatting', () => {
  assert.is(formatBytes(512), '512 B');
  assert.is(formatBytes(1536), '1.5 KiB');
  assert.is(formatBytes(3 * 1024 ** 3), '3.0 GiB');
  assert.is(formatDuration(59), '59s');
  assert.is(formatDuration(61), '1m01s');
  assert.is(formatDuration(3600 * 2 + 60 * 5), '2h05m');
  assert.is(formatDuration(Infinity), '?');
});

test.run();
