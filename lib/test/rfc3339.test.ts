/** isRfc3339: the date-times the gateway's records and sandboxd's expiresAt take, and the near misses Date.parse would let through. */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isRfc3339 } from '../rfc3339.js';

test('RFC 3339 date-times with a zone are taken', () => {
  for (const text of ['2026-05-02T08:00:03Z', '2026-05-02t08:00:03.123456789z', '2026-05-02 10:00:03.5+02:00', '2024-02-29T23:59:59-11:30', '0001-01-01T00:00:00Z', new Date(2 ** 53 / 1000).toISOString()]) {
    assert.ok(isRfc3339(text), text);
  }
});

test('other shapes, and days and hours that do not exist, are refused', () => {
  for (const text of ['', 'not a time', '2026-05-02', '2026-05-02T08:00:03', '2026-5-02T08:00:03Z', 'May 2, 2026 08:00 GMT', '2026-02-30T00:00:00Z', '2025-02-29T00:00:00Z', '2026-13-01T00:00:00Z', '2026-05-02T24:00:00Z', '2026-05-02T23:60:00Z', '2026-05-02T23:59:60Z', '2026-05-02T08:00:03+24:00', '2026-05-02T08:00:03+0200', ' 2026-05-02T08:00:03Z', '+010000-01-01T00:00:00.000Z']) {
    assert.not.ok(isRfc3339(text), text);
  }
});

test.run();
