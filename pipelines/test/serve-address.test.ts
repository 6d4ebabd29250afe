/**
 * serve's listener addresses: loopback only, decided on the text given (no name is resolved), with
 * IPv6 written any way the URL standard accepts.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { parseListenAddress } from '../../pipelines/index.js';

test('loopback addresses are accepted, in every spelling', () => {
  const cases: Array<[string, string, number]> = [
    ['127.0.0.1:8080', '127.0.0.1', 8080],
    ['127.200.3.4:0', '127.200.3.4', 0],
    ['localhost:9', '127.0.0.1', 9],
    ['8080', '127.0.0.1', 8080],
    ['[::1]:443', '::1', 443],
    ['[0:0:0:0:0:0:0:1]:1', '0:0:0:0:0:0:0:1', 1],
    ['[::ffff:127.0.0.1]:5', '::ffff:127.0.0.1', 5],
  ];
  for (const [text, host, port] of cases) assert.equal(parseListenAddress(text, '--listen'), { host, port }, text);
});

test('anything else is refused, naming the flag', () => {
  for (const text of ['0.0.0.0:80', '10.0.0.1:80', '128.0.0.1:80', '127.0.0.256:80', '127.1:80', '[::]:80', '[::2]:80', '[::ffff:10.0.0.1]:80', '[fe80::1%lo]:80', 'example.com:80', 'localhost.evil.com:80', ':80', '127.0.0.1:65536', '127.0.0.1', '[::1]']) {
    assert.throws(() => parseListenAddress(text, '--control'), (error: Error) => error.message.includes('--control'), text);
  }
});

test.run();
