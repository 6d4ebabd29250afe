/** isLoopbackHost and isLoopbackHostHeader: this machine only, decided on the text of the address. */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isLoopbackHost, isLoopbackHostHeader } from '../loopback.js';

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

test.run();
