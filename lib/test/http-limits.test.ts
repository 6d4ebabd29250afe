/** The listeners' connection cap: the open-file limit read, and a real listener that closes what is past its cap. */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { capConnections, FALLBACK_OPEN_FILE_LIMIT, openFileLimit } from '../http-limits.js';
import { underOpenFileLimit } from '../testing/descriptors.js';
import { scratchDir } from '../testing/scratch.js';

test('openFileLimit: the soft "Max open files" of /proc/self/limits; the fallback when unreadable or unparsable', () => {
  const dir = scratchDir('limits');
  const file = join(dir, 'limits');
  writeFileSync(file, 'Limit                     Soft Limit           Hard Limit           Units     \nMax processes             63619                63619                processes \nMax open files            1024                 4096                 files     \n');
  assert.is(openFileLimit(file), 1024);
  writeFileSync(file, 'Max open files            unlimited            unlimited            files     \n');
  assert.is(openFileLimit(file), Number.MAX_SAFE_INTEGER);
  writeFileSync(file, 'Max processes 10 10\n');
  assert.is(openFileLimit(file), FALLBACK_OPEN_FILE_LIMIT);
  assert.is(openFileLimit(join(dir, 'missing')), FALLBACK_OPEN_FILE_LIMIT);
});

test('openFileLimit: what a process started under `ulimit -n 200` can open', () => {
  const module = new URL('../http-limits.js', import.meta.url).href;
  const script = `import(${JSON.stringify(module)}).then((m) => process.stdout.write(String(m.openFileLimit())))`;
  const [command, ...args] = [...underOpenFileLimit(200), process.execPath, '--input-type=module', '-e', script];
  const out = execFileSync(command, args, { encoding: 'utf8' });
  assert.is(out, '200');
});

test('capConnections: the limit less the reserve, shared among the listeners, divided by descriptors per connection', () => {
  const [a, b] = [createServer(), createServer()];
  assert.equal(capConnections([{ name: 'a', server: a, descriptorsPerConnection: 2 }], () => undefined, { limit: 1024, reserve: 128 }), [448]);
  assert.equal(capConnections([{ name: 'a', server: a, descriptorsPerConnection: 1 }, { name: 'b', server: b, descriptorsPerConnection: 2 }], () => undefined, { limit: 1024, reserve: 128 }), [448, 224]);
  assert.is(a.maxConnections, 448);
  assert.is(b.maxConnections, 224);
  // A limit below the reserve still leaves a usable few.
  assert.equal(capConnections([{ name: 'a', server: a, descriptorsPerConnection: 2 }], () => undefined, { limit: 100, reserve: 128 }), [8]);
});

test('capConnections: past its cap a listener closes new connections at once, warns once, and serves again when they end', async () => {
  const warnings: string[] = [];
  const server = createServer((_req, res) => res.end('ok'));
  capConnections([{ name: 'test listener', server, descriptorsPerConnection: 1 }], (m) => warnings.push(m), { limit: 18, reserve: 8 });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  const open = (): Promise<Socket> => new Promise((resolve) => { const s = connect(port, '127.0.0.1', () => resolve(s)).on('error', () => undefined); });
  const held = await Promise.all(Array.from({ length: 10 }, open));
  const past = await Promise.all(Array.from({ length: 5 }, open));
  await Promise.all(past.map((s) => new Promise((resolve) => (s.destroyed ? resolve(undefined) : s.once('close', resolve)))));
  assert.is(warnings.length, 1, warnings.join('\n'));
  assert.match(warnings[0]!, /test listener: at its cap of 10 connections \(open-file limit 18, 8 descriptors kept/);
  held.forEach((s) => s.destroy());
  await sleep(100);
  const answer = await fetch(`http://127.0.0.1:${port}/`);
  assert.is(await answer.text(), 'ok');
  server.close();
});

test.run();
