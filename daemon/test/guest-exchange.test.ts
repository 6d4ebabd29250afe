/**
 * The raw path of proxied downloads (daemon/api/guest-exchange.ts), both ways it can go: in the
 * kernel (splice-relay.c) and through Node. A stand-in guest on a Unix socket answers with a head
 * and a body it controls; the client's side is a real TCP connection whose far end the test reads.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { GuestExchange, kernelRelayLoaded } from '../api/guest-exchange.js';

const scratch = mkdtempSync(join(tmpdir(), 'guest-exchange-'));
test.after(() => rmSync(scratch, { recursive: true, force: true }));

/** Bytes no two positions of which are alike on a power-of-two stride: a byte out of place changes the hash. */
const pattern = (n: number): Buffer => Buffer.from(Array.from({ length: n }, (_, i) => (i * 7919) % 251));
const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
const listening = (server: net.Server, at: string | number): Promise<void> => new Promise((resolve) => server.listen(at as never, '127.0.0.1' as never, () => resolve()));

interface Run {
  /** What `done` said. */
  error: Error | undefined;
  /** What the client received. */
  received: Buffer;
  /** Whether the guest saw its connection closed. */
  guestClosed: Promise<void>;
}

/**
 * One exchange: the guest answers `announced` bytes in its head and then plays `guest`; the client
 * reads (or, with `leaveAfter`, goes away after that many bytes).
 */
async function exchange(through: 'kernel' | 'node', announced: number, guest: (socket: net.Socket) => void, leaveAfter?: number): Promise<Run> {
  const path = join(scratch, `guest-${Math.random().toString(36).slice(2)}.sock`);
  let guestClosed!: Promise<void>;
  const guestServer = net.createServer((socket) => {
    guestClosed = new Promise((resolve) => socket.once('close', () => resolve()));
    socket.on('error', () => {});
    socket.write(`HTTP/1.1 200 OK\r\ncontent-length: ${announced}\r\n\r\n`);
    guest(socket);
  });
  await new Promise<void>((resolve) => guestServer.listen(path, resolve));
  const clientServer = net.createServer();
  await listening(clientServer, 0);
  const out = new Promise<net.Socket>((resolve) => clientServer.once('connection', resolve));
  const reader = net.connect((clientServer.address() as net.AddressInfo).port, '127.0.0.1');
  const chunks: Buffer[] = [];
  let got = 0;
  const readerDone = new Promise<void>((resolve) => {
    reader.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      got += chunk.length;
      if (leaveAfter !== undefined && got >= leaveAfter) reader.destroy();
    });
    reader.on('close', () => resolve());
    reader.on('error', () => {});
  });
  const socket = net.connect(path);
  const exchangeSide = new GuestExchange(socket);
  // The head comes out of the readable side, as Node's HTTP client would read it.
  await new Promise<void>((resolve) => exchangeSide.once('data', () => resolve()));
  const client = await out;
  client.on('error', () => {});
  const error = await new Promise<Error | undefined>((resolve) => exchangeSide.sendBody(announced, client, resolve, through));
  client.end();
  await readerDone;
  guestServer.close();
  clientServer.close();
  return { error, received: Buffer.concat(chunks), guestClosed };
}

test('the kernel relay (splice-relay.node) is built and loads', () => {
  assert.ok(kernelRelayLoaded(), 'dist/daemon/api/splice-relay.node did not load: scripts/build-native.sh builds it');
});

for (const through of ['kernel', 'node'] as const) {
  test(`${through}: a 3 MiB body written in pieces arrives byte for byte`, async () => {
    const body = pattern(3 * 1024 * 1024 + 7);
    const run = await exchange(through, body.length, (socket) => {
      let at = 0;
      const next = (): void => {
        if (at >= body.length) return;
        const piece = body.subarray(at, at + 700_001);
        at += piece.length;
        socket.write(piece, () => setTimeout(next, 1));
      };
      next();
    });
    assert.is(run.error, undefined);
    assert.is(run.received.length, body.length);
    assert.is(sha(run.received), sha(body));
    await run.guestClosed;
  });

  test(`${through}: a guest that closes short ends the exchange with an error naming the missing bytes`, async () => {
    const run = await exchange(through, 2 * 1024 * 1024, (socket) => socket.end(pattern(2 * 1024 * 1024 - 1000)));
    assert.match(run.error?.message ?? '', /1000 bytes short/);
    assert.is(run.received.length, 2 * 1024 * 1024 - 1000);
  });

  test(`${through}: a guest that sends more than it announced is an error`, async () => {
    const run = await exchange(through, 1024 * 1024, (socket) => socket.write(pattern(1024 * 1024 + 5)));
    assert.match(run.error?.message ?? '', /more than/);
    assert.ok(run.received.length <= 1024 * 1024, 'nothing past the announced length reached the client');
    await run.guestClosed;
  });

  test(`${through}: a client that goes away mid-body ends the exchange and closes the guest's connection`, async () => {
    const run = await exchange(through, 64 * 1024 * 1024, (socket) => socket.write(pattern(4 * 1024 * 1024)), 1024 * 1024);
    assert.ok(run.error, 'the exchange ended with an error');
    await run.guestClosed;
  });
}

test.run();
