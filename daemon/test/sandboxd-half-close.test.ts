/**
 * A client that half-closes its connection once its request is sent (`shutdown(SHUT_WR)`: `nc -N`,
 * a socket's `end()`) still waits for its answer: the daemon (a process of its own, on the test
 * supervisor) gives it, from the lifecycle API (a create takes a while: its creator must learn the
 * sandbox's id) and from the data plane (a command's output). A client that leaves outright, or
 * half-closes and then leaves, still stops its command, as before (see lib/client-gone.ts).
 */
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { finalAnswer, rawRequest } from '../../lib/testing/host-header.js';
import { cgroup2Mount, makeFixture, type Fixture } from './supervisor/fixture.js';
import { api, startDaemonProcess, stopDaemonProcess, type DaemonProcess } from './supervisor/process.js';

const mount = cgroup2Mount();
const BODY = { image: { uri: 'test' }, entrypoint: ['sleep', 'infinity'], resourceLimits: { cpu: '250m', memory: '256Mi' } };
let fixture: Fixture;
let daemon: DaemonProcess;
let port: number;
/** A sandbox made by an ordinary client, whose commands the data-plane tests run. */
let sandbox: { id: string; execdToken: string };

/** A request's text with the lifecycle key (and the execution service's token, for the data plane). */
function head(method: string, path: string, body = ''): string {
  return `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nSVC-API-KEY: ${fixture.apiKey}\r\nX-EXECD-ACCESS-TOKEN: ${sandbox?.execdToken ?? ''}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n`;
}

/** Sends a request and half-closes the connection: the final answer's status and body, and the interim 1xx status lines before it. */
async function halfClosed(method: string, path: string, body = ''): Promise<{ status: number; body: string; interim: string[] }> {
  const answer = await rawRequest(port, head(method, path, body), body, { halfClose: true });
  const { interim, body: text } = finalAnswer(answer.text);
  return { status: answer.status, body: text, interim };
}

/** A command run through the proxy on a raw connection (half-closed or not), once its first line of output has come. */
async function commandStarted(command: string, halfClose: boolean): Promise<{ socket: Socket; commandId: string }> {
  const body = JSON.stringify({ command });
  const socket = connect(port, '127.0.0.1');
  const request = head('POST', `/v1/sandboxes/${sandbox.id}/proxy/44772/command`, body) + body;
  if (halfClose) socket.end(request);
  else socket.write(request);
  socket.on('error', () => undefined);
  let text = '';
  await new Promise<void>((resolve, reject) => {
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('utf8');
      if (text.includes('started')) resolve();
    });
    socket.on('close', () => reject(new Error(`the connection closed before the command started: ${JSON.stringify(text)}`)));
  });
  // The first event names the command: {"type":"init","text":ID}.
  const events = finalAnswer(text).body.split('\n').filter((line) => line.startsWith('{'));
  return { socket, commandId: (JSON.parse(events[0]!) as { text: string }).text };
}

/** A command's status once it has stopped running (polled for up to 10 s). */
async function stoppedCommand(commandId: string): Promise<{ running: boolean; exit_code: number | null }> {
  const path = `/v1/sandboxes/${sandbox.id}/proxy/44772/command/status/${commandId}`;
  const status = async () => {
    const res = await fetch(`${daemon.url}${path}`, { headers: { 'SVC-API-KEY': fixture.apiKey, 'X-EXECD-ACCESS-TOKEN': sandbox.execdToken } });
    assert.is(res.status, 200);
    return (await res.json()) as { running: boolean; exit_code: number | null };
  };
  let now = await status();
  for (let i = 0; i < 100 && now.running; i++) now = (await sleep(100), await status());
  return now;
}

if ('skip' in mount) {
  test('SKIP: sandboxd half-close', () => console.log(`SKIP: sandboxd-half-close: ${mount.skip}`));
} else {
  test.before(async () => {
    fixture = makeFixture(mount.path);
    daemon = await startDaemonProcess(fixture);
    port = Number(new URL(daemon.url).port);
    const created = await api(daemon, 'POST', '/v1/sandboxes', BODY);
    assert.is(created.status, 202);
    const endpoint = await api(daemon, 'GET', `/v1/sandboxes/${created.json.id}/endpoints/44772`);
    sandbox = { id: created.json.id, execdToken: endpoint.json.headers['X-EXECD-ACCESS-TOKEN'] };
  });
  test.after(async () => {
    if (daemon) {
      for (const item of (await api(daemon, 'GET', '/v1/sandboxes?pageSize=200')).json.items) await api(daemon, 'DELETE', `/v1/sandboxes/${item.id}`);
      await stopDaemonProcess(daemon);
    }
    await fixture?.cleanup();
  });

  test('a creator that half-closed once its request was sent learns its sandbox; inspection, pause, resume and delete answer it too', async () => {
    const created = await halfClosed('POST', '/v1/sandboxes', JSON.stringify(BODY));
    assert.is(created.status, 202, created.body);
    // Nothing of the lifecycle is cancelled when its client leaves, so there is no need to ask whether it has.
    assert.equal(created.interim, []);
    const id = (JSON.parse(created.body) as { id: string }).id;
    // The sandbox it was told of is the one made, and no other was.
    assert.is((await api(daemon, 'GET', `/v1/sandboxes/${id}`)).json.status.state, 'Running');
    const ids = (await api(daemon, 'GET', '/v1/sandboxes?pageSize=200')).json.items.map((item: { id: string }) => item.id).sort();
    assert.equal(ids, [id, sandbox.id].sort());
    // These ask the sandbox's supervisor first: not answered at once either.
    assert.is(JSON.parse((await halfClosed('GET', `/v1/sandboxes/${id}`)).body).status.state, 'Running');
    assert.match((await halfClosed('GET', `/v1/sandboxes/${id}/endpoints/44772`)).body, `/v1/sandboxes/${id}/proxy/44772`);
    assert.is((await halfClosed('POST', `/v1/sandboxes/${id}/pause`)).status, 202);
    assert.is((await api(daemon, 'GET', `/v1/sandboxes/${id}`)).json.status.state, 'Paused');
    assert.is((await halfClosed('POST', `/v1/sandboxes/${id}/resume`)).status, 202);
    assert.is((await halfClosed('DELETE', `/v1/sandboxes/${id}`)).status, 204);
    assert.is((await api(daemon, 'GET', `/v1/sandboxes/${id}`)).status, 404);
  });

  test('the data plane answers a client that half-closed: a command that takes a while runs to its end and its output arrives', async () => {
    assert.is((await halfClosed('GET', `/v1/sandboxes/${sandbox.id}/proxy/44772/ping`)).status, 200);
    const run = await halfClosed('POST', `/v1/sandboxes/${sandbox.id}/proxy/44772/command`, JSON.stringify({ command: 'echo one; sleep 1; echo two' }));
    assert.is(run.status, 200, run.body);
    // Until the guest's answer began, the client was asked whether it is still there (one that left would be told by a reset).
    assert.ok(run.interim.length > 0 && run.interim.every((line) => line === 'HTTP/1.1 102 Processing'), JSON.stringify(run.interim));
    assert.match(run.body, /"text":"one\\n"[\s\S]*"text":"two\\n"/);
    assert.match(run.body, /"type":"execution_complete"/);
  });

  test('a large download (sent raw, past the HTTP layer) reaches a client that half-closed, byte for byte', async () => {
    const file = join(fixture.root, 'large.bin');
    // Not repeating on a power of two: a byte out of place changes the hash.
    const bytes = Buffer.from(Array.from({ length: 3 * 1024 * 1024 + 7 }, (_, i) => (i * 7919) % 251));
    writeFileSync(file, bytes);
    const socket = connect(port, '127.0.0.1');
    socket.end(head('GET', `/v1/sandboxes/${sandbox.id}/proxy/44772/files/download?path=${encodeURIComponent(file)}`));
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    await new Promise((resolve, reject) => socket.on('close', resolve).on('error', reject));
    const text = Buffer.concat(chunks);
    // Its head as text: the interim and final answers' heads are ASCII, and the body follows the final one's blank line.
    const { head: final } = finalAnswer(text.subarray(0, 4096).toString('latin1'));
    assert.match(final, /^HTTP\/1\.1 200 /);
    const body = text.subarray(text.indexOf(final) + final.length + 4);
    assert.is(body.length, bytes.length);
    assert.is(createHash('sha256').update(body).digest('hex'), createHash('sha256').update(bytes).digest('hex'));
  });

  test('a client that closes its connection while a quiet command runs (as Python clients do on cancel: a FIN, no reset) stops it at once', async () => {
    const { socket, commandId } = await commandStarted('echo started; sleep 60', false);
    // end(), then destroy(): the FIN an ordinary close() sends; nothing is written to the client meanwhile.
    socket.end();
    socket.destroy();
    const started = Date.now();
    const status = await stoppedCommand(commandId);
    assert.equal([status.running, status.exit_code], [false, 137]);
    assert.ok(Date.now() - started < 5_000, `stopped after ${Date.now() - started} ms`);
  });

  test('a client that half-closed and then leaves stops its command, as one that leaves outright does', async () => {
    for (const halfClose of [true, false]) {
      const { socket, commandId } = await commandStarted('echo started; while :; do echo tick; sleep 0.2; done', halfClose);
      socket.destroy();
      const status = await stoppedCommand(commandId);
      assert.equal([status.running, status.exit_code], [false, 137], `half-closed first: ${halfClose}`);
    }
  });
}

test.run();
