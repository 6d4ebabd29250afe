/** isLoopbackHost and isLoopbackHostHeader: this machine only, decided on the text of the address. */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isLoopbackHost, isLoopbackHostHeader, isLoopbackOrigin } from '../loopback.js';

test('loopback in every spelling', () => {
  for (const host of ['127.0.0.1', '127.255.0.9', 'localhost', 'LocalHost', '::1', '0:0:0:0:0:0:0:1', '::0:1', '::ffff:127.0.0.1', '::ffff:7f00:1']) assert.ok(isLoopbackHost(host), host);
});

test('anything else, including names that only look like it', () => {
  for (const host of ['0.0.0.0', '::', '10.0.0.1', '128.0.0.1', '127.0.0.256', '127.1', '127.0.0.1.nip.io', 'localhost.example', '::2', '::ffff:10.0.0.1', 'fe80::1%lo', '', ' 127.0.0.1']) assert.not.ok(isLoopbackHost(host), host);
});

test('a Host header must name a loopback address (DNS rebinding sends another name)', () => {
  for (const host of [undefined, '127.0.0.1', '127.0.0.1:8765', 'localhost:8765', 'LOCALHOST', '[::1]:80', '[::1]', '127.9.9.9:1']) assert.ok(isLoopbackHostHeader(host), String(host));
  for (const host of ['evil.example', 'evil.example:8765', 'localhost.evil.example:8765', '127.0.0.1.nip.io:80', '10.0.0.1', '[::2]:80', '', 'localhost:', '127.0.0.1:80:80', '[::1', 'user@127.0.0.1']) assert.not.ok(isLoopbackHostHeader(host), host);
});

test('an Origin is a page of this machine when it is http(s) on a loopback host, any port', () => {
  for (const origin of ['http://127.0.0.1:4000', 'https://127.0.0.1', 'http://localhost:5173', 'http://[::1]:8080', 'http://127.8.0.1']) assert.ok(isLoopbackOrigin(origin), origin);
  for (const origin of ['null', 'https://evil.example', 'http://127.0.0.1.nip.io', 'http://localhost.evil.example', 'file://', 'chrome-extension://abc', 'ws://127.0.0.1', 'http://127.0.0.1, https://evil.example', '']) assert.not.ok(isLoopbackOrigin(origin), origin);
});

test.run();
